"""Which experiment a pod belongs to, and which rank it is, from its labels.

An experiment is the thing a researcher names: a PyTorchJob, a JobSet, a Ray cluster, or
whatever a plain `experiment` label says. Launchers are tried in order; the first whose name
label is present (and whose `match_labels` hold) wins. The list is configurable
(`experiments.launchers` in the config file), with defaults for the common launchers, each
written from the labels its controller really sets (the sources are cited in
tests/fixtures/launchers/).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_LAUNCHERS",
    "EXPERIMENT_KINDS",
    "NAME_RANKS",
    "Launcher",
    "Membership",
    "recognise",
]

# Objects whose name is the experiment's name, as the launchers below name them from their
# pods' labels: the training operators, Trainer's TrainJob, JobSet, LeaderWorkerSet, Ray, an
# Argo Workflow, Volcano's Job and batch's (both kind Job).
EXPERIMENT_KINDS = frozenset(
    {
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "MXJob",
        "TrainJob",
        "JobSet",
        "LeaderWorkerSet",
        "RayJob",
        "RayCluster",
        "Workflow",
        "Job",
    }
)

NameRank = Literal["ordinal", "suffix"]
NAME_RANKS: tuple[NameRank, ...] = ("ordinal", "suffix")


@dataclass(frozen=True, slots=True)
class Launcher:
    """How one launcher labels its pods.

    The name and rank labels are looked up in the pod's labels, then its annotations (several
    controllers write the same keys as both, and some only as annotations); `match_labels` in
    its labels only.
    """

    name: str  # shown to users: "PyTorchJob", "JobSet", ...
    label: str  # the label whose value names the experiment
    rank_labels: tuple[str, ...] = ()  # joined with "-" to name the rank, e.g. worker-3
    attempt_label: str | None = None  # a label counting whole-job restarts, if the launcher has one
    # Labels that must carry these values, for launchers that share a name label (all Kubeflow
    # training operators write training.kubeflow.org/job-name; operator-name tells them apart).
    match_labels: tuple[tuple[str, str], ...] = ()
    # How the pod name helps name the rank. "ordinal": its trailing number, when no rank label
    # is present. "suffix": its last "-" part, added when no rank label value is a number
    # (pods made with generateName, whose random suffix is all that tells them apart).
    name_rank: NameRank = "ordinal"
    # The pod's controller (its ownerReference, describe's "Controlled By") names the launcher
    # when the labels cannot: an older training operator writes no operator-name.
    named_by_owner: bool = False


_KUBERNETES_RANK = ("batch.kubernetes.io/job-completion-index", "apps.kubernetes.io/pod-index")
_KUBEFLOW_JOB = "training.kubeflow.org/job-name"
_KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
_KUBEFLOW_RANK = ("training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index")


def _kubeflow(kind: str, controller: str) -> Launcher:
    """A training-operator v1 job: its controller's name is in the operator-name label."""
    return Launcher(
        kind, _KUBEFLOW_JOB, _KUBEFLOW_RANK, match_labels=((_KUBEFLOW_OPERATOR, controller),)
    )


