"""Names for what pasted text does not say, shared by the paste reader and the diagnosis."""

from __future__ import annotations

__all__ = ["PASTED_CONTAINER", "PASTED_NAMESPACE", "PASTED_NODE", "PASTED_POD", "standin_uid"]

# The pod a paste's loose log lines belong to until the diagnosis knows which pod it is about,
# and the node of node-local lines (dmesg, IMDS) that do not name theirs.
PASTED_NAMESPACE, PASTED_POD, PASTED_CONTAINER = "pasted", "pasted-pod", "main"
PASTED_NODE = "pasted-node"


def standin_uid(namespace: str, name: str, cluster: str | None = None) -> str:
    """A stable id for a pod shown without its uid (describe output, tables, events); two
    clusters' pods of one name are two pods."""
    return f"pasted:{cluster}/{namespace}/{name}" if cluster else f"pasted:{namespace}/{name}"
