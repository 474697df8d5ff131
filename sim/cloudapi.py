"""Cloud API exports: AWS CLI, gcloud, and Azure IMDS documents, each as its tool prints it.

* AWS CLI v2 JSON: four-space indent, keys in the service model's order, timestamps as
  `2026-03-04T10:11:12.345000+00:00`; `Details` of a scaling activity is itself a JSON string.
* EventBridge events: the envelope AWS delivers (`version`, `id`, `detail-type`, `source`,
  `account`, `time` with a Z, `region`, `resources`, `detail`).
* gcloud `--format=json`: two-space indent, sorted keys, times in US Pacific with an offset.
* Azure IMDS Scheduled Events: compact JSON, `NotBefore` in RFC 1123.
All times are the cloud's clock (`cloud`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from whyjob.sim.clock import Clocks, aws_cli, gce, rfc1123, rfc3339
from whyjob.sim.incident import Incident
from whyjob.sim.kubectl import reindent
from whyjob.sim.world import World, asg_arn

__all__ = ["write_aws", "write_azure", "write_gce"]

_STATE_CODES = {
    "pending": 0,
    "running": 16,
    "shutting-down": 32,
    "terminated": 48,
    "stopping": 64,
    "stopped": 80,
}


def _aws_json(obj: Any) -> bytes:
    """The AWS CLI's `--output json`: four-space indent, keys in the response's order."""
    return reindent(orjson.dumps(obj, option=orjson.OPT_INDENT_2), 4) + b"\n"


def write_aws(root: Path, world: World, incident: Incident, clocks: Clocks) -> int:
    cloud = world.cloud
    folder = root / "aws"
    folder.mkdir(parents=True, exist_ok=True)

    def when(us: int) -> str:
        return aws_cli(clocks.read("cloud", us))

    activities = []
    for act in sorted(incident.asg_activities, key=lambda a: a.start, reverse=True):
        item: dict[str, Any] = {
            "ActivityId": act.activity_id,
            "AutoScalingGroupName": act.asg,
            "Description": act.description,
            "Cause": act.cause,
            "StartTime": when(act.start),
        }
        if act.end is not None:
            item["EndTime"] = when(act.end)
        item["StatusCode"] = act.status
        item["Progress"] = act.progress
        item["Details"] = json.dumps(act.details, separators=(",", ":"))
        item["AutoScalingGroupARN"] = asg_arn(cloud, act.asg)
        activities.append(item)
    (folder / "scaling-activities.json").write_bytes(_aws_json({"Activities": activities}))

    statuses = []
    by_instance: dict[str, list[dict[str, Any]]] = {}
    for ev in incident.instance_events:
        event: dict[str, Any] = {
            "InstanceEventId": ev.event_id,
            "Code": ev.code,
            "Description": ev.description,
        }
        if ev.not_after is not None:
            event["NotAfter"] = when(ev.not_after)
        event["NotBefore"] = when(ev.not_before)
        if ev.not_before_deadline is not None:
            event["NotBeforeDeadline"] = when(ev.not_before_deadline)
        by_instance.setdefault(ev.instance_id, []).append(event)
    for node in world.nodes.values():
        if node.created_at > incident.end:
            continue
        gone = node.deleted_at is not None and node.deleted_at <= incident.end
        state = "terminated" if gone else "running"
        check = "not-applicable" if gone else "ok"
        details = [] if gone else [{"Name": "reachability", "Status": "passed"}]
        item = {"AvailabilityZone": node.zone}
        if node.instance_id in by_instance and not gone:
            item["Events"] = by_instance[node.instance_id]
        item["InstanceId"] = node.instance_id
        item["InstanceState"] = {"Code": _STATE_CODES[state], "Name": state}
        item["InstanceStatus"] = {"Details": details, "Status": check}
        item["SystemStatus"] = {"Details": details, "Status": check}
        statuses.append(item)
    (folder / "instance-status.json").write_bytes(_aws_json({"InstanceStatuses": statuses}))

    events = []
    for bridge in sorted(incident.bridge_events, key=lambda e: e.at):
        resources = [
            r
            if r.startswith("arn:")
            else f"arn:aws:ec2:{cloud.region}:{cloud.account}:instance/{r}"
            for r in bridge.resources
        ]
        events.append(
            {
                "version": "0",
                "id": bridge.id,
                "detail-type": bridge.detail_type,
                "source": bridge.source,
                "account": cloud.account,
                "time": rfc3339(clocks.read("cloud", bridge.at)),
                "region": cloud.region,
                "resources": resources,
                "detail": bridge.detail,
            }
        )
    (folder / "eventbridge.json").write_bytes(_aws_json(events))
    return 3


def write_gce(root: Path, world: World, incident: Incident, clocks: Clocks) -> int:
    cloud = world.cloud
    folder = root / "gce"
    folder.mkdir(parents=True, exist_ok=True)
    base = f"https://www.googleapis.com/compute/v1/projects/{cloud.project}"

    def when(us: int) -> str:
        return gce(clocks.read("cloud", us), cloud.gce_utc_offset)

    operations = []
    for op in sorted(incident.gce_operations, key=lambda o: o.at):
        zone = f"{base}/zones/{op.zone}"
        operations.append(
            {
                "endTime": when(op.end),
                "id": op.id,
                "insertTime": when(op.at),
                "kind": "compute#operation",
                "name": op.name,
                "operationType": op.op_type,
                "progress": 100,
                "selfLink": f"{zone}/operations/{op.name}",
                "startTime": when(op.at),
                "status": "DONE",
                **({"statusMessage": op.status_message} if op.status_message else {}),
                "targetId": op.target_id,
                "targetLink": f"{zone}/instances/{op.instance}",
                "user": op.user,
                "zone": zone,
            }
        )
    (folder / "operations.json").write_bytes(
        orjson.dumps(operations, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    upcoming = {u.node: u for u in incident.gce_upcoming}
    written = 1
    for node in world.nodes.values():
        if not node.has_gpus or node.created_at > incident.end:
            continue
        doc: dict[str, Any] = {}
        if node.name in upcoming:
            u = upcoming[node.name]
            doc = {
                "can_reschedule": "true" if u.can_reschedule else "false",
                "latest_window_start_time": rfc3339(clocks.read("cloud", u.latest_window_start)),
                "maintenance_reasons": u.reasons,
                "maintenance_status": u.status,
                "type": u.type,
                "window_end_time": rfc3339(clocks.read("cloud", u.window_end)),
                "window_start_time": rfc3339(clocks.read("cloud", u.window_start)),
            }
        path = folder / "upcoming-maintenance" / f"{node.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(json.dumps(doc, separators=(",", ":")).encode())
        written += 1
    return written


def write_azure(root: Path, world: World, incident: Incident, clocks: Clocks) -> int:
    folder = root / "azure" / "scheduled-events"
    folder.mkdir(parents=True, exist_ok=True)
    docs: dict[str, dict[str, Any]] = {}
    for node in world.nodes.values():
        if node.created_at <= incident.end:
            docs[node.name] = {"DocumentIncarnation": 1, "Events": []}
    for ev in incident.azure_events:
        doc = docs.setdefault(ev.node, {"DocumentIncarnation": 1, "Events": []})
        doc["DocumentIncarnation"] = max(doc["DocumentIncarnation"], ev.incarnation)
        doc["Events"].append(
            {
                "EventId": ev.event_id,
                "EventStatus": ev.status,
                "EventType": ev.event_type,
                "ResourceType": "VirtualMachine",
                "Resources": ev.resources,
                "NotBefore": rfc1123(clocks.read("cloud", ev.not_before)) if ev.not_before else "",
                "Description": ev.description,
                "EventSource": ev.source,
                "DurationInSeconds": ev.duration,
            }
        )
    for name, doc in docs.items():
        (folder / f"{name}.json").write_bytes(json.dumps(doc, separators=(",", ":")).encode())
    return len(docs)
