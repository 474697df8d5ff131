"""Kubernetes audit events: who deleted or evicted a pod, from the API server's audit log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.cli.pasted import diagnose_text
from whyjob.collector.ingest.base import IngestOptions
from whyjob.core.index import SqliteIndex
from whyjob.core.timeutil import parse_ts
from whyjob.explain.ruleset import load_rules

Ingest = Callable[..., Any]
AUDIT = Path(__file__).parent / "fixtures" / "k8s-audit" / "audit.log"


def test_deletes_and_evictions_that_succeeded_are_evidence(
    ingest: Ingest, index: SqliteIndex
) -> None:
    summary = ingest(AUDIT)
    assert (summary.total("stored"), summary.total("rejected")) == (3, 0)
    records = index.entity_evidence("pod", ["llama-ft-worker-1", "llama-ft-worker-3"], 0, 2**62)
    by_pod = {ev.pod: ev for ev in records}
    deleted = by_pod["llama-ft-worker-3"]
    assert (deleted.kind, deleted.source, deleted.namespace) == (
        "pod.deleting",
        "k8s.audit",
        "ml-research",
    )
    # The completed request, not its RequestReceived stage, and its time.
    assert deleted.ts == parse_ts("2026-09-13T04:01:02.131870Z")
    assert deleted.attrs["user"] == "alice@example.com"
    assert deleted.message == (
        "Pod ml-research/llama-ft-worker-3 deleted by alice@example.com "
        "(kubectl/v1.30.2 (linux/amd64) kubernetes/3968350)"
    )
    evicted = by_pod["llama-ft-worker-1"]
    assert (evicted.kind, evicted.attrs["reason"]) == ("pod.disruption", "EvictionByEvictionAPI")
    assert evicted.attrs["user"] == "system:serviceaccount:kube-system:cluster-autoscaler"
    # A uid in the request keys the record to the pod, as the pod's own records are.
    (collected,) = index.pod_evidence(["8d2f1c4b-7a6e-4f3d-9b2a-1c0e9d8f7a6b"], 0, 2**62)
    assert collected.attrs["user"] == "system:serviceaccount:kube-system:pod-garbage-collector"
    # Refused (403, a PodDisruptionBudget's 429), reads and other resources are not evidence.
    assert not index.entity_evidence("pod", ["llama-ft-worker-0", "llama-ft-worker-2"], 0, 2**62)


def test_request_and_response_bodies_are_never_kept(ingest: Ingest, index: SqliteIndex) -> None:
    ingest(AUDIT)
    (evicted,) = index.entity_evidence("pod", ["llama-ft-worker-1"], 0, 2**62)
    raw = json.loads(index.raw(evicted.id) or b"{}")
    assert raw["auditID"] == "0b8e2d6a-51c4-4f0a-8a43-7d2f6c9b1e22"
    assert "requestObject" not in raw and "responseObject" not in raw


def test_an_event_list_and_a_bad_time(ingest: Ingest, tmp_path: Path) -> None:
    events = [json.loads(line) for line in AUDIT.read_text().splitlines()]
    for event in events:  # the webhook backend's EventList drops the items' apiVersion and kind
        del event["apiVersion"], event["kind"]
    events[1]["stageTimestamp"] = "yesterday"
    path = tmp_path / "webhook.json"
    path.write_text(
        json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events})
    )
    rejected: list[tuple[str, str]] = []
    summary = ingest(path, rejected=rejected)
    assert summary.total("stored") == 2
    assert len(rejected) == 1 and "audit event 6f3c0f4e" in rejected[0][1]
    assert "yesterday" in rejected[0][1]


def test_a_pasted_audit_event_says_who_deleted_the_pod() -> None:
    event = json.loads(AUDIT.read_text().splitlines()[1])
    paste = "$ grep llama-ft-worker-3 /var/log/kube-apiserver/audit.log | jq .\n" + json.dumps(
        event, indent=2
    )
    found = diagnose_text(paste, load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert (found.category, found.grade) == ("pod.deleted", "likely")
    assert "deleted by alice@example.com" in found.summary