DEFAULT_LAUNCHERS: tuple[Launcher, ...] = (
    # A plain label names no launcher's ranks; Kubernetes' own index labels do (an Indexed
    # Job's completion index, a StatefulSet's pod index), else the pod name's trailing number.
    Launcher("experiment label", "experiment", _KUBERNETES_RANK),
    Launcher("experiment label", "whyjob.io/experiment", _KUBERNETES_RANK),
    _kubeflow("PyTorchJob", "pytorchjob-controller"),
    _kubeflow("TFJob", "tfjob-controller"),
    _kubeflow("MPIJob", "mpijob-controller"),
    _kubeflow("PaddleJob", "paddlejob-controller"),
    _kubeflow("XGBoostJob", "xgboostjob-controller"),
    _kubeflow("JAXJob", "jaxjob-controller"),
    _kubeflow("MXJob", "mxjob-controller"),
    # The standalone mpi-operator (v2beta1) writes the role as job-role, not replica-type.
    Launcher(
        "MPIJob",
        _KUBEFLOW_JOB,
        ("training.kubeflow.org/job-role", "training.kubeflow.org/replica-index"),
        match_labels=((_KUBEFLOW_OPERATOR, "mpi-operator"),),
    ),
    # The job-name label without an operator whyjob knows: some Kubeflow job, kind unknown.
    Launcher("Kubeflow job", _KUBEFLOW_JOB, _KUBEFLOW_RANK, named_by_owner=True),
    # Also a Kubeflow Trainer v2 TrainJob: its JobSet has the TrainJob's name, and nothing on
    # its pods says TrainJob.
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
        "LeaderWorkerSet",
        "leaderworkerset.sigs.k8s.io/name",
        ("leaderworkerset.sigs.k8s.io/group-index", "leaderworkerset.sigs.k8s.io/worker-index"),
    ),
    Launcher(
        "VolcanoJob", "volcano.sh/job-name", ("volcano.sh/task-spec", "volcano.sh/task-index")
    ),
    # A RayJob's submitter pod; its cluster's pods name only the cluster (<rayjob>-<random>).
    Launcher(
        "RayJob",
        "ray.io/originated-from-cr-name",
        match_labels=(("ray.io/originated-from-crd", "RayJob"),),
    ),
    Launcher(
        "RayCluster",
        "ray.io/cluster",
        ("ray.io/node-type",),
        match_labels=(("ray.io/node-type", "head"),),
    ),
    # Workers: the group, then the replica (and host) index KubeRay >= 1.6 writes; older ones
    # write none, and the pod name's random suffix tells a group's workers apart.
    Launcher(
        "RayCluster",
        "ray.io/cluster",
        ("ray.io/group", "ray.io/worker-group-replica-index", "ray.io/replica-host-index"),
        name_rank="suffix",
    ),
    Launcher(
        "Argo Workflow", "workflows.argoproj.io/workflow", ("workflows.argoproj.io/node-name",)
    ),
    Launcher("Job", "batch.kubernetes.io/job-name", ("batch.kubernetes.io/job-completion-index",)),
    Launcher("Job", "job-name", ("batch.kubernetes.io/job-completion-index",)),
    # Kueue last: a pod it admitted for a launcher above is named by that launcher.
    Launcher(
        "Kueue pod group", "kueue.x-k8s.io/pod-group-name", ("kueue.x-k8s.io/pod-group-pod-index",)
    ),
    Launcher(
        "Kueue workload",
        "kueue.x-k8s.io/workload",
        ("kueue.x-k8s.io/podset",),
        name_rank="suffix",
    ),
)

# A trailing ordinal in a pod name (trainer-worker-3) names the rank when no label does.
_TRAILING_INDEX = re.compile(r"-(\d+)$")

# Every name label of a launcher list: the few a pod carries are found with one set
# intersection, and the many pods no launcher claims are turned away by it. Cached by the
# list's identity for tuples, which cannot change (the entry keeps the tuple alive, so its id
# is not reused).
_NAME_KEYS: dict[int, tuple[tuple[Launcher, ...], frozenset[str]]] = {}


def _name_keys(launchers: Sequence[Launcher]) -> frozenset[str]:
    if not isinstance(launchers, tuple):
        return frozenset(launcher.label for launcher in launchers)
    entry = _NAME_KEYS.get(id(launchers))
    if entry is None or entry[0] is not launchers:
        if len(_NAME_KEYS) > 64:  # launcher lists built over and over: keep the cache small
            _NAME_KEYS.clear()
        entry = (launchers, frozenset(launcher.label for launcher in launchers))
        _NAME_KEYS[id(launchers)] = entry
    return entry[1]


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
    owner_kind: str | None = None,
) -> Membership | None:
    """The experiment a pod belongs to, or None when no launcher label is present.
    `owner_kind`: the kind of the pod's controller, if known."""
    labels = labels or {}
    annotations = annotations or {}
    keys = _name_keys(launchers)
    present = keys.intersection(labels)
    if annotations:
        present |= keys.intersection(annotations)
    if not present:
        return None
    for launcher in launchers:
        if launcher.label not in present:
            continue
        name = labels.get(launcher.label) or annotations.get(launcher.label)
        if not name or (
            launcher.match_labels
            and any(labels.get(key) != value for key, value in launcher.match_labels)
        ):
            continue
        parts = [
            value
            for key in launcher.rank_labels
            if (value := labels.get(key) or annotations.get(key)) is not None
        ]
        if launcher.name_rank == "suffix" and not any(part.isdigit() for part in parts):
            parts.append(pod_name.rsplit("-", 1)[-1])
        rank = "-".join(parts) if parts else None
        if rank is None and (match := _TRAILING_INDEX.search(pod_name)):
            rank = match.group(1)
        attempt = labels.get(launcher.attempt_label) if launcher.attempt_label else None
        return Membership(
            experiment=name,
            launcher=owner_kind if launcher.named_by_owner and owner_kind else launcher.name,
            label=launcher.label,
            rank=rank.lower() if rank else None,
            job_attempt=int(attempt) if attempt and attempt.isdigit() else None,
        )
    return None
