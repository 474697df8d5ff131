from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from whyjob.core.errors import ConfigError
from whyjob.core.experiments import DEFAULT_LAUNCHERS, Launcher, recognise
from whyjob.core.settings import load_settings

# One file per launcher: pods as their controllers write them, with the controller source cited.
LAUNCHER_FIXTURES = Path(__file__).parents[1] / "fixtures" / "launchers"


def _launcher_cases() -> list[Any]:
    cases = []
    for path in sorted(LAUNCHER_FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text())
        assert fixture["source"], f"{path.name} cites no controller source"
        cases += [
            pytest.param(case["metadata"], case["expect"], id=f"{path.stem}: {case['what']}")
            for case in fixture["cases"]
        ]
    return cases


@pytest.mark.parametrize(("metadata", "expect"), _launcher_cases())
def test_real_pod_shapes_name_experiment_launcher_and_rank(
    metadata: dict[str, Any], expect: dict[str, Any]
) -> None:
    member = recognise(metadata["name"], metadata["labels"], metadata.get("annotations"))
    assert member is not None
    assert (member.experiment, member.launcher, member.rank) == (
        expect["experiment"],
        expect["launcher"],
        expect["rank"],
    )
    if "job_attempt" in expect:
        assert member.job_attempt == expect["job_attempt"]


def test_every_default_launcher_has_a_fixture() -> None:
    shown = {case.values[1]["launcher"] for case in _launcher_cases()}
    # The plain label and the Kubeflow fallback (no operator-name) are no controller's shape.
    unshaped = {"experiment label", "Kubeflow job"}
    assert shown >= {launcher.name for launcher in DEFAULT_LAUNCHERS} - unshaped


def test_pytorchjob_labels_name_experiment_and_rank() -> None:
    member = recognise(
        "gpt2-run7-worker-3",
        {
            "training.kubeflow.org/job-name": "gpt2-run7",
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": "Worker",
            "training.kubeflow.org/replica-index": "3",
        },
    )
    assert member is not None
    assert (member.experiment, member.launcher, member.rank) == (
        "gpt2-run7",
        "PyTorchJob",
        "worker-3",
    )


def test_jobset_beats_the_child_job_label_and_reads_the_restart_attempt() -> None:
    member = recognise(
        "llama-trainer-0-1-abcde",
        {
            "batch.kubernetes.io/job-name": "llama-trainer-0",
            "jobset.sigs.k8s.io/jobset-name": "llama",
            "jobset.sigs.k8s.io/replicatedjob-name": "trainer",
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": "1",
            "jobset.sigs.k8s.io/restart-attempt": "2",
        },
    )
    assert member is not None
    assert (member.experiment, member.launcher, member.rank, member.job_attempt) == (
        "llama",
        "JobSet",
        "trainer-0-1",
        2,
    )


def test_plain_label_wins_and_rank_falls_back_to_the_pod_name() -> None:
    member = recognise("sweep-lr-3", {"experiment": "sweep-lr", "job-name": "sweep-lr-3"})
    assert member is not None
    assert (member.experiment, member.label, member.rank) == ("sweep-lr", "experiment", "3")


def test_volcano_ray_and_batch_job() -> None:
    volcano = recognise(
        "mnist-worker-1",
        {"volcano.sh/job-name": "mnist", "volcano.sh/task-spec": "worker"},
        {"volcano.sh/task-index": "1"},
    )
    ray = recognise(
        "rc-gpu-worker-x7k2p",
        {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "gpu"},
    )
    job = recognise(
        "bench-0-xyz12",
        {"batch.kubernetes.io/job-name": "bench", "batch.kubernetes.io/job-completion-index": "0"},
    )
    assert volcano and (volcano.experiment, volcano.rank) == ("mnist", "worker-1")
    assert ray and (ray.experiment, ray.launcher, ray.rank) == ("rc", "RayCluster", "gpu-x7k2p")
    assert job and (job.experiment, job.launcher, job.rank) == ("bench", "Job", "0")


