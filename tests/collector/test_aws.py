"""AWS exports: ASG activities, instance status, EventBridge events and IMDS documents."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from whyjob.collector.ingest import aws
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.ingest.jsondocs import Doc, iter_json_docs
from whyjob.core.entities import Binding
from whyjob.core.evidence import Evidence, Severity
from whyjob.core.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures" / "aws"
MTIME = parse_ts("2026-03-14T12:00:00Z")

JsonParser = Callable[[Context, Any, "int | None"], Iterator[Item]]


def run(parser: JsonParser, name: str, **options: Any) -> list[Item]:
    """Parse a fixture the way the importer does: every JSON document with its line."""
    ctx = Context(f"fixtures/{name}", IngestOptions(**options), MTIME)
    items: list[Item] = []
    for doc in iter_json_docs((FIXTURES / name).read_bytes()):
        assert isinstance(doc, Doc)
        items.extend(parser(ctx, doc.value, doc.line))
    return items


def evidence(items: list[Item]) -> list[Evidence]:
    return [i for i in items if isinstance(i, Evidence)]


def rejected(items: list[Item]) -> list[Rejected]:
    return [i for i in items if isinstance(i, Rejected)]


def load(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


# --- describe-scaling-activities ---------------------------------------------------------


def test_scaling_activities_detected() -> None:
    assert aws.looks_like_scaling_activities(load("scaling-activities.json"))
    assert not aws.looks_like_scaling_activities(load("instance-status.json"))
    assert not aws.looks_like_scaling_activities([])


def test_scaling_activity_triggers() -> None:
    items = run(aws.parse_scaling_activities, "scaling-activities.json")
    by_instance = {e.instance_id: e for e in evidence(items)}
    triggers = {i: e.attrs["trigger"] for i, e in by_instance.items()}
    assert triggers == {
        "i-0a1b2c3d4e5f60718": "scale_in",  # user changed the desired capacity
        "i-0b2c3d4e5f6071829": "scale_in",  # target-tracking alarm
        "i-0c3d4e5f607182930": "health_check",  # a EC2 health check … terminated or stopped
        "i-0d4e5f60718293a41": "replace_unhealthy",
        "i-0e5f60718293a4b52": "scale_out",
        "i-0f60718293a4b5c63": "instance_refresh",
        "i-0718293a4b5c6d704": "user_request",
        "i-08293a4b5c6d7e815": "rebalance",
        "i-093a4b5c6d7e8f926": "max_lifetime",
        None: "scale_out",  # the failed launch names no instance
    }


def test_scaling_activity_fields() -> None:
    items = run(aws.parse_scaling_activities, "scaling-activities.json")
    first = evidence(items)[0]
    assert first.kind == "asg.activity"
    assert first.source == "aws.asg"
    assert first.asg == "eks-gpu-a100-ng-1a2b3c4d"
    assert first.instance_id == "i-0a1b2c3d4e5f60718"
    assert first.ts == parse_ts("2026-03-14T09:12:10.512Z")
    assert first.ts_end == parse_ts("2026-03-14T09:14:02Z")
    assert first.attrs["action"] == "terminate"
    assert first.attrs["status_code"] == "Successful"
    assert first.attrs["progress"] == 100
    assert first.severity == Severity.WARNING
    assert (
        first.raw is not None
        and orjson.loads(first.raw)["ActivityId"] == first.attrs["activity_id"]
    )
    assert first.origin == "fixtures/scaling-activities.json:1"
    failed = next(e for e in evidence(items) if e.attrs["status_code"] == "Failed")
    assert failed.attrs["action"] == "launch"
    assert "not have sufficient p5.48xlarge capacity" in failed.attrs["status_message"]
    assert failed.severity == Severity.WARNING
    bindings = [i for i in items if isinstance(i, Binding)]
    assert (
        Binding(
            "instance.asg",
            "i-0a1b2c3d4e5f60718",
            "eks-gpu-a100-ng-1a2b3c4d",
            first.ts,
            first.ts_end or 0,
        )
        in bindings
    )
    assert len(bindings) == 9  # every activity that names an instance and an ASG


def test_scaling_activity_without_start_time_is_rejected() -> None:
    bad = rejected(run(aws.parse_scaling_activities, "scaling-activities.json"))
    assert len(bad) == 1
    assert "without StartTime" in bad[0].reason
    assert bad[0].body is not None and b"i-0a4b5c6d7e8f90a37" in bad[0].body


def test_scaling_activity_ids_are_stable_and_versioned() -> None:
    once = [e.id for e in evidence(run(aws.parse_scaling_activities, "scaling-activities.json"))]
    again = [e.id for e in evidence(run(aws.parse_scaling_activities, "scaling-activities.json"))]
    assert once == again
    assert len(set(once)) == len(once)
    # The InProgress activity, exported again once Successful, is a new version.
    later = evidence(run(aws.parse_scaling_activities, "scaling-activities-later.json"))
    assert later[0].attrs["activity_id"] == "3b4c5d6e-7f8a-4b9c-9d0e-1f2a3b4c5d6e"
    assert later[0].id not in once


@pytest.mark.parametrize(
    ("cause", "trigger"),
    [
        ("At 2026-01-01T00:00:00Z an instance was taken out of service in response to a "
         "system health-check.", "health_check"),
        ("At 2026-01-01T00:00:00Z an instance was taken out of service in response to EBS "
         "volume health check failure.", "health_check"),
        ("At 2026-01-01T00:00:00Z an instance was launched in response to an instance refresh.",
         "instance_refresh"),
        ("At 2026-01-01T00:00:00Z a user request update of AutoScalingGroup constraints to "
         "min: 0, max: 4, desired: 1 changing the desired capacity from 2 to 1.", "scale_in"),
        ("At 2026-01-01T00:00:00Z Availability Zone rebalancing.", "rebalance"),
        ("", "unknown"),
    ],
)  # fmt: skip
def test_classify_cause(cause: str, trigger: str) -> None:
    assert aws.classify_cause(cause) == trigger


# --- describe-instance-status ------------------------------------------------------------


def test_instance_status() -> None:
    assert aws.looks_like_instance_status(load("instance-status.json"))
    items = run(aws.parse_instance_status, "instance-status.json")
    records = evidence(items)
    scheduled = [e for e in records if e.kind == "maintenance.scheduled"]
    states = {e.attrs["event_id"]: e.attrs["state"] for e in scheduled}
    assert states == {
        "instance-event-0d59937288b749b32": "scheduled",
        "instance-event-0e6a0a48399c85a43": "completed",
        "instance-event-0f7b1b594aad96b54": "canceled",
    }
    reboot = scheduled[0]
    assert reboot.source == "aws.ec2"
    assert reboot.instance_id == "i-0a1b2c3d4e5f60718"
    assert reboot.ts == parse_ts("2026-03-20T02:00:00Z")
    assert reboot.ts_end == parse_ts("2026-03-20T04:00:00Z")
    assert reboot.attrs["code"] == "system-reboot"
    assert reboot.attrs["provider"] == "aws"
    assert reboot.attrs["deadline"] == parse_ts("2026-03-27T02:00:00Z")
    impaired = [e for e in records if e.kind == "instance.state"]
    assert len(impaired) == 1
    assert impaired[0].instance_id == "i-0c3d4e5f607182930"
    assert impaired[0].attrs["state"] == "impaired"
    assert impaired[0].ts == parse_ts("2026-03-14T06:58:00Z")
    assert "system status" in impaired[0].attrs["detail"]
    bad = rejected(items)
    assert len(bad) == 1 and "instance-stop" in bad[0].reason and "next tuesday" in bad[0].reason


def test_instance_status_ids_are_stable() -> None:
    first = [e.id for e in evidence(run(aws.parse_instance_status, "instance-status.json"))]
    assert first == [e.id for e in evidence(run(aws.parse_instance_status, "instance-status.json"))]


# --- EventBridge -------------------------------------------------------------------------


def test_eventbridge_single_object() -> None:
    assert aws.looks_like_eventbridge(load("eventbridge-spot.json"))
    [spot] = evidence(run(aws.parse_eventbridge, "eventbridge-spot.json"))
    assert spot.kind == "spot.interruption"
    assert spot.source == "aws.eventbridge"
    assert spot.instance_id == "i-0e5f60718293a4b52"
    assert spot.ts == parse_ts("2026-03-14T10:20:00Z")
    assert spot.ts_end == spot.ts + 120_000  # the two-minute warning
    assert spot.attrs == {
        "provider": "aws",
        "action": "terminate",
        "notice_time": spot.ts,
        "action_time": spot.ts + 120_000,
    }


def test_eventbridge_json_lines() -> None:
    ctx = Context("events.jsonl", IngestOptions(), MTIME)
    items: list[Item] = []
    for doc in iter_json_docs((FIXTURES / "eventbridge-events.jsonl").read_bytes()):
        assert isinstance(doc, Doc)
        assert aws.looks_like_eventbridge(doc.value)
        items.extend(aws.parse_eventbridge(ctx, doc.value, doc.line))
    kinds = [(e.kind, e.instance_id) for e in evidence(items)]
    assert kinds == [
        ("spot.rebalance", "i-0e5f60718293a4b52"),
        ("spot.interruption", "i-0e5f60718293a4b52"),
        ("instance.state", "i-0e5f60718293a4b52"),
        ("asg.activity", "i-0e5f60718293a4b52"),  # lifecycle hook
        ("asg.activity", "i-0e5f60718293a4b52"),  # terminate successful
        ("maintenance.scheduled", "i-0b2c3d4e5f6071829"),
        ("maintenance.scheduled", "i-0c3d4e5f607182930"),
    ]
    records = evidence(items)
    assert records[2].attrs["state"] == "shutting-down"
    assert records[2].severity == Severity.WARNING
    hook = records[3]
    assert hook.asg == "eks-gpu-a100-ng-1a2b3c4d"
    assert hook.attrs["action"] == "terminate"
    assert hook.attrs["lifecycle_hook"] == "nth-drain"
    assert hook.attrs["transition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    done = records[4]
    assert done.attrs["trigger"] == "health_check"
    assert done.attrs["activity_id"] == "b7c8d9e0-f1a2-4b3c-8d4e-5f6a7b8c9d0e"
    assert done.ts == parse_ts("2026-03-14T10:22:05.350Z")
    retirement = records[5]
    assert retirement.source == "aws.eventbridge"
    assert retirement.ts == parse_ts("2026-03-20T02:00:00Z")  # RFC 1123 in AWS Health
    assert retirement.ts_end == parse_ts("2026-03-20T04:00:00Z")
    assert retirement.attrs["code"] == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
    assert retirement.attrs["state"] == "scheduled"
    assert "degradation" in retirement.attrs["description"]
    # Both bindings: from the lifecycle hook and from the terminate result.
    assert sum(isinstance(i, Binding) for i in items) == 2
    # Not evidence: the S3 issue and the AMI event are counted, not rejected.
    assert ctx.skipped == {"AWS Health S3 issue": 1, "EventBridge EC2 AMI State Change": 1}
    bad = rejected(items)
    assert len(bad) == 1 and bad[0].line == 9 and "yesterday" in bad[0].reason


def test_eventbridge_list_and_ids() -> None:
    events = [
        orjson.loads(line)
        for line in (FIXTURES / "eventbridge-events.jsonl").read_bytes().splitlines()
    ]
    assert aws.looks_like_eventbridge(events)
    ctx = Context("events.json", IngestOptions(), MTIME)
    once = [e.id for e in evidence(list(aws.parse_eventbridge(ctx, events, 1)))]
    again = [e.id for e in evidence(list(aws.parse_eventbridge(ctx, events, 1)))]
    assert once == again and len(set(once)) == len(once) == 7


# --- IMDS --------------------------------------------------------------------------------


def test_imds_spot_instance_action() -> None:
    doc = load("imds-instance-action.json")
    assert aws.looks_like_imds_spot(doc)
    assert not aws.looks_like_imds_scheduled(doc)
    [spot] = evidence(
        run(aws.parse_imds_spot, "imds-instance-action.json", instance="i-0e5f60718293a4b52")
    )
    assert spot.source == "aws.imds"
    assert spot.kind == "spot.interruption"
    assert spot.instance_id == "i-0e5f60718293a4b52"
    assert spot.ts_end == parse_ts("2026-03-14T10:22:00Z")
    assert spot.ts == spot.ts_end - 120_000
    assert spot.attrs["action"] == "terminate"


def test_imds_rebalance_with_node() -> None:
    assert aws.looks_like_imds_spot(load("imds-rebalance.json"))
    [rebalance] = evidence(
        run(aws.parse_imds_spot, "imds-rebalance.json", node="ip-10-0-1-23.ec2.internal")
    )
    assert rebalance.kind == "spot.rebalance"
    assert rebalance.node == "ip-10-0-1-23.ec2.internal"
    assert rebalance.instance_id is None
    assert rebalance.ts == parse_ts("2026-03-14T10:15:30Z")


def test_imds_scheduled() -> None:
    doc = load("imds-scheduled.json")
    assert aws.looks_like_imds_scheduled(doc)
    assert not aws.looks_like_eventbridge(doc)
    records = evidence(
        run(aws.parse_imds_scheduled, "imds-scheduled.json", instance="i-0a1b2c3d4e5f60718")
    )
    assert [(e.attrs["code"], e.attrs["state"]) for e in records] == [
        ("system-reboot", "scheduled"),
        ("instance-retirement", "completed"),
    ]
    assert records[0].ts == parse_ts("2026-03-20T02:00:00Z")  # "20 Mar 2026 02:00:00 GMT"
    assert records[0].ts_end == parse_ts("2026-03-20T04:00:00Z")
    assert records[0].source == "aws.imds"
    assert records[0].instance_id == "i-0a1b2c3d4e5f60718"
    assert records[0].attrs["event_id"] == "instance-event-0d59937288b749b32"


@pytest.mark.parametrize(
    ("parser", "name"),
    [
        (aws.parse_imds_spot, "imds-instance-action.json"),
        (aws.parse_imds_scheduled, "imds-scheduled.json"),
    ],
)
def test_imds_needs_instance_or_node(parser: JsonParser, name: str) -> None:
    items = run(parser, name)
    assert len(items) == 1
    [bad] = rejected(items)
    assert bad.line is None
    assert "--instance" in bad.reason and "--node" in bad.reason


def test_imds_bad_time_is_rejected() -> None:
    ctx = Context("action.json", IngestOptions(instance="i-0e5f60718293a4b52"), MTIME)
    [bad] = list(aws.parse_imds_spot(ctx, {"action": "stop", "time": "soon"}, 1))
    assert isinstance(bad, Rejected) and "soon" in bad.reason
