"""truth.json is consistent with itself and with the bundle it describes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.core.taxonomy import CATEGORIES
from whyjob.sim import Truth

Bundle = Callable[..., tuple[Path, Truth]]
STARTUP = {"startup.image_pull", "startup.unschedulable", "startup.config"}


def test_truth_is_consistent(bundle: Bundle, files: Any, case: tuple[str, int]) -> None:
    scenario, seed = case
    out, truth = bundle(scenario, seed)
    keys = {a.key for a in truth.attempts}
    assert len(keys) == len(truth.attempts), "attempt keys are unique"
    assert truth.attempts
    for attempt in truth.attempts:
        assert attempt.category in CATEGORIES
        assert attempt.key == f"{attempt.pod_uid}/{attempt.container}/{attempt.restart}"
        if attempt.category == "peer.failure":
            assert attempt.caused_by in keys and attempt.caused_by != attempt.key
            cause = truth.attempt(attempt.caused_by)
            assert cause.category not in ("peer.failure", "job.completed")
        else:
            assert attempt.caused_by is None
        if attempt.ended_at is not None:
            assert attempt.started_at <= attempt.ended_at
        if attempt.category == "job.completed":
            assert attempt.failed_at is None
        elif attempt.ended_at is not None:
            assert attempt.failed_at is not None and attempt.failed_at <= attempt.ended_at
        if attempt.category in STARTUP:
            assert attempt.restart == 0 and attempt.ended_at is None
        elif attempt.category != "job.completed" or attempt.ended_at is not None:
            log = (
                out / "var/log/pods" / f"{truth.experiment['namespace']}_{attempt.pod}_"
                f"{attempt.pod_uid}" / attempt.container / f"{attempt.restart}.log"
            )
            assert log.is_file(), log
    verdict = truth.verdict
    assert verdict["category"] in CATEGORIES
    if scenario in ("clean", "maintenance_ahead"):  # nothing failed (yet)
        assert verdict == {"category": "job.completed", "root": None}
        assert {a.category for a in truth.attempts} == {"job.completed"}
    else:
        root = truth.root
        assert root is not None and root.category == verdict["category"]
        assert root.category not in ("peer.failure", "job.completed")
        failures = [a for a in truth.attempts if a.failed_at is not None]
        assert root.failed_at == min(a.failed_at for a in failures if a.failed_at)
    # Every experiment pod in the bundle shows up in truth, and nothing else does.
    pods = {a.pod_uid for a in truth.attempts}
    exp = truth.experiment
    for path in (out / "k8s/pods").glob(f"{exp['namespace']}_*.json"):
        body = files.load(path)
        labels = body["metadata"].get("labels", {})
        if exp["name"] in labels.values():
            assert body["metadata"]["uid"] in pods, path.name


def test_each_scenario_names_its_category(bundle: Bundle) -> None:
    expected = {
        "xid79": "gpu.xid",
        "maintenance": "node.maintenance",
        "spot": "node.spot_interruption",
        "scale_in": "node.scale_in",
        "host_oom": "container.oom_killed",
        "cuda_oom": "app.cuda_oom",
        "restart_loop": "app.exception",
        "image_pull": "startup.image_pull",
        "unschedulable": "startup.unschedulable",
        "eviction": "node.eviction",
        "preemption": "pod.preempted",
        "nccl_error": "app.nccl_error",
        "nccl_timeout": "app.nccl_timeout",
        "segfault": "app.segfault",
        "nan_loss": "app.nan_loss",
        "checkpoint_error": "app.checkpoint_error",
        "storage_io": "storage.io",
        "config_error": "startup.config",
        "node_lost": "node.not_ready",
        "cuda_error": "app.cuda_error",
        "deleted": "pod.deleted",
        "maintenance_storm": "node.maintenance",
    }
    for scenario, category in expected.items():
        assert bundle(scenario, 1)[1].verdict["category"] == category, scenario
