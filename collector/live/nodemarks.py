"""Labels (and optionally taints) on nodes the cloud is about to take, through the official
`kubernetes` client: the write side of `whyjob collect`'s opt-in `mark_nodes:` mode.

Only what this module set is ever changed: its label, its reason annotation, and its taint
(same key). Each write is a strategic merge patch carrying the node's resourceVersion, so a
node another controller changed meanwhile answers 409 and is retried next round, never
overwritten. Needs `patch` on nodes (deploy/node-marker-rbac.yaml), which nothing else does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

__all__ = ["NodeMarker"]


class NodeMarker:
    def __init__(self, api: k8s.ApiClient, label: str, *, taint: bool = False) -> None:
        self._api = api
        self._core = k8s.CoreV1Api(api)
        self.label = label
        self.annotation = f"{label}-reason"
        self.taint = taint

    def marked(self) -> set[str]:
        """The nodes that carry this marker's label or its taint now (someone may have taken
        the label off and left the taint, which would then keep the node empty for good)."""
        out = set()
        for node in self._core.list_node().items:
            if not node.metadata:
                continue
            taints = (node.spec.taints if node.spec else None) or []
            if self.label in (node.metadata.labels or {}) or any(
                t.key == self.label for t in taints
            ):
                out.add(str(node.metadata.name))
        return out

    def apply(self, desired: Mapping[str, tuple[str, str]]) -> list[str]:
        """Make the marks what `desired` says (node -> (label value, reason)): mark the new,
        update the changed, unmark the rest of this marker's nodes. Returns what it did."""
        done = []
        for name in sorted(set(desired) | self.marked()):
            try:
                node = self._core.read_node(name)
                patch = self._patch(node, desired.get(name))
                if patch is None:
                    continue
                self._core.patch_node(name, patch)
            except k8s.ApiException as exc:
                if exc.status == 404:
                    continue  # gone: nothing to mark
                # One node refused (a conflict, a webhook, a missing permission) holds up no other.
                done.append(
                    f"{name}: changed meanwhile, next round"
                    if exc.status == 409
                    else f"{name}: not changed: {exc.status} {exc.reason}"
                )
                continue
            done.append(f"{'marked' if name in desired else 'unmarked'} {name}")
        return done

    def _patch(self, node: Any, mark: tuple[str, str] | None) -> dict[str, Any] | None:
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        # As the API spells them (timeAdded, not time_added), to be sent back unchanged.
        taints: list[dict[str, Any]] = [
            self._api.sanitize_for_serialization(t)  # type: ignore[no-untyped-call]
            for t in (node.spec.taints or [])
        ]
        ours = [t for t in taints if t.get("key") == self.label]
        others = [t for t in taints if t.get("key") != self.label]
        if mark is None:
            if self.label not in labels and not ours:
                return None
            patch: dict[str, Any] = {
                "metadata": {"labels": {self.label: None}, "annotations": {self.annotation: None}}
            }
            if ours:
                patch["spec"] = {"taints": others}
        else:
            value, reason = mark
            wanted_taint = {"key": self.label, "value": value, "effect": "NoSchedule"}
            current = [{k: t.get(k) for k in ("key", "value", "effect")} for t in ours]
            if (
                labels.get(self.label) == value
                and annotations.get(self.annotation) == reason
                and current == ([wanted_taint] if self.taint else [])
            ):
                return None
            patch = {
                "metadata": {
                    "labels": {self.label: value},
                    "annotations": {self.annotation: reason},
                }
            }
            if self.taint or ours:
                # A Node's taints are one list, replaced whole by a patch: keep everyone else's.
                patch["spec"] = {"taints": others + ([wanted_taint] if self.taint else [])}
        # The version read: a node changed since answers 409 instead of losing that change.
        patch["metadata"]["resourceVersion"] = node.metadata.resource_version
        return patch
