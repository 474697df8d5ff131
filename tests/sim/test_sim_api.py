"""The simulator's public surface: the scenario catalog, plan(), simulate()'s contract."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from whyjob.core.taxonomy import CATEGORIES
from whyjob.sim import SCENARIOS, Truth, plan, simulate

REQUIRED = (
    "clean",
    "xid79",
    "maintenance",
    "spot",
    "scale_in",
    "host_oom",
    "cuda_oom",
    "restart_loop",
    "image_pull",
    "unschedulable",
    "eviction",
    "preemption",
)
BENCHMARK = (
    "nccl_error",
    "nccl_timeout",
    "segfault",
    "nan_loss",
    "checkpoint_error",
    "storage_io",
    "config_error",
    "node_lost",
    "cuda_error",
    "deleted",
    "maintenance_ahead",
    "maintenance_storm",
)

Bundle = Callable[..., tuple[Path, Truth]]


def test_catalog_lists_every_scenario_in_order() -> None:
    assert list(SCENARIOS) == [*REQUIRED, *BENCHMARK]
    for scenario_id, scenario in SCENARIOS.items():
        assert scenario.id == scenario_id
        assert scenario.description and "\n" not in scenario.description
        assert callable(scenario) and callable(scenario.tell)


def test_unknown_scenario_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="xid79"):
        simulate("no-such-thing", 1, tmp_path)


def test_plan_predicts_what_simulate_writes(bundle: Bundle) -> None:
    for seed in (1, 2):
        _out, truth = bundle("maintenance", seed)
        chosen = plan("maintenance", seed)
        assert (chosen.cloud, chosen.launcher) == (truth.cloud, truth.experiment["launcher"])
        assert 2 <= chosen.ranks <= 8


def test_calling_a_scenario_writes_its_bundle(tmp_path: Path) -> None:
    truth = SCENARIOS["clean"](3, tmp_path, noise=False)
    assert truth.verdict == {"category": "job.completed", "root": None}
    assert json.loads((tmp_path / "truth.json").read_text()) == truth.to_json()


def test_rewrites_an_old_bundle_but_never_foreign_files(tmp_path: Path) -> None:
    simulate("clean", 1, tmp_path, noise=False)
    simulate("cuda_oom", 1, tmp_path, noise=False)  # replaces the earlier bundle
    assert json.loads((tmp_path / "truth.json").read_text())["scenario"] == "cuda_oom"
    foreign = tmp_path / "elsewhere"
    (foreign / "nodes").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        simulate("clean", 1, foreign)


def test_truth_serialises_with_the_documented_schema(bundle: Bundle) -> None:
    _out, truth = bundle("xid79", 1)
    doc = truth.to_json()
    assert doc["schema"] == "whyjob.truth/v1"
    assert set(doc) >= {"scenario", "seed", "cloud", "noise", "experiment", "verdict", "attempts"}
    assert set(doc["attempts"][0]) >= {
        "key",
        "pod",
        "pod_uid",
        "container",
        "restart",
        "rank",
        "node",
        "started_at",
        "ended_at",
        "category",
        "caused_by",
        "note",
    }
    assert doc["verdict"]["category"] in CATEGORIES
    assert truth.experiment_name == doc["experiment"]["name"]