def test_unlabelled_pods_belong_to_nothing_and_custom_launchers_come_first() -> None:
    assert recognise("nginx-abc", {"app": "nginx"}) is None
    custom = (Launcher("Team label", "team.example.com/run", ("team.example.com/rank",)),)
    member = recognise(
        "r-0", {"team.example.com/run": "r", "team.example.com/rank": "0"}, launchers=custom
    )
    assert member is not None and (member.experiment, member.rank) == ("r", "0")


def test_launchers_sharing_a_name_label_are_told_apart_by_match_labels() -> None:
    labels = {
        "training.kubeflow.org/job-name": "osu",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    }
    for operator, kind in [
        ("pytorchjob-controller", "PyTorchJob"),
        ("mpijob-controller", "MPIJob"),
        ("tfjob-controller", "TFJob"),
        (None, "Kubeflow job"),  # no operator-name: the kind is not guessed
    ]:
        with_operator = labels | (
            {"training.kubeflow.org/operator-name": operator} if operator else {}
        )
        member = recognise("osu-worker-0", with_operator)
        assert member is not None and member.launcher == kind


def test_name_rank_suffix_applies_only_when_no_rank_label_is_a_number() -> None:
    custom = (
        Launcher("Pool", "pool.example.com/name", ("pool.example.com/role",), name_rank="suffix"),
    )
    labels = {"pool.example.com/name": "p", "pool.example.com/role": "worker"}
    generated = recognise("p-worker-k2x9q", labels, launchers=custom)
    numbered = recognise(
        "p-worker-k2x9q", labels | {"pool.example.com/role": "7"}, launchers=custom
    )
    assert generated is not None and generated.rank == "worker-k2x9q"
    assert numbered is not None and numbered.rank == "7"
    # The same launchers in a list (not cached by identity) recognise the same way.
    again = recognise("p-worker-k2x9q", labels, launchers=list(custom))
    assert again == generated


def test_config_launchers_take_match_labels_and_name_rank(tmp_path: Path) -> None:
    config = tmp_path / "whyjob.yaml"
    config.write_text(
        "experiments:\n"
        "  launchers:\n"
        "    - name: Team MPI\n"
        "      label: training.kubeflow.org/job-name\n"
        "      match_labels: {training.kubeflow.org/operator-name: team-mpi}\n"
        "      rank_labels: [training.kubeflow.org/job-role]\n"
        "      name_rank: suffix\n"
    )
    launchers = load_settings(config, environ={}).launchers
    labels = {
        "training.kubeflow.org/job-name": "osu",
        "training.kubeflow.org/operator-name": "team-mpi",
        "training.kubeflow.org/job-role": "worker",
    }
    member = recognise("osu-worker-p4k8s", labels, launchers=launchers)
    assert member is not None and (member.launcher, member.rank) == ("Team MPI", "worker-p4k8s")
    other = labels | {"training.kubeflow.org/operator-name": "pytorchjob-controller"}
    member = recognise("osu-worker-0", other, launchers=launchers)
    assert member is not None and member.launcher == "PyTorchJob"
    config.write_text(
        "experiments:\n  launchers:\n    - {name: X, label: x, name_rank: trailing}\n"
    )
    with pytest.raises(ConfigError, match="name_rank must be one of ordinal, suffix"):
        load_settings(config, environ={})


def test_an_older_training_operator_is_named_by_the_pods_controller() -> None:
    """Before operator-name was written, only the controller's ownerReference said PyTorchJob."""
    labels = {
        "training.kubeflow.org/job-name": "bert-ft",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "2",
    }
    member = recognise("bert-ft-worker-2", labels, owner_kind="PyTorchJob")
    assert member is not None and (member.launcher, member.rank) == ("PyTorchJob", "worker-2")
    unowned = recognise("bert-ft-worker-2", labels)
    assert unowned is not None and unowned.launcher == "Kubeflow job"
    labelled = {**labels, "training.kubeflow.org/operator-name": "tfjob-controller"}
    told = recognise("bert-ft-worker-2", labelled, owner_kind="Job")  # labels win when they can
    assert told is not None and told.launcher == "TFJob"
