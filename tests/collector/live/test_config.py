"""The `collectors:` and `metrics:` sections: defaults, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from whyjob.collector.live.config import load_collect_config, parse_duration_s
from whyjob.core.errors import ConfigError
from whyjob.core.settings import load_settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_fill_what_the_file_leaves_out(tmp_path: Path) -> None:
    path = _write(tmp_path, "cluster: east\ncollectors:\n  kubernetes:\n    context: prod\n")
    config = load_collect_config(path)
    settings = config.collectors["kubernetes"]
    assert settings["context"] == "prod" and settings["capture"] is True
    assert settings["resources"] == ["events.k8s.io", "pods", "nodes"]
    assert settings["watch_timeout"] == 300.0
    assert config.metrics_listen == ("127.0.0.1", 9464)
    # The same file still serves every other setting.
    assert load_settings(path).cluster == "east"


def test_listen_off_and_durations(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "metrics: {listen: 'off'}\ncollectors:\n  kubernetes: {watch_timeout: 90s, page_size: 50}\n",
    )
    config = load_collect_config(path)
    assert config.metrics_listen is None
    assert config.collectors["kubernetes"]["watch_timeout"] == 90.0
    assert parse_duration_s("2h") == 7200.0 and parse_duration_s(15) == 15.0


@pytest.mark.parametrize("spelling", ["off", "'off'"])
def test_agent_sources_turned_off_as_documented(tmp_path: Path, spelling: str) -> None:
    """`off` bare (which YAML reads as false) or quoted: both turn a source off."""
    path = _write(
        tmp_path,
        f"agent:\n  send_to: http://c:4318\n  kernel: {spelling}\n  pod_logs: {spelling}\n",
    )
    agent = load_collect_config(path).agent
    assert agent is not None and (agent["kernel"], agent["pod_logs"]) == ("off", "off")
    path.write_text("agent:\n  send_to: http://c:4318\n  kernel: true\n")
    with pytest.raises(ConfigError, match=r"agent.kernel takes a string or off"):
        load_collect_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "collectors:\n  kubernetes:\n    contxt: prod\n",
            ":3: unknown key 'contxt' in collectors.kubernetes (did you mean 'context'?)",
        ),
        (
            "collectors:\n  kubernets: {}\n",
            ":2: unknown key 'kubernets' in collectors (did you mean 'kubernetes'?)",
        ),
        (
            "collectors:\n  kubernetes:\n    watch_timeout: soon\n",
            ":3: collectors.kubernetes.watch_timeout: 'soon' is not a duration",
        ),
        (
            "collectors:\n  kubernetes:\n    resources: [pods, jobs]\n",
            ":3: collectors.kubernetes.resources: unknown 'jobs'",
        ),
        (
            "collectors:\n  kubernetes:\n    capture: yes please\n",
            ":3: collectors.kubernetes.capture takes true or false",
        ),
        (
            "metrics:\n  listen: localhost\ncollectors: {kubernetes: {}}\n",
            ":2: metrics.listen takes HOST:PORT or off",
        ),
        ("index: x.sqlite\n", ":1: no `collectors:` section"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_collect_config(path)
    assert str(raised.value).startswith(f"{path}{message}"), str(raised.value)


def test_the_deployment_example_is_a_valid_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    deploy = Path(__file__).parents[3] / "deploy" / "collect.yaml"
    documents = list(yaml.safe_load_all(deploy.read_text()))
    config_map = next(d for d in documents if d["kind"] == "ConfigMap")
    path = _write(tmp_path, config_map["data"]["config.yaml"])
    # The open receiver's token comes from a Secret, as the Deployment's environment.
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    env = {e["name"]: e for c in deployment["spec"]["template"]["spec"]["containers"]
           for e in c.get("env", [])}  # fmt: skip
    assert "secretKeyRef" in env["WHYJOB_RECEIVER_TOKEN"]["valueFrom"]
    monkeypatch.setenv("WHYJOB_RECEIVER_TOKEN", "from-the-secret")
    config = load_collect_config(path)
    assert config.collectors["kubernetes"]["in_cluster"] is True
    assert config.metrics_listen == ("0.0.0.0", 9464)
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    granted = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    needed = {
        ("", "events"),
        ("", "pods"),
        ("", "nodes"),
        ("", "pods/log"),
        ("events.k8s.io", "events"),
    }
    assert needed <= granted


def test_the_documented_example_is_a_valid_config(tmp_path: Path) -> None:
    import re

    docs = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text()
    example = next(b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "collectors:" in b)
    config = load_collect_config(_write(tmp_path, example))
    assert set(config.collectors) == {"kubernetes", "dcgm", "asg", "ec2_status"}
    assert config.collectors["dcgm"]["step"] == 15.0


def test_the_documented_receiver_and_agent_sections_are_valid(tmp_path: Path) -> None:
    import re

    docs = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text()
    example = next(b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "agent:" in b)
    config = load_collect_config(_write(tmp_path, example))
    assert config.receiver is not None and config.receiver["listen"] == ("0.0.0.0", 4318)
    assert config.agent is not None and config.agent["cloud"] == "aws"
    assert config.agent["spool"] == Path("/var/lib/whyjob-agent")


def test_a_receiver_others_can_reach_needs_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WHYJOB_RECEIVER_TOKEN", raising=False)
    path = _write(tmp_path, "receiver:\n  listen: 0.0.0.0:4318\n")
    with pytest.raises(ConfigError, match=r"receiver\.token"):
        load_collect_config(path)
    monkeypatch.setenv("WHYJOB_RECEIVER_TOKEN", "s3cret")
    assert load_collect_config(path).receiver is not None
    assert (
        load_collect_config(_write(tmp_path, "receiver:\n  listen: 127.0.0.1:4318\n")).receiver
        is not None
    )
