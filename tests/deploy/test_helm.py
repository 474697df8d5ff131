"""The Helm chart and the plain manifests: linted and rendered by Helm's own Go code (v4, through
helm-python-sdk's C library: no helm binary is packaged for Debian or PyPI), every rendered
object checked against the Kubernetes JSON schemas in their strict form (kubernetes-validate;
an unknown field fails) and the ServiceMonitor against the fields of the Prometheus Operator's
CRD that the chart writes, and the wiring checked: ports, probes, volumes, Secrets, RBAC, and the config file through whyjob's
own loaders."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "whyjob"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
NAMESPACE = "whyjob"
# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest schemas.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.latest_version() + ".0")
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}

ALL_ON: dict[str, Any] = {
    "cluster": "gpu-east-1",
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "networkPolicy": {
        "enabled": True,
        "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "receiverFrom": [{"podSelector": {"matchLabels": {"app": "otel-collector"}}}],
    },
    "collector": {"markNodes": {"enabled": True, "taint": True}},
    "serve": {
        "replicas": 2,
        "publicUrl": "https://whyjob.example.com",
        "tokens": {"tokens": [{"name": "ops", "token": "t0k3n", "namespaces": ["*"]}]},
        "alerts": {"alertmanager": "http://alertmanager.monitoring:9093"},
    },
    "receiverToken": {"value": "agents-token"},
    "slack": {
        "enabled": True,
        "token": "xoxb-1",
        "signingSecret": "s3cret",
        "config": {"default_channel": "#ml-alerts"},
    },
    "agent": {"kernel": "journal", "cloud": "aws"},
    "config": {"retention": {"default": "90d", "kinds": {"log.line": "14d"}}},
}
ELASTICSEARCH: dict[str, Any] = {
    "index": {
        "backend": "elasticsearch",
        "elasticsearch": {
            "urls": ["https://elasticsearch-master.logging.svc:9200"],
            "apiKey": "aWQ6a2V5",
            "caSecret": "es-ca",
        },
    },
    "serve": {"replicas": 3},
}
EMPTYDIR: dict[str, Any] = {"index": {"sqlite": {"persistence": {"enabled": False}}}}
EXISTING_SECRETS: dict[str, Any] = {
    "receiverToken": {"existingSecret": "my-receiver"},
    "serve": {"tokens": {"existingSecret": "my-tokens"}},
    "slack": {"enabled": True, "existingSecret": "my-slack"},
    "index": {"sqlite": {"persistence": {"existingClaim": "my-index"}}},
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "all-on": ALL_ON,
    "elasticsearch": ELASTICSEARCH,
    "emptydir": EMPTYDIR,
    "existing-secrets": EXISTING_SECRETS,
}


def render(values: dict[str, Any]) -> dict[str, str]:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)  # as `helm template` does before rendering
        return chart.render(values, name="wj", namespace=NAMESPACE, is_install=True)


def objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for name, text in render(values).items():
        if name.endswith(".txt"):
            continue
        found += [doc for doc in yaml.safe_load_all(text) if doc]
    return found


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in found if o["kind"] == kind]


def named(found: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    (match,) = [
        o for o in of_kind(found, kind) if o["metadata"]["name"] == f"wj-whyjob-{component}"
    ]
    return match


def workloads(found: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from (o for o in found if o["kind"] in ("Deployment", "DaemonSet"))


def config_of(found: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        named(found, "ConfigMap", "config")["data"]["config.yaml"]
    )
    return loaded


# The ServiceMonitor fields the chart writes, as the Prometheus Operator's CRD
# (monitoring.coreos.com_servicemonitors.yaml) defines them, closed to any other field: no PyPI
# package ships that CRD's schema without a pytest plugin of its own.
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "labels": _LABELS,
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                    },
                },
            },
        },
    },
}


def check_schema(obj: dict[str, Any]) -> None:
    """The object against the strict Kubernetes schema of each supported version (an unknown
    field fails); a ServiceMonitor against SERVICE_MONITOR."""
    if obj["apiVersion"] == "monitoring.coreos.com/v1":
        jsonschema.validate(obj, SERVICE_MONITOR)
        return
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


# -- Helm's own lint and template ----------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_is_clean(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.27.0")
    assert report["errors"] == []
    # Severity 2 is a warning and 3 an error; `icon is recommended` (1) is only information.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_passes_the_kubernetes_schemas(values: dict[str, Any]) -> None:
    found = objects(values)
    assert len(found) >= 9
    for obj in found:
        check_schema(obj)


def test_the_schema_check_can_fail() -> None:
    service = named(objects({}), "Service", "collector")
    service["spec"]["ports"][0]["targetPortt"] = "metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        check_schema(service)
    monitor = named(objects(ALL_ON), "ServiceMonitor", "collector")
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        check_schema(monitor)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"serve": {"replicas": 0}}, "minimum"),
        ({"agent": {"kernel": "dmesg"}}, "agent/kernel"),
        ({"index": {"backend": "postgres"}}, "index/backend"),
        ({"collector": {"markNodez": {"enabled": True}}}, "markNodez"),
        ({"serve": {"tokens": {"tokens": [{"name": "a", "namespaces": ["x"]}]}}}, "tokens"),
    ],
)
def test_values_are_checked_against_values_schema(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=complaint):
        render(values)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"index": {"backend": "elasticsearch"}}, "needs index.elasticsearch.urls"),
        ({**EMPTYDIR, "serve": {"replicas": 2}}, "serve.replicas > 1"),
        ({"collector": {"receiver": {"enabled": False}}}, "agents send to it"),
    ],
)
def test_combinations_that_cannot_work_fail_to_render(
    values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(complaint)):
        render(values)


# -- the wiring ----------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_config_file_is_one_whyjob_accepts(
    values: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from whyjob.api.config import load_surface_config
    from whyjob.collector.live.config import load_collect_config
    from whyjob.core.settings import load_settings

    found = objects(values)
    path = tmp_path / "config.yaml"
    path.write_text(named(found, "ConfigMap", "config")["data"]["config.yaml"])
    # whyjob refuses a receiver open to other machines without a token: the collector (and
    # every agent) gets one from a Secret.
    for workload in workloads(found):
        containers = workload["spec"]["template"]["spec"]["containers"]
        if containers[0]["name"] in ("collect", "agent"):
            env = {e["name"]: e for e in containers[0]["env"]}
            assert "secretKeyRef" in env["WHYJOB_RECEIVER_TOKEN"]["valueFrom"]
    monkeypatch.setenv("WHYJOB_RECEIVER_TOKEN", "from-the-secret")
    settings = load_settings(path, environ={})
    collect = load_collect_config(path)
    surface = load_surface_config(path)
    assert collect.metrics_listen == ("0.0.0.0", 9464)
    assert collect.receiver is not None and collect.receiver["listen"] == ("0.0.0.0", 4318)
    assert surface["api"]["listen"] == ("0.0.0.0", 8080)
    if values.get("index", {}).get("backend") == "elasticsearch":
        assert not isinstance(settings.location, Path)
    else:
        assert settings.location == Path("/var/lib/whyjob/index.sqlite")


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_collector_service_exposes_the_metrics_and_the_receiver_the_config_names(
    values: dict[str, Any],
) -> None:
    found = objects(values)
    config = config_of(found)
    service = named(found, "Service", "collector")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["receiver"] == int(config["receiver"]["listen"].rpartition(":")[2])
    assert ports["metrics"] == int(config["metrics"]["listen"].rpartition(":")[2])
    # The agents send to exactly that Service, namespace and port.
    assert config["agent"]["send_to"] == f"http://wj-whyjob-collector.{NAMESPACE}.svc:4318"


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_services_select_pods_that_have_the_ports_they_target(values: dict[str, Any]) -> None:
    found = objects(values)
    for service in of_kind(found, "Service"):
        selector = service["spec"]["selector"]
        pods = [
            w["spec"]["template"]
            for w in workloads(found)
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert pods, service["metadata"]["name"]
        names = {
            p["name"] for pod in pods for c in pod["spec"]["containers"] for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in names, (service["metadata"]["name"], port)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_probes_ask_livez_and_readyz_on_a_port_of_the_container(values: dict[str, Any]) -> None:
    for workload in workloads(objects(values)):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            ports = {p["name"] for p in container["ports"]}
            assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["readinessProbe"]["httpGet"]["port"] in ports
            assert container["livenessProbe"]["httpGet"]["port"] in ports


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_mounts_volumes_and_secrets_exist(values: dict[str, Any]) -> None:
    found = objects(values)
    secrets = {
        s["metadata"]["name"]: set(s.get("stringData", {})) | set(s.get("data", {}))
        for s in of_kind(found, "Secret")
    }
    existing = {"my-receiver", "my-tokens", "my-slack", "es-ca"}  # the values' own Secrets
    for workload in workloads(found):
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            for mount in container["volumeMounts"]:
                assert mount["name"] in volumes, (workload["metadata"]["name"], mount)
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in existing and not ref.get("optional"):
                    assert ref["key"] in secrets[ref["name"]], ref
        for volume in volumes.values():
            if "secret" in volume and volume["secret"]["secretName"] not in existing:
                assert volume["secret"]["secretName"] in secrets
            if "configMap" in volume:
                assert volume["configMap"]["name"] in {
                    c["metadata"]["name"] for c in of_kind(found, "ConfigMap")
                }


def _rules(found: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (role["metadata"]["name"], rule)
        for role in found
        if role["kind"] in ("Role", "ClusterRole")
        for rule in role["rules"]
    ]


def test_rbac_is_read_only_by_default() -> None:
    found = objects({})
    rules = _rules(found)
    assert rules
    for name, rule in rules:
        assert not WRITE_VERBS & set(rule["verbs"]), (name, rule)
    assert not any("leases" in rule["resources"] for _, rule in rules)
    # Only the collector's token is mounted; the agent and serve never talk to the API server.
    mounted = {
        sa["metadata"]["name"]: sa["automountServiceAccountToken"]
        for sa in of_kind(found, "ServiceAccount")
    }
    assert mounted == {
        "wj-whyjob-collector": True,
        "wj-whyjob-agent": False,
        "wj-whyjob-serve": False,
    }


def test_write_verbs_come_only_with_the_node_marker_and_the_lease() -> None:
    found = objects(ALL_ON)
    writes = {
        (name, resource, verb)
        for name, rule in _rules(found)
        for resource in rule["resources"]
        for verb in set(rule["verbs"]) & WRITE_VERBS
    }
    assert writes == {
        ("wj-whyjob-node-marker", "nodes", "patch"),
        ("wj-whyjob-serve-lease", "leases", "create"),
        ("wj-whyjob-serve-lease", "leases", "update"),
    }
    (lease_binding,) = [
        b for b in of_kind(found, "RoleBinding") if b["roleRef"]["name"] == "wj-whyjob-serve-lease"
    ]
    assert lease_binding["subjects"][0]["name"] == "wj-whyjob-serve"
    config = config_of(found)
    assert config["api"]["lease"] == f"{NAMESPACE}/wj-whyjob-serve"
    assert config["mark_nodes"]["taint"] is True
    assert named(found, "Deployment", "serve")["spec"]["replicas"] == 2


def test_sqlite_keeps_serve_on_the_collector_node_and_an_emptydir_runs_it_in_the_collector_pod() -> (
    None
):
    found = objects({})
    affinity = named(found, "Deployment", "serve")["spec"]["template"]["spec"]["affinity"]
    (term,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "collector"
    assert of_kind(found, "PersistentVolumeClaim")

    alongside = objects(EMPTYDIR)
    assert not [
        o for o in of_kind(alongside, "Deployment") if o["metadata"]["name"].endswith("serve")
    ]
    pod = named(alongside, "Deployment", "collector")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["collect", "serve"]
    assert {v["name"]: v for v in pod["volumes"]}["index"] == {"name": "index", "emptyDir": {}}
    assert not of_kind(alongside, "PersistentVolumeClaim")
    # The user-facing server beside the collector gets none of the collector's API access.
    assert pod["automountServiceAccountToken"] is False
    mounts = {c["name"]: {m["name"] for m in c.get("volumeMounts", [])} for c in pod["containers"]}
    assert "kube-api-access" in mounts["collect"] and "kube-api-access" not in mounts["serve"]
    projected = {v["name"]: v for v in pod["volumes"]}["kube-api-access"]["projected"]
    assert {"serviceAccountToken", "configMap", "downwardAPI"} == {
        key for source in projected["sources"] for key in source
    }
    assert (
        "automountServiceAccountToken"
        not in named(found, "Deployment", "collector")["spec"]["template"]["spec"]
    )  # a collector alone keeps the kubelet's own mount


def test_without_tokens_the_chart_keeps_one_in_a_secret_not_in_a_log() -> None:
    found = objects({})
    secret = named(found, "Secret", "tokens")
    document = yaml.safe_load(base64.b64decode(secret["data"]["tokens.yaml"]))
    (admin,) = document["tokens"]
    assert admin["namespaces"] == ["*"] and len(admin["token"]) == 40
    assert config_of(found)["api"]["tokens"] == "/etc/whyjob/tokens/tokens.yaml"
    mine = [{"name": "a", "token": "t" * 32, "namespaces": ["ml"]}]
    given = objects({"serve": {"tokens": {"tokens": mine}}})
    assert "stringData" in named(given, "Secret", "tokens")  # the values' own tokens
    proxied = objects({"serve": {"api": {"proxy_cidrs": ["10.0.0.0/8"]}}})
    assert not [o for o in of_kind(proxied, "Secret") if o["metadata"]["name"].endswith("tokens")]


def test_pods_restart_together_when_the_receiver_token_changes() -> None:
    found = objects({})
    token = base64.b64decode(named(found, "Secret", "receiver-token")["data"]["token"])
    digest = hashlib.sha256(base64.b64encode(token)).hexdigest()
    for component, kind in (("collector", "Deployment"), ("agent", "DaemonSet")):
        annotations = named(found, kind, component)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/receiver-token"] == digest, component
    fixed = objects({"receiverToken": {"value": "s" * 40}})
    again = objects({"receiverToken": {"value": "s" * 40}})
    assert (
        named(fixed, "Deployment", "collector")["spec"]["template"]["metadata"]["annotations"]
        == named(again, "Deployment", "collector")["spec"]["template"]["metadata"]["annotations"]
    )


def test_elasticsearch_has_no_volume_and_its_key_comes_from_a_secret() -> None:
    found = objects(ELASTICSEARCH)
    assert not of_kind(found, "PersistentVolumeClaim")
    config = config_of(found)
    assert config["index"]["backend"] == "elasticsearch"
    assert "api_key" not in config["index"]  # never in the ConfigMap
    assert config["index"]["ca_certs"] == "/etc/whyjob/es/ca.crt"
    serve = named(found, "Deployment", "serve")["spec"]["template"]["spec"]
    assert "affinity" not in serve  # any node: the index is reachable from everywhere
    env = {e["name"]: e for e in serve["containers"][0]["env"]}
    assert (
        env["WHYJOB_ES_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "wj-whyjob-elasticsearch"
    )
    assert named(found, "Secret", "elasticsearch")["stringData"]["api-key"] == "aWQ6a2V5"


def test_the_agent_mounts_what_its_kernel_source_reads() -> None:
    kmsg = named(objects({}), "DaemonSet", "agent")["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in kmsg["containers"][0]["volumeMounts"]}
    assert {"/dev/kmsg", "/var/log/pods", "/var/lib/whyjob-agent"} <= mounts
    assert kmsg["containers"][0]["securityContext"]["capabilities"]["add"] == ["SYSLOG"]
    assert kmsg["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"operator": "Exists"} in kmsg["tolerations"]

    found = objects(ALL_ON)
    journal = named(found, "DaemonSet", "agent")["spec"]["template"]["spec"]
    config = config_of(found)["agent"]
    assert config["kernel"] == "journal"
    mounts = {m["mountPath"]: m for m in journal["containers"][0]["volumeMounts"]}
    assert mounts[config["journal_dir"]]["readOnly"] is True
    assert "/dev/kmsg" not in mounts
    assert "add" not in journal["containers"][0]["securityContext"]["capabilities"]
    # journal mode runs journalctl: the image must have it.
    assert "systemd" in _apt_packages()


# -- the image -----------------------------------------------------------------------------------


def _apt_packages() -> set[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    packages: set[str] = set()
    for line in text.splitlines():
        if "apt-get install" in line:
            words = line.split("apt-get install", 1)[1].split("&&")[0].split()
            packages |= {w for w in words if not w.startswith("-")}
    return packages


def test_the_dockerfile_installs_journalctl_and_copies_every_package() -> None:
    text = DOCKERFILE.read_text()
    assert "systemd" in _apt_packages()
    assert re.search(r"rm -rf /var/lib/apt/lists", text)  # no apt lists left in the image
    # Every source folder pyproject maps into the whyjob package is copied before pip install.
    import tomllib

    dirs = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"
        ].values()
    )
    copied = set(re.findall(r"^COPY (\w+) \1$", text, re.MULTILINE))
    assert dirs <= copied, dirs - copied
    assert re.search(r"^USER 10001$", text, re.MULTILINE)  # the chart's runAsUser


# -- the plain manifests ---------------------------------------------------------------------------

PLAIN = sorted(p for p in (ROOT / "deploy").glob("*.yaml"))


@pytest.mark.parametrize("path", PLAIN, ids=[p.name for p in PLAIN])
def test_every_plain_manifest_passes_the_kubernetes_schemas(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for obj in docs:
        check_schema(obj)


def _plain(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text()) if d]


def test_the_plain_collector_service_exposes_the_receiver_its_config_listens_on() -> None:
    found = _plain("collect.yaml")
    config = yaml.safe_load(of_kind(found, "ConfigMap")[0]["data"]["config.yaml"])
    (service,) = of_kind(found, "Service")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["receiver"] == int(config["receiver"]["listen"].rpartition(":")[2])
    agent_config = yaml.safe_load(
        of_kind(_plain("agent.yaml"), "ConfigMap")[0]["data"]["config.yaml"]
    )
    assert agent_config["agent"]["send_to"].endswith(f"{service['metadata']['name']}.whyjob:4318")


def test_the_plain_serve_manifest_reads_the_collectors_volume_on_its_node() -> None:
    found = _plain("serve.yaml")
    (deployment,) = of_kind(found, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"whyjob-index"}  # deploy/collect.yaml's
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "whyjob-collect"}
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (service,) = of_kind(found, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
