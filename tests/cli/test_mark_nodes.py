"""`whyjob collect`'s opt-in `mark_nodes:` mode: nodes with maintenance ahead are labelled and
tainted through the official `kubernetes` client, against the API stand-in's PATCH (strategic
merge, resourceVersion conflicts), and unmarked once the notice has passed; nobody else's taint
is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.standins.kubeapi import KubeAPI, make_node
from whyjob.cli.marking import MarkLoop
from whyjob.collector.live.config import load_collect_config
from whyjob.collector.live.nodemarks import NodeMarker
from whyjob.core.entities import PodRecord
from whyjob.core.errors import ConfigError
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules

NOW = 1_772_625_600_000
MINUTE = 60_000
LABEL = "whyjob.io/maintenance-ahead"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _world(index: SqliteIndex, api: KubeAPI) -> int:
    """Two GPU nodes running pods; an EC2 reboot window opens on the first in 30 minutes."""
    for name in ("gpu-node-1", "gpu-node-2"):
        api.create("nodes", make_node(name, taints=[GPU_TAINT]))
        index.upsert_pods(
            [PodRecord(f"uid-{name}", "ml", f"train-{name}", seen=NOW - 10 * MINUTE, node=name,
                       created=NOW - 60 * MINUTE)]
        )  # fmt: skip
    starts = NOW + 30 * MINUTE
    index.write(
        [Evidence(evidence_id("aws.ec2", "i-1", "reboot"), starts, "aws.ec2",
                  "maintenance.scheduled", "EC2 system-reboot scheduled for i-1",
                  ts_end=starts + 120 * MINUTE, node="gpu-node-1",
                  attrs={"provider": "aws", "code": "system-reboot", "state": "scheduled"})]
    )  # fmt: skip
    return starts


def _loop(index_path: Path, api: KubeAPI, clock: list[int], taint: bool = True) -> MarkLoop:
    marker = NodeMarker(k8s.ApiClient(api.client_configuration()), LABEL, taint=taint)
    settings = {"window": 3600.0, "interval": 60.0}
    return MarkLoop(
        index_path, load_rules(), marker, settings, say=print, clock=lambda: clock[0] / 1000
    )


def _taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: t[k] for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])]


def test_a_node_with_maintenance_ahead_is_marked_then_unmarked(index: SqliteIndex) -> None:
    with KubeAPI() as api:
        starts = _world(index, api)
        clock = [NOW]
        loop = _loop(index.path, api, clock)
        assert loop.once() == ["marked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None
        assert node["metadata"]["labels"][LABEL] == str(starts // 1000)
        assert "EC2 system-reboot" in node["metadata"]["annotations"][f"{LABEL}-reason"]
        assert _taints(node) == [
            GPU_TAINT,
            {"key": LABEL, "value": str(starts // 1000), "effect": "NoSchedule"},
        ]
        untouched = api.get("nodes", None, "gpu-node-2")
        assert untouched is not None and LABEL not in untouched["metadata"]["labels"]
        # Marked already: the next round writes nothing.
        api.clear_requests()
        assert loop.once() == []
        assert not [r for r in api.requests if r.method == "PATCH"]
        # The window has passed: the label, the reason and our taint go; the GPU taint stays.
        clock[0] = starts + 121 * MINUTE
        assert loop.once() == ["unmarked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None and LABEL not in node["metadata"]["labels"]
        assert f"{LABEL}-reason" not in node["metadata"].get("annotations", {})
        assert _taints(node) == [GPU_TAINT]


def test_a_label_only_marker_never_taints(index: SqliteIndex) -> None:
    with KubeAPI() as api:
        _world(index, api)
        assert _loop(index.path, api, [NOW], taint=False).once() == ["marked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None and _taints(node) == [GPU_TAINT]
        assert LABEL in node["metadata"]["labels"]


def test_a_node_changed_meanwhile_is_left_for_the_next_round(index: SqliteIndex) -> None:
    with KubeAPI() as api:
        _world(index, api)
        loop = _loop(index.path, api, [NOW])
        core = loop.marker._core
        read = core.read_node

        def read_then_someone_writes(name: str, **kwargs: Any) -> Any:
            seen = read(name, **kwargs)
            node = api.get("nodes", None, name)
            assert node is not None
            node["metadata"]["labels"]["team"] = "infra"  # another controller, in between
            api.update("nodes", node)
            return seen

        core.read_node = read_then_someone_writes  # type: ignore[method-assign]
        assert loop.once() == ["gpu-node-1: changed meanwhile, next round"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None and node["metadata"]["labels"]["team"] == "infra"
        assert LABEL not in node["metadata"]["labels"]
        core.read_node = read  # type: ignore[method-assign]
        assert loop.once() == ["marked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None and node["metadata"]["labels"]["team"] == "infra"


def test_the_section_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("collectors:\n  kubernetes: {}\nmark_nodes:\n  taint: true\n")
    settings = load_collect_config(config).mark_nodes
    assert settings is not None
    assert (settings["label"], settings["taint"], settings["window"]) == (LABEL, True, 3600.0)
    config.write_text("collectors:\n  kubernetes: {}\nmark_nodes:\n  label: 'not a label!'\n")
    with pytest.raises(ConfigError, match="not a Kubernetes label key"):
        load_collect_config(config)
    config.write_text("collectors:\n  kubernetes: {}\n")
    assert load_collect_config(config).mark_nodes is None  # off unless asked for


def test_a_taint_left_after_its_label_was_taken_off_is_still_ours(index: SqliteIndex) -> None:
    with KubeAPI() as api:
        starts = _world(index, api)
        clock = [NOW]
        loop = _loop(index.path, api, clock)
        assert loop.once() == ["marked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None
        del node["metadata"]["labels"][LABEL]  # someone took the label off by hand
        api.update("nodes", node)
        clock[0] = starts + 121 * MINUTE
        assert loop.once() == ["unmarked gpu-node-1"]
        node = api.get("nodes", None, "gpu-node-1")
        assert node is not None and _taints(node) == [GPU_TAINT]


def test_one_node_refused_holds_up_no_other(index: SqliteIndex) -> None:
    with KubeAPI() as api:
        _world(index, api)
        index.write(
            [Evidence(evidence_id("aws.ec2", "i-2", "reboot"), NOW + 20 * MINUTE, "aws.ec2",
                      "maintenance.scheduled", "EC2 system-reboot scheduled for i-2",
                      ts_end=NOW + 80 * MINUTE, node="gpu-node-2",
                      attrs={"provider": "aws", "code": "system-reboot", "state": "scheduled"})]
        )  # fmt: skip
        loop = _loop(index.path, api, [NOW])
        core = loop.marker._core
        patch = core.patch_node

        def refuse_the_first(name: str, body: Any, **kwargs: Any) -> Any:
            if name == "gpu-node-1":
                raise k8s.ApiException(status=403, reason="Forbidden")
            return patch(name, body, **kwargs)

        core.patch_node = refuse_the_first  # type: ignore[method-assign]
        assert loop.once() == ["gpu-node-1: not changed: 403 Forbidden", "marked gpu-node-2"]
