"""GCE: host events and preemptions from the operations list, and upcoming maintenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from whyjob.collector.ingest import gce
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.core.evidence import Evidence, Severity
from whyjob.core.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures" / "gce"


def load(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


def ctx(**options: Any) -> Context:
    return Context("fixtures/gce", IngestOptions(**options), parse_ts("2026-03-15T00:00:00Z"))


def operations() -> tuple[list[Evidence], list[Rejected], Context]:
    context = ctx()
    items: list[Item] = list(gce.parse_operations(context, load("operations.json"), 1))
    return (
        [i for i in items if isinstance(i, Evidence)],
        [i for i in items if isinstance(i, Rejected)],
        context,
    )


def test_operations_detected() -> None:
    assert gce.looks_like_operations(load("operations.json"))
    assert not gce.looks_like_operations(load("upcoming-maintenance.json"))
    assert not gce.looks_like_operations([{"kind": "compute#instance"}])


def test_host_events_and_preemption() -> None:
    records, _, context = operations()
    assert [(e.kind, e.node) for e in records] == [
        ("maintenance.host_event", "gke-train-a3-gpu-pool-9f8e7d6c-x2k4"),
        ("maintenance.host_event", "gke-train-a3-gpu-pool-9f8e7d6c-m7q1"),
        ("maintenance.host_event", "gke-train-cpu-pool-1a2b3c4d-w9z8"),
        ("spot.interruption", "gke-train-spot-l4-pool-5e6f7a8b-c3d4"),
    ]
    terminate, host_error, migrate, preempt = records
    assert terminate.source == "gce"
    assert terminate.instance_id == terminate.node
    assert terminate.ts == parse_ts("2026-03-14T09:30:05.110Z")  # -07:00 in the export
    assert terminate.ts_end == parse_ts("2026-03-14T09:31:40.208Z")
    assert terminate.attrs == {
        "provider": "gce",
        "operation_type": "terminateOnHostMaintenance",
        "status_message": "Instance terminated during Compute Engine maintenance.",
    }
    assert host_error.attrs["operation_type"] == "hostError"
    assert host_error.severity == Severity.ERROR
    assert migrate.severity < terminate.severity
    assert preempt.attrs["provider"] == "gce"
    assert preempt.attrs["action"] == "preempt"
    assert preempt.attrs["notice_time"] == preempt.ts
    assert preempt.ts_end == parse_ts("2026-03-14T13:45:31.904Z")
    assert preempt.raw is not None and b"Instance was preempted." in preempt.raw
    # insert and setMetadata are not evidence and are not counted either.
    assert context.skipped == {}


def test_bad_operations_are_rejected() -> None:
    _, bad, _ = operations()
    assert len(bad) == 2
    assert "without targetLink" in bad[0].reason
    assert "around eight" in bad[1].reason


def test_operation_ids_are_stable_and_follow_status() -> None:
    first = [e.id for e in operations()[0]]
    assert first == [e.id for e in operations()[0]]
    assert len(set(first)) == 4
    running = dict(load("operations.json")[1], status="RUNNING")
    [again] = list(gce.parse_operations(ctx(), [running], 1))
    assert isinstance(again, Evidence) and again.id not in first


def test_upcoming_maintenance() -> None:
    doc = load("upcoming-maintenance.json")
    assert gce.looks_like_upcoming_maintenance(doc)
    assert not gce.looks_like_upcoming_maintenance({})
    [record] = list(
        gce.parse_upcoming_maintenance(ctx(node="gke-train-a3-gpu-pool-9f8e7d6c-x2k4"), doc, 1)
    )
    assert isinstance(record, Evidence)
    assert record.kind == "maintenance.scheduled"
    assert record.node == record.instance_id == "gke-train-a3-gpu-pool-9f8e7d6c-x2k4"
    assert record.ts == parse_ts("2026-03-21T19:00:01Z")
    assert record.ts_end == parse_ts("2026-03-21T21:00:01Z")
    assert record.attrs["provider"] == "gce"
    assert record.attrs["type"] == "SCHEDULED"
    assert record.attrs["state"] == "scheduled"
    assert record.attrs["reasons"] == ["PLANNED_UPDATE", "PLANNED_NETWORK_UPDATE"]
    assert record.attrs["can_reschedule"] is True
    assert record.attrs["latest_start"] == record.ts


def test_upcoming_maintenance_camel_case_is_a_new_version() -> None:
    node = "gke-train-a3-gpu-pool-9f8e7d6c-x2k4"
    pending = next(
        iter(gce.parse_upcoming_maintenance(ctx(node=node), load("upcoming-maintenance.json"), 1))
    )
    doc = load("upcoming-maintenance-ongoing.json")
    assert gce.looks_like_upcoming_maintenance(doc)
    [ongoing] = list(gce.parse_upcoming_maintenance(ctx(node=node), doc, 1))
    assert isinstance(ongoing, Evidence) and isinstance(pending, Evidence)
    assert ongoing.attrs["state"] == "active"
    assert ongoing.attrs["can_reschedule"] is False
    assert ongoing.ts == pending.ts
    assert ongoing.id != pending.id


def test_upcoming_maintenance_needs_node() -> None:
    [bad] = list(gce.parse_upcoming_maintenance(ctx(), load("upcoming-maintenance.json"), 1))
    assert isinstance(bad, Rejected)
    assert bad.line is None and "--node" in bad.reason


def test_upcoming_maintenance_bad_time() -> None:
    doc = dict(load("upcoming-maintenance.json"), window_start_time="tomorrow")
    [bad] = list(gce.parse_upcoming_maintenance(ctx(node="n1"), doc, 3))
    assert isinstance(bad, Rejected) and bad.line == 3 and "tomorrow" in bad.reason
