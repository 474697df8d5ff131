"""The `collectors:` and `metrics:` sections of the config file: what `whyjob collect` runs.

The same file as every other setting (docs/configuration.md); the rest of it is read by
core/settings.py. Strict like the rule files: an unknown key, a wrong type or a bad duration is
an error naming the file and the line (each section is checked by a pydantic model made from
its spec below: core/configmodel.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from whyjob.core.configfile import ConfigFile, parse_duration_s

__all__ = [
    "AGENT_KEYS",
    "COLLECTOR_KEYS",
    "MARK_KEYS",
    "METRICS_KEYS",
    "RECEIVER_KEYS",
    "CollectConfig",
    "load_collect_config",
    "parse_duration_s",
]

# Each collector's keys with their type and default (the kinds of core/configfile.py): `list`
# takes a list of strings, `names:a,b` a list of some of a and b, `duration` takes "30s", "5m",
# "1h" or a number of seconds.
COLLECTOR_KEYS: Final[Mapping[str, Mapping[str, tuple[str, Any]]]] = {
    "kubernetes": {
        "kubeconfig": ("path", None),
        "context": ("str", None),
        "in_cluster": ("bool", False),
        "resources": ("names:events,events.k8s.io,pods,nodes", ["events.k8s.io", "pods", "nodes"]),
        "page_size": ("int", 500),
        "watch_timeout": ("duration", 300.0),
        "watch_silence": ("duration", 180.0),
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
AGENT_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "send_to": ("str", None),
    "token": ("str", None),
    "node": ("str", None),
    "spool": ("path", Path("/var/lib/whyjob-agent")),
    "cloud": ("choice:none,aws,gce,azure", "none"),
    "metadata_interval": ("duration", 5.0),
    "kernel": ("str|off", "/dev/kmsg"),  # a path, `journal` or `off`
    "journal_dir": ("path", None),
    "pod_logs": ("str|off", "/var/log/pods"),
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
# The opt-in `mark_nodes:` mode: label (and optionally taint) nodes with a notice ahead.
MARK_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "label": ("str", "whyjob.io/maintenance-ahead"),
    "taint": ("bool", False),
    "window": ("duration", 3600.0),
    "interval": ("duration", 60.0),
    "kubeconfig": ("path", None),
    "context": ("str", None),
    "in_cluster": ("bool", False),
}
METRICS_KEYS: Final[Mapping[str, tuple[str, Any]]] = {"listen": ("listen", ("127.0.0.1", 9464))}
_LABEL_KEY: Final = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
)


@dataclass(frozen=True, slots=True)
class CollectConfig:
    """A parsed config file: the index to write, the metrics address, and each collector's
    settings (defaults filled in)."""

    path: Path
    metrics_listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    receiver: dict[str, Any] | None = None  # None: no receiver
    agent: dict[str, Any] | None = None  # the `agent:` section, for `whyjob agent`
    mark_nodes: dict[str, Any] | None = None  # None: nodes are never written to


def load_collect_config(path: Path) -> CollectConfig:
    """Read and check a config file; raises ConfigError naming the file and line."""
    f = ConfigFile(path)
    root = f.root
    if root.value is None:
        raise f.error(root, "the config file is empty: it needs at least `collectors:`")
    top = f.top
    listen: tuple[str, int] | None = f.section(top.get("metrics"), METRICS_KEYS, "metrics")[
        "listen"
    ]
    receiver = None
    if "receiver" in top:
        receiver = f.section(top["receiver"], RECEIVER_KEYS, "receiver")
        receiver["token"] = receiver["token"] or os.environ.get("WHYJOB_RECEIVER_TOKEN")
        if receiver["listen"] is None:
            receiver = None
        elif (
            receiver["listen"][0] not in ("127.0.0.1", "localhost", "::1") and not receiver["token"]
        ):
            raise f.error(
                top["receiver"],
                f"receiver.listen {receiver['listen'][0]} is reachable from other machines: set "
                "receiver.token (or WHYJOB_RECEIVER_TOKEN), or anyone who reaches it could write evidence",
            )
    agent = None
    if "agent" in top:
        agent = f.section(top["agent"], AGENT_KEYS, "agent")
        agent["token"] = agent["token"] or os.environ.get("WHYJOB_RECEIVER_TOKEN")
        if not agent["send_to"]:
            raise f.error(top["agent"], "agent.send_to names the collector's receiver URL")
    mark_nodes = None
    if "mark_nodes" in top:
        mark_nodes = f.section(top["mark_nodes"], MARK_KEYS, "mark_nodes")
        if not _LABEL_KEY.fullmatch(mark_nodes["label"]):
            raise f.error(
                top["mark_nodes"],
                f"mark_nodes.label {mark_nodes['label']!r} is not a Kubernetes label key "
                "(an optional DNS prefix and '/', then up to 63 of [A-Za-z0-9._-])",
            )
    if "collectors" not in top and receiver is None and agent is None:
        raise f.error(root, "no `collectors:` section: name at least one collector")
    sections = (
        f.mapping(top["collectors"], "collectors", set(COLLECTOR_KEYS))
        if "collectors" in top
        else {}
    )
    collectors: dict[str, dict[str, Any]] = {}
    for name, node in sections.items():
        collectors[name] = f.section(node, COLLECTOR_KEYS[name], f"collectors.{name}")
    if not collectors and receiver is None and agent is None:
        raise f.error(top["collectors"], "`collectors:` names no collector")
    return CollectConfig(path, listen, collectors, receiver, agent, mark_nodes)
