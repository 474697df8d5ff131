"""The `collectors:` and `metrics:` sections of the config file: what `whyjob collect` runs.

The same file as every other setting (docs/configuration.md); the rest of it is read by
core/settings.py. Strict like the rule files: an unknown key, a wrong type or a bad duration is
an error naming the file and the line.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from whyjob.core.errors import ConfigError
from whyjob.core.yamllines import Located, load_located

__all__ = [
    "AGENT_KEYS",
    "COLLECTOR_KEYS",
    "RECEIVER_KEYS",
    "CollectConfig",
    "load_collect_config",
    "parse_duration_s",
]

# Each collector's keys with their type and default. A type of `list` takes a list of strings,
# `duration` takes "30s", "5m", "1h" or a number of seconds.
COLLECTOR_KEYS: Final[Mapping[str, Mapping[str, tuple[str, Any]]]] = {
    "kubernetes": {
        "kubeconfig": ("path", None),
        "context": ("str", None),
        "in_cluster": ("bool", False),
        "resources": ("list", ["events.k8s.io", "pods", "nodes"]),
        "page_size": ("int", 500),
        "watch_timeout": ("duration", 300.0),
        "capture": ("bool", True),
        "capture_tail_lines": ("int", 500),
        "capture_all_pods": ("bool", False),
    },
    "asg": {
        "region": ("str", None),
        "profile": ("str", None),
        "groups": ("list", []),
        "interval": ("duration", 60.0),
    },
    "dcgm": {
        "prometheus": ("str", None),
        "targets": ("list", []),
        "step": ("duration", 15.0),
        "interval": ("duration", 30.0),
        "timeout": ("duration", 30.0),
    },
    "ec2_status": {
        "region": ("str", None),
        "profile": ("str", None),
        "instances": ("list", []),
        "interval": ("duration", 300.0),
    },
}
_CHOICES: Final[Mapping[tuple[str, str], set[str]]] = {
    ("kubernetes", "resources"): {"events", "events.k8s.io", "pods", "nodes"},
}
_TOP_KEYS: Final = {
    "index", "cluster", "experiments", "rules", "logs", "metrics", "receiver", "collectors", "agent",
}  # fmt: skip
AGENT_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "send_to": ("str", None),
    "token": ("str", None),
    "node": ("str", None),
    "spool": ("path", Path("/var/lib/whyjob-agent")),
    "cloud": ("choice:none,aws,gce,azure", "none"),
    "metadata_interval": ("duration", 5.0),
    "kernel": ("str", "/dev/kmsg"),
    "pod_logs": ("str", "/var/log/pods"),
    "keep": ("choice:classified,all", "classified"),
    "context_lines": ("int", 20),
    "progress_every": ("duration", 30.0),
}
RECEIVER_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "listen": ("listen", None),
    "token": ("str", None),
    "keep": ("choice:classified,all", "classified"),
    "context_lines": ("int", 20),
    "progress_every": ("duration", 30.0),
}
_METRICS_KEYS: Final = {"listen"}
_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(value: object) -> float:
    """`30s`, `5m`, `1h`, or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str) and value[-1:] in _UNITS:
        try:
            number = float(value[:-1])
        except ValueError:
            pass
        else:
            if number > 0:
                return number * _UNITS[value[-1]]
    raise ValueError(f"{value!r} is not a duration (30s, 5m, 1h or seconds)")


@dataclass(frozen=True, slots=True)
class CollectConfig:
    """A parsed config file: the index to write, the metrics address, and each collector's
    settings (defaults filled in)."""

    path: Path
    metrics_listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    receiver: dict[str, Any] | None = None  # None: no receiver
    agent: dict[str, Any] | None = None  # the `agent:` section, for `whyjob agent`


