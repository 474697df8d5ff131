"""Pod specs as the API server returns them, defaults filled in.

A parser reads `spec.containers[].resources.limits["nvidia.com/gpu"]`, `spec.restartPolicy`,
`spec.priority` and friends from real objects, where the API server has already defaulted every
field; the specs here carry the same defaults so code written against them works on live data.
"""

from __future__ import annotations

from typing import Any

from whyjob.sim.world import Experiment

__all__ = ["service_account_volume", "simple_spec", "training_spec"]

_TOLERATIONS_DEFAULT = [
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
]


def service_account_volume(suffix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The projected token volume every pod gets, and its mount."""
    name = f"kube-api-access-{suffix}"
    volume = {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        "name": "kube-root-ca.crt",
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                "path": "namespace",
                            }
                        ]
                    }
                },
            ],
        },
    }
    mount = {
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "name": name,
        "readOnly": True,
    }
    return volume, mount


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def training_spec(
    exp: Experiment,
    *,
    rank_index: int,
    master_addr: str,
    sa_suffix: str,
    hostname: str | None = None,
    subdomain: str | None = None,
    restart_policy: str = "OnFailure",
) -> dict[str, Any]:
    """One rank's pod spec: torchrun over `exp.gpus_per_pod` GPUs, rendezvous at the master."""
    sa_volume, sa_mount = service_account_volume(sa_suffix)
    port = "23456" if exp.launcher == "PyTorchJob" else "29500"
    config = f"configs/{exp.model}.yaml"
    command = [
        "torchrun",
        f"--nnodes={exp.ranks}",
        f"--nproc-per-node={exp.gpus_per_pod}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={master_addr}:{port}",
        exp.script,
        f"--config={config}",
        f"--output-dir={exp.ckpt_dir}",
    ]
    env = [
        _env("PYTHONUNBUFFERED", "1"),
        _env("NCCL_DEBUG", "INFO"),
        _env("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"key": "token", "name": "hf-token"}}},
    ]
    if exp.launcher == "PyTorchJob":
        env += [
            _env("MASTER_PORT", port),
            _env("PET_MASTER_PORT", port),
            _env("MASTER_ADDR", master_addr),
            _env("PET_MASTER_ADDR", master_addr),
            _env("WORLD_SIZE", str(exp.ranks)),
            _env("RANK", str(rank_index)),
            _env("PET_NPROC_PER_NODE", str(exp.gpus_per_pod)),
            _env("PET_NODE_RANK", str(rank_index)),
            _env("PET_NNODES", str(exp.ranks)),
        ]
    resources = {
        "limits": {
            "cpu": str(exp.cpu_request),
            "memory": f"{exp.memory_limit_gi}Gi",
            "nvidia.com/gpu": str(exp.gpus_per_pod),
        },
        "requests": {
            "cpu": str(exp.cpu_request),
            "memory": f"{exp.memory_request_gi}Gi",
            "nvidia.com/gpu": str(exp.gpus_per_pod),
        },
    }
    container: dict[str, Any] = {
        "command": command,
        "env": env,
        "image": exp.image,
        "imagePullPolicy": "IfNotPresent",
        "name": exp.container,
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"mountPath": "/dev/shm", "name": "dshm"},
            {"mountPath": exp.ckpt_dir, "name": "ckpt"},
            {"mountPath": "/data", "name": "datasets", "readOnly": True},
            sa_mount,
        ],
    }
    if exp.launcher == "PyTorchJob":
        container["ports"] = [
            {"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}
        ]
    spec: dict[str, Any] = {
        "containers": [container],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": restart_policy,
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
            *(dict(t) for t in _TOLERATIONS_DEFAULT),
        ],
        "volumes": [
            {"emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}, "name": "dshm"},
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": f"{exp.name}-ckpt"}},
            {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets-ro"}},
            sa_volume,
        ],
    }
    if exp.priority_class:
        spec["priorityClassName"] = exp.priority_class
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    return spec


def simple_spec(
    *,
    container: str,
    image: str,
    sa_suffix: str,
    cpu: str,
    memory: str,
    gpus: int = 0,
    restart_policy: str = "Always",
    command: list[str] | None = None,
    priority: int = 0,
    priority_class: str | None = None,
    memory_limit: str | None = None,
) -> dict[str, Any]:
    """A plain pod spec for the other tenants' pods (services, batch jobs, other experiments)."""
    sa_volume, sa_mount = service_account_volume(sa_suffix)
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {"memory": memory_limit or memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    body: dict[str, Any] = {
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "name": container,
        "resources": {"limits": limits, "requests": requests},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [sa_mount],
    }
    if command:
        body["command"] = command
    tolerations = [dict(t) for t in _TOLERATIONS_DEFAULT]
    if gpus:
        tolerations.insert(
            0, {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}
        )
    spec: dict[str, Any] = {
        "containers": [body],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": priority,
        "restartPolicy": restart_policy,
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
        "volumes": [sa_volume],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec
