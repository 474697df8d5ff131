"""AWS pollers through real boto3 clients and botocore's Stubber (which checks every request
and response against the service model), writing into a real index."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from whyjob.collector.live.aws import AsgActivities, InstanceStatus
from whyjob.collector.live.health import Health
from whyjob.collector.live.poller import Poller
from whyjob.collector.live.sink import Writer
from whyjob.core.evidence import Evidence
from whyjob.core.index import SqliteIndex

AWS = Path(__file__).parents[1] / "fixtures" / "aws"
_TIMES = {"StartTime", "EndTime", "NotBefore", "NotAfter", "NotBeforeDeadline"}


def _as_boto3(value: Any) -> Any:
    """A CLI JSON answer as boto3 returns it: timestamps as datetimes."""
    if isinstance(value, dict):
        return {
            k: datetime.fromisoformat(v.replace("Z", "+00:00")) if k in _TIMES else _as_boto3(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_as_boto3(v) for v in value]
    return value


def _parses(value: Any) -> bool:
    try:
        datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _client(service: str) -> Any:
    return boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    ).client(service)


@pytest.fixture
def activities() -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = _as_boto3(
        json.loads((AWS / "scaling-activities.json").read_text())
    )["Activities"]
    # The fixture also holds a damaged activity for the offline tests; AWS never sends one.
    return [a for a in answer if "StartTime" in a]


def test_asg_activities_are_read_page_by_page(activities: list[dict[str, Any]]) -> None:
    client = _client("autoscaling")
    with Stubber(client) as stub:
        stub.add_response(
            "describe_scaling_activities",
            {"Activities": activities[:6], "NextToken": "page-2"},
            {"AutoScalingGroupName": "eks-gpu-a100-ng-1a2b3c4d", "MaxRecords": 6},
        )
        stub.add_response(
            "describe_scaling_activities",
            {"Activities": activities[6:]},
            {
                "AutoScalingGroupName": "eks-gpu-a100-ng-1a2b3c4d",
                "MaxRecords": 6,
                "NextToken": "page-2",
            },
        )
        poll = AsgActivities(client, ["eks-gpu-a100-ng-1a2b3c4d"], page_size=6)(None)
        stub.assert_no_pending_responses()
    records = [i for i in poll.items if isinstance(i, Evidence)]
    assert {r.attrs["activity_id"] for r in records} == {a["ActivityId"] for a in activities}
    assert all(r.kind == "asg.activity" for r in records)
    newest = max(a["StartTime"] for a in activities)
    assert poll.checkpoint == str(int(newest.timestamp() * 1000))


def test_a_later_poll_stops_at_pages_older_than_what_can_still_change(
    activities: list[dict[str, Any]],
) -> None:
    client = _client("autoscaling")
    newest = max(a["StartTime"] for a in activities)
    checkpoint = str(int(newest.timestamp() * 1000))
    with Stubber(client) as stub:
        # Only the first page is asked for: it already reaches more than 2 h before the last poll.
        stub.add_response(
            "describe_scaling_activities",
            {"Activities": activities[:6], "NextToken": "page-2"},
            {"MaxRecords": 6},
        )
        poll = AsgActivities(client, page_size=6)(checkpoint)
        stub.assert_no_pending_responses()
    assert len([i for i in poll.items if isinstance(i, Evidence)]) == 6


def test_instance_status_events_become_maintenance_records() -> None:
    client = _client("ec2")
    answer = json.loads((AWS / "instance-status.json").read_text())
    # Leave out the fixture's damaged entries (made for the offline tests): AWS never sends them.
    answer["InstanceStatuses"] = [
        s
        for s in answer["InstanceStatuses"]
        if all(_parses(e.get(k)) for e in s.get("Events", []) for k in _TIMES & set(e))
    ]
    answer = _as_boto3(answer)
    with Stubber(client) as stub:
        stub.add_response("describe_instance_status", answer, {"IncludeAllInstances": True})
        poll = InstanceStatus(client)(None)
    scheduled = [
        i for i in poll.items if isinstance(i, Evidence) and i.kind == "maintenance.scheduled"
    ]
    assert scheduled and scheduled[0].instance_id == "i-0a1b2c3d4e5f60718"
    assert scheduled[0].attrs["code"] == "system-reboot"


def test_polls_are_committed_with_their_checkpoint_and_read_again_for_free(
    tmp_path: Path, activities: list[dict[str, Any]]
) -> None:
    client = _client("autoscaling")
    path = tmp_path / "index.sqlite"
    health = Health()
    with SqliteIndex(path) as index:
        writer = Writer(index, health).start()
        with Stubber(client) as stub:
            for _ in range(2):
                stub.add_response(
                    "describe_scaling_activities", {"Activities": activities}, {"MaxRecords": 100}
                )
            poller = Poller("asg", AsgActivities(client), 60, writer, health)
            poller.poll_once()
            poller.poll_once()  # the same answer again
        writer.flush()
        writer.stop()
        assert index.checkpoint("asg") == poller._checkpoint
        assert health.counters[("writer", "stored")] == len(activities)
    metrics = health.exposition()
    assert 'whyjob_collector_up{collector="asg"} 1' in metrics
    assert 'whyjob_collector_events_total{collector="asg",what="polls"} 2' in metrics