class _File:
    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, node: Located | None, message: str) -> ConfigError:
        line = f":{node.line}" if node is not None else ""
        return ConfigError(f"{self.path}{line}: {message}")

    def mapping(self, node: Located, what: str, known: set[str]) -> dict[str, Located]:
        if not isinstance(node.value, dict):
            raise self.error(node, f"{what} must be a mapping")
        for key, value in node.value.items():
            if key not in known:
                hint = difflib.get_close_matches(key, sorted(known), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise self.error(value, f"unknown key {key!r} in {what}{suggestion}")
        return dict(node.value)


def _value(f: _File, node: Located, kind: str, key: str) -> Any:
    value = node.value
    if kind == "duration":
        try:
            return parse_duration_s(value)
        except ValueError as exc:
            raise f.error(node, f"{key}: {exc}") from None
    if kind == "bool":
        if not isinstance(value, bool):
            raise f.error(node, f"{key} takes true or false")
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise f.error(node, f"{key} takes a positive whole number")
        return value
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v.value, str) for v in value):
            raise f.error(node, f"{key} takes a list of names")
        return [v.value for v in value]
    if kind.startswith("choice:"):
        allowed = kind.split(":", 1)[1].split(",")
        if value not in allowed:
            raise f.error(node, f"{key} takes one of {allowed}, not {value!r}")
        return value
    if kind == "listen":
        return _listen(f, node, key)
    if kind in ("str", "path"):
        if not isinstance(value, str) or not value:
            raise f.error(node, f"{key} takes a string")
        return Path(value).expanduser() if kind == "path" else value
    raise AssertionError(kind)


def _listen(f: _File, node: Located, key: str = "metrics.listen") -> tuple[str, int] | None:
    value = node.value
    if value in (None, False, "off"):
        return None
    host, _, port = str(value).rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise f.error(node, f"{key} takes HOST:PORT or off, not {value!r}")
    return host or "0.0.0.0", int(port)


def load_collect_config(path: Path) -> CollectConfig:
    """Read and check a config file; raises ConfigError naming the file and line."""
    f = _File(path)
    try:
        root = load_located(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if root.value is None:
        raise f.error(root, "the config file is empty: it needs at least `collectors:`")
    top = f.mapping(root, "the config file", _TOP_KEYS)
    listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    if "metrics" in top:
        metrics = f.mapping(top["metrics"], "metrics", _METRICS_KEYS)
        if "listen" in metrics:
            listen = _listen(f, metrics["listen"])
    receiver = None
    if "receiver" in top:
        given = f.mapping(top["receiver"], "receiver", set(RECEIVER_KEYS))
        receiver = {key: default for key, (_, default) in RECEIVER_KEYS.items()}
        for key, value in given.items():
            receiver[key] = _value(f, value, RECEIVER_KEYS[key][0], f"receiver.{key}")
        receiver["token"] = receiver["token"] or os.environ.get("WHYJOB_RECEIVER_TOKEN")
        if receiver["listen"] is None:
            receiver = None
    agent = None
    if "agent" in top:
        given = f.mapping(top["agent"], "agent", set(AGENT_KEYS))
        agent = {key: default for key, (_, default) in AGENT_KEYS.items()}
        for key, value in given.items():
            agent[key] = _value(f, value, AGENT_KEYS[key][0], f"agent.{key}")
        agent["token"] = agent["token"] or os.environ.get("WHYJOB_RECEIVER_TOKEN")
        if not agent["send_to"]:
            raise f.error(top["agent"], "agent.send_to names the collector's receiver URL")
    if "collectors" not in top and receiver is None and agent is None:
        raise f.error(root, "no `collectors:` section: name at least one collector")
    sections = (
        f.mapping(top["collectors"], "collectors", set(COLLECTOR_KEYS))
        if "collectors" in top
        else {}
    )
    collectors: dict[str, dict[str, Any]] = {}
    for name, node in sections.items():
        spec = COLLECTOR_KEYS[name]
        given = f.mapping(node, f"collectors.{name}", set(spec)) if node.value is not None else {}
        settings = {key: default for key, (_, default) in spec.items()}
        for key, value in given.items():
            settings[key] = _value(f, value, spec[key][0], f"collectors.{name}.{key}")
            allowed = _CHOICES.get((name, key))
            if allowed is not None and not set(settings[key]) <= allowed:
                wrong = sorted(set(settings[key]) - allowed)[0]
                raise f.error(
                    value, f"collectors.{name}.{key}: unknown {wrong!r} (one of {sorted(allowed)})"
                )
        collectors[name] = settings
    if not collectors and receiver is None and agent is None:
        raise f.error(top["collectors"], "`collectors:` names no collector")
    return CollectConfig(path, listen, collectors, receiver, agent)
