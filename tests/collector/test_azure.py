"""Azure IMDS Scheduled Events and the scale-set VM → AKS node name mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from whyjob.collector.ingest import azure
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.core.evidence import Evidence, Severity
from whyjob.core.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures" / "azure"
MTIME = parse_ts("2026-03-14T18:25:00Z")


def load(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


def parse(name: str, mtime: int | None = MTIME, **options: Any) -> list[Item]:
    ctx = Context(f"fixtures/{name}", IngestOptions(**options), mtime)
    return list(azure.parse_scheduled_events(ctx, load(name), 1))


def records(items: list[Item]) -> list[Evidence]:
    return [i for i in items if isinstance(i, Evidence)]


@pytest.mark.parametrize(
    ("vm", "node"),
    [
        ("aks-gpupool-12345678-vmss_3", "aks-gpupool-12345678-vmss000003"),
        ("aks-gpupool-12345678-vmss_0", "aks-gpupool-12345678-vmss000000"),
        ("aks-gpupool-12345678-vmss_10", "aks-gpupool-12345678-vmss00000a"),
        ("aks-gpupool-12345678-vmss_35", "aks-gpupool-12345678-vmss00000z"),
        ("aks-gpupool-12345678-vmss_36", "aks-gpupool-12345678-vmss000010"),
        ("nsgvmss_85", "nsgvmss00002d"),  # Microsoft's example: "nsgvmss00002D"
        ("aks-gpupool-12345678-vmss_2176782335", "aks-gpupool-12345678-vmsszzzzzz"),
        ("gpu-vm-flex_4f3a2b1c", None),  # Flexible mode: no derivable computer name
        ("aks-gpu-vm-pool-0", "aks-gpu-vm-pool-0"),  # a standalone VM is its own node name
    ],
)
def test_vmss_node_name(vm: str, node: str | None) -> None:
    assert azure.vmss_node_name(vm) == node


def test_detected() -> None:
    assert azure.looks_like_scheduled_events(load("scheduled-events.json"))
    assert not azure.looks_like_scheduled_events({"Events": []})  # no DocumentIncarnation
    assert not azure.looks_like_scheduled_events([])


def test_events_per_resource() -> None:
    items = parse("scheduled-events.json")
    got = [(e.kind, e.instance_id, e.node) for e in records(items)]
    assert got == [
        ("maintenance.scheduled", "aks-gpupool-12345678-vmss_3", "aks-gpupool-12345678-vmss000003"),
        (
            "maintenance.scheduled",
            "aks-gpupool-12345678-vmss_36",
            "aks-gpupool-12345678-vmss000010",
        ),
        ("maintenance.scheduled", "aks-gpupool-12345678-vmss_3", "aks-gpupool-12345678-vmss000003"),
        ("spot.interruption", "aks-spota100-87654321-vmss_7", "aks-spota100-87654321-vmss000007"),
        ("spot.interruption", "aks-spota100-87654321-vmss_10", "aks-spota100-87654321-vmss00000a"),
        (
            "instance.terminate_notice",
            "aks-gpupool-12345678-vmss_5",
            "aks-gpupool-12345678-vmss000005",
        ),
        ("maintenance.scheduled", "gpu-vm-flex_4f3a2b1c", None),
    ]


def test_reboot_window() -> None:
    reboot = records(parse("scheduled-events.json"))[0]
    assert reboot.source == "azure"
    assert reboot.ts == parse_ts("2026-03-14T18:29:47Z")
    assert reboot.ts_end == reboot.ts + 9_000
    assert reboot.severity == Severity.WARNING
    assert reboot.attrs == {
        "provider": "azure",
        "type": "Reboot",
        "state": "scheduled",
        "description": "Host server is undergoing maintenance.",
        "event_id": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
        "event_source": "Platform",
        "duration_seconds": 9,
        "ts_source": "not_before",
    }
    assert reboot.raw is not None and orjson.loads(reboot.raw)["EventType"] == "Reboot"


def test_started_event_uses_at_then_mtime() -> None:
    freeze = records(parse("scheduled-events.json"))[2]
    assert freeze.attrs["type"] == "Freeze" and freeze.attrs["state"] == "active"
    assert freeze.ts == MTIME and freeze.attrs["ts_source"] == "mtime"
    assert freeze.ts_end == MTIME + 5_000
    at = parse_ts("2026-03-14T18:20:00Z")
    freeze_at = records(parse("scheduled-events.json", at=at))[2]
    assert freeze_at.ts == at and freeze_at.attrs["ts_source"] == "at"
    assert freeze_at.id == freeze.id  # the same event, whatever clock placed it


def test_preempt_and_terminate() -> None:
    items = records(parse("scheduled-events.json"))
    preempt, terminate = items[3], items[5]
    evict = parse_ts("2026-03-14T18:31:00Z")
    assert preempt.ts_end == evict and preempt.ts == evict - 30_000
    assert preempt.attrs["action"] == "preempt" and preempt.attrs["provider"] == "azure"
    assert preempt.attrs["action_time"] == evict
    assert terminate.ts == parse_ts("2026-03-14T18:40:00Z")
    assert terminate.ts_end is None  # DurationInSeconds -1
    assert terminate.attrs["event_type"] == "Terminate"
    assert terminate.attrs["event_source"] == "User"


def test_bad_events_are_rejected() -> None:
    bad = [i for i in parse("scheduled-events.json") if isinstance(i, Rejected)]
    assert len(bad) == 2
    assert "without EventId or EventType" in bad[0].reason
    assert "the day after" in bad[1].reason


def test_started_event_without_any_clock() -> None:
    items = parse("scheduled-events.json", mtime=None)
    bad = [i for i in items if isinstance(i, Rejected) and "--at" in i.reason]
    assert len(bad) == 1 and "0D4F5E6A" in bad[0].reason


def test_event_without_resources_needs_a_flag() -> None:
    [bad] = parse("scheduled-events-no-resources.json")
    assert isinstance(bad, Rejected) and "--node" in bad.reason
    [spot] = records(
        parse(
            "scheduled-events-no-resources.json",
            instance="aks-spota100-87654321-vmss_7",
            node="aks-spota100-87654321-vmss000007",
        )
    )
    assert spot.kind == "spot.interruption"
    assert spot.instance_id == "aks-spota100-87654321-vmss_7"
    assert spot.node == "aks-spota100-87654321-vmss000007"


def test_flexible_vm_gets_node_from_flags() -> None:
    items = records(
        parse("scheduled-events.json", instance="gpu-vm-flex_4f3a2b1c", node="gpu-flex-node-1")
    )
    assert items[-1].instance_id == "gpu-vm-flex_4f3a2b1c"
    assert items[-1].node == "gpu-flex-node-1"
    assert items[0].node == "aks-gpupool-12345678-vmss000003"  # others keep their own name


def test_ids_are_stable_and_versioned() -> None:
    first = [e.id for e in records(parse("scheduled-events.json"))]
    assert first == [e.id for e in records(parse("scheduled-events.json"))]
    assert len(set(first)) == len(first)
    doc = load("scheduled-events.json")
    doc["DocumentIncarnation"] = 8
    doc["Events"][0]["EventStatus"] = "Started"
    doc["Events"][0]["NotBefore"] = ""
    ctx = Context("again", IngestOptions(), MTIME)
    later = [i for i in azure.parse_scheduled_events(ctx, doc, 1) if isinstance(i, Evidence)]
    assert later[0].id != first[0]  # Scheduled → Started is a new version
    assert [e.id for e in later[2:]] == first[2:]  # the others did not change
