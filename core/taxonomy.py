"""The root-cause taxonomy: a public contract (docs/taxonomy.md).

Every diagnosis names exactly one of these ids. Tests, users and tooling depend on them, so an
id is never renamed or dropped without a new schema version; detail goes in other fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CATEGORIES", "Category", "Grade", "category"]


class Grade(StrEnum):
    """How sure a verdict is."""

    PROVEN = "proven"  # a structured field says so
    LIKELY = "likely"  # correlated in time and place
    POSSIBLE = "possible"  # consistent with the evidence, not shown by it

    @property
    def rank(self) -> int:
        return {"proven": 3, "likely": 2, "possible": 1}[self.value]


@dataclass(frozen=True, slots=True)
class Category:
    id: str
    owner: str  # who acts on it: infra, platform, user, or "-" for non-failures
    meaning: str
    retryable: bool | None  # can a plain retry succeed? None: it depends


CATEGORIES: dict[str, Category] = {
    c.id: c
    for c in (
        Category("gpu.xid", "infra", "GPU hardware or driver fault", True),
        Category("node.maintenance", "infra", "cloud host maintenance or node upgrade", True),
        Category("node.spot_interruption", "infra", "spot or preemptible capacity reclaimed", True),
        Category("node.scale_in", "platform", "the autoscaler or ASG removed the node", True),
        Category("node.not_ready", "infra", "node lost or stopped reporting", True),
        Category("node.eviction", "platform", "kubelet evicted the pod under node pressure", True),
        Category("pod.preempted", "platform", "preempted by a higher-priority pod", True),
        Category("pod.deleted", "user", "deleted by a person or a controller", None),
        Category("container.oom_killed", "user", "host or cgroup memory OOM kill", False),
        Category("app.cuda_oom", "user", "GPU memory exhausted", False),
        Category(
            "app.cuda_error", "user", "CUDA illegal access, device assert, cuDNN/cuBLAS", False
        ),
        Category("app.nccl_timeout", "user", "collective watchdog timeout, no earlier root", None),
        Category("app.nccl_error", "infra", "NCCL system/remote error, IB/NIC, reset", True),
        Category("app.exception", "user", "a traceback from the training code", False),
        Category("app.segfault", "user", "SIGSEGV, core dump, exit 139", False),
        Category("app.nan_loss", "user", "NaN or inf loss, loss-scale underflow", False),
        Category("app.checkpoint_error", "user", "saving or loading a checkpoint failed", None),
        Category("storage.io", "infra", "NFS/EFS/S3/disk stalls or I/O errors", True),
        Category("startup.image_pull", "user", "ErrImagePull / ImagePullBackOff", False),
        Category("startup.unschedulable", "platform", "FailedScheduling", None),
        Category("startup.config", "user", "config error, missing secret/configmap, mount", False),
        Category("peer.failure", "-", "collateral: another rank or node failed first", True),
        Category("job.completed", "-", "not a failure", None),
        Category("unknown", "-", "not enough evidence", None),
    )
}


def category(category_id: str) -> Category:
    """Look up a taxonomy id; raises KeyError naming the id when it is not in the contract."""
    try:
        return CATEGORIES[category_id]
    except KeyError:
        raise KeyError(f"not a whyjob taxonomy id: {category_id!r}") from None
