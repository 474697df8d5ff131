"""Which experiment a pod belongs to, and which rank it is, from its labels.

An experiment is the thing a researcher names: a PyTorchJob, a JobSet, a Ray cluster, or
whatever a plain `experiment` label says. Launchers are tried in order; the first whose name
label is present wins. The list is configurable (`experiments.launchers` in the config file),
with defaults for the common launchers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_LAUNCHERS",
    "Launcher",
    "Membership",
    "recognise",
]


@dataclass(frozen=True, slots=True)
class Launcher:
    """How one launcher labels its pods."""

    name: str  # shown to users: "PyTorchJob", "JobSet", ...
    label: str  # the label whose value names the experiment
    rank_labels: tuple[str, ...] = ()  # joined with "-" to name the rank, e.g. worker-3
    attempt_label: str | None = None  # a label counting whole-job restarts, if the launcher has one


DEFAULT_LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("experiment label", "experiment"),
    Launcher("experiment label", "whyjob.io/experiment"),
    Launcher(
        "PyTorchJob",
        "training.kubeflow.org/job-name",
        ("training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index"),
    ),
    Launcher(
        "JobSet",
        "jobset.sigs.k8s.io/jobset-name",
        (
            "jobset.sigs.k8s.io/replicatedjob-name",
            "jobset.sigs.k8s.io/job-index",
            "batch.kubernetes.io/job-completion-index",
        ),
        attempt_label="jobset.sigs.k8s.io/restart-attempt",
    ),
    Launcher(
        "VolcanoJob", "volcano.sh/job-name", ("volcano.sh/task-spec", "volcano.sh/task-index")
    ),
    Launcher("RayCluster", "ray.io/cluster", ("ray.io/node-type",)),
    Launcher("Job", "batch.kubernetes.io/job-name", ("batch.kubernetes.io/job-completion-index",)),
    Launcher("Job", "job-name", ("batch.kubernetes.io/job-completion-index",)),
    Launcher("MPIJob", "training.kubeflow.org/job-name", ("training.kubeflow.org/replica-type",)),
)

# A trailing ordinal in a pod name (trainer-worker-3) names the rank when no label does.
_TRAILING_INDEX = re.compile(r"-(\d+)$")


@dataclass(frozen=True, slots=True)
class Membership:
    """A pod's place in an experiment."""

    experiment: str
    launcher: str
    label: str
    rank: str | None
    job_attempt: int | None


def recognise(
    pod_name: str,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None = None,
    launchers: Sequence[Launcher] = DEFAULT_LAUNCHERS,
) -> Membership | None:
    """The experiment a pod belongs to, or None when no launcher label is present."""
    labels = labels or {}
    annotations = annotations or {}
    for launcher in launchers:
        name = labels.get(launcher.label)
        if not name:
            continue
        parts = [
            value
            for key in launcher.rank_labels
            if (value := labels.get(key) or annotations.get(key)) is not None
        ]
        rank = "-".join(parts) if parts else None
        if rank is None and (match := _TRAILING_INDEX.search(pod_name)):
            rank = match.group(1)
        attempt = labels.get(launcher.attempt_label) if launcher.attempt_label else None
        return Membership(
            experiment=name,
            launcher=launcher.name,
            label=launcher.label,
            rank=rank.lower() if rank else None,
            job_attempt=int(attempt) if attempt and attempt.isdigit() else None,
        )
    return None
