"""AWS exports: Auto Scaling activities, EC2 instance status, EventBridge events, IMDS documents.

- `aws autoscaling describe-scaling-activities` → `asg.activity`, one per activity version, with
  the instance taken from the Description and the trigger classified from the Cause clauses
  (reference B11), plus an instance.asg binding. The id hashes the ActivityId with its
  StatusCode and Progress, so an activity seen InProgress and later Successful is two versions.
- `aws ec2 describe-instance-status` → `maintenance.scheduled` per scheduled event (the
  `[Completed]` / `[Canceled]` Description prefix gives its state) and `instance.state` for an
  impaired instance or system status check.
- EventBridge events (one object, a list, or JSON Lines): Spot interruption warnings,
  rebalance recommendations, instance state changes, AWS Health scheduled changes for EC2, and
  aws.autoscaling launch/terminate results and lifecycle actions. Other detail-types are not
  evidence; they are counted in `ctx.skipped`.
- IMDS documents, which never name their instance (so they need --instance or --node):
  `spot/instance-action`, `events/recommendations/rebalance` and
  `events/maintenance/scheduled`.

A Spot interruption is a state with a start and an end: `ts` is the notice and `ts_end` when
the capacity is taken. EventBridge gives the notice time and AWS's fixed two-minute warning
gives the end; IMDS gives the action time and the notice is two minutes before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected, text_or_none
from whyjob.core.entities import Binding
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = [
    "classify_cause",
    "looks_like_eventbridge",
    "looks_like_imds_scheduled",
    "looks_like_imds_spot",
    "looks_like_instance_status",
    "looks_like_scaling_activities",
    "parse_eventbridge",
    "parse_imds_scheduled",
    "parse_imds_spot",
    "parse_instance_status",
    "parse_scaling_activities",
]

SPOT_NOTICE_MS: Final = 120_000  # AWS: "two minutes before Amazon EC2 stops or terminates"

_DESCRIPTION = re.compile(
    r"^(?P<verb>Launching a new EC2 instance|Terminating EC2 instance)(?:: (?P<id>i-[0-9a-f]+))?"
)
_INSTANCE_ARN = re.compile(r":instance/(?P<id>i-[0-9a-f]+)$")
_CAPACITY = re.compile(r"(?:changing the desired capacity|capacity) from (\d+) to (\d+)")
# Ordered: the first clause that matches names the trigger (reference B11).
_CAUSES: Final = (
    (re.compile(r"in response to an instance refresh", re.IGNORECASE), "instance_refresh"),
    (re.compile(r"maximum instance lifetime", re.IGNORECASE), "max_lifetime"),
    (re.compile(r"rebalanc|to balance instances", re.IGNORECASE), "rebalance"),
    (re.compile(r"unhealthy instance needing to be replaced", re.IGNORECASE), "replace_unhealthy"),
    (re.compile(r"health[- ]?check", re.IGNORECASE), "health_check"),
    (
        re.compile(r"taken out of service in response to a user request", re.IGNORECASE),
        "user_request",
    ),
    (re.compile(r"shrinking the capacity", re.IGNORECASE), "scale_in"),
    (re.compile(r"increasing the capacity", re.IGNORECASE), "scale_out"),
)
_ASG_SUCCESS_TYPES: Final = {
    "EC2 Instance Launch Successful": "launch",
    "EC2 Instance Launch Unsuccessful": "launch",
    "EC2 Instance Terminate Successful": "terminate",
    "EC2 Instance Terminate Unsuccessful": "terminate",
}
_ASG_LIFECYCLE_TYPES: Final = {
    "EC2 Instance-terminate Lifecycle Action": "terminate",
    "EC2 Instance-launch Lifecycle Action": "launch",
}
_STOPPING_STATES: Final = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
_EVENT_STATES: Final = {
    # IMDS State, AWS Health statusCode → one vocabulary for maintenance.scheduled
    "active": "scheduled",
    "upcoming": "scheduled",
    "open": "active",
    "closed": "completed",
    "completed": "completed",
    "canceled": "canceled",
    "cancelled": "canceled",
}
_STATE_SEVERITY: Final = {
    "scheduled": Severity.WARNING,
    "active": Severity.WARNING,
    "completed": Severity.NOTICE,
    "canceled": Severity.INFO,
}


def _ts(value: Any) -> int | None:
    """A timestamp field: None when absent, ValueError when present and unreadable."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    return parse_ts(value)


def classify_cause(cause: str) -> str:
    """The trigger of an ASG activity from its Cause text (the B11 clause patterns).

    The desired-capacity arithmetic decides when no clause does: fewer instances is a
    scale-in, more a scale-out.
    """
    for pattern, trigger in _CAUSES:
        if pattern.search(cause):
            return trigger
    if match := _CAPACITY.search(cause):
        before, after = int(match.group(1)), int(match.group(2))
        if after < before:
            return "scale_in"
        if after > before:
            return "scale_out"
    return "unknown"


# --- describe-scaling-activities ------------------------------------------------------------


def looks_like_scaling_activities(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("Activities"), list)


def parse_scaling_activities(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """`{"Activities": [...]}`: one `asg.activity` per activity, and its instance.asg binding."""
    for activity in doc.get("Activities") or ():
        if not isinstance(activity, Mapping):
            yield Rejected(line, "Activity is not a JSON object")
            continue
        yield from _activity(ctx, activity, "aws.asg", None, line)


def _activity(
    ctx: Context,
    activity: Mapping[str, Any],
    source: str,
    instance_hint: str | None,
    line: int | None,
    raw: bytes | None = None,
) -> Iterator[Item]:
    raw = raw or orjson.dumps(activity)
    activity_id = text_or_none(activity.get("ActivityId"))
    if activity_id is None:
        yield Rejected(line, "Activity without ActivityId", raw)
        return
    try:
        start = _ts(activity.get("StartTime"))
        end = _ts(activity.get("EndTime"))
    except ValueError as exc:
        yield Rejected(line, f"Activity {activity_id}: {exc}", raw)
        return
    if start is None:
        yield Rejected(line, f"Activity {activity_id} without StartTime", raw)
        return
    description = text_or_none(activity.get("Description")) or ""
    cause = text_or_none(activity.get("Cause")) or ""
    status = text_or_none(activity.get("StatusCode"))
    progress = activity.get("Progress")
    asg = text_or_none(activity.get("AutoScalingGroupName"))
    instance = instance_hint
    action: str | None = None
    if match := _DESCRIPTION.match(description):
        action = "launch" if match.group("verb").startswith("Launching") else "terminate"
        instance = match.group("id") or instance
    trigger = classify_cause(cause)
    if status in ("Failed", "Cancelled") or action == "terminate":
        severity = Severity.WARNING
    else:
        severity = Severity.INFO
    message = f"ASG {asg or '?'}: {description or 'activity'} ({trigger}, {status or 'no status'})"
    if status == "Failed" and activity.get("StatusMessage"):
        message += f": {activity['StatusMessage']}"
    yield ctx.evidence(
        source=source,
        native_id=activity_id,
        version=f"{status}/{progress}",
        ts=start,
        ts_end=end,
        kind="asg.activity",
        message=message,
        severity=severity,
        asg=asg,
        instance_id=instance,
        attrs={
            "activity_id": activity_id,
            "status_code": status,
            "description": description or None,
            "cause": cause or None,
            "action": action,
            "trigger": trigger,
            "progress": progress,
            "status_message": text_or_none(activity.get("StatusMessage")),
        },
        raw=raw,
        line=line,
    )
    if instance and asg:
        yield Binding("instance.asg", instance, asg, start, end or start)


# --- describe-instance-status ---------------------------------------------------------------


def looks_like_instance_status(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("InstanceStatuses"), list)


def _event_state(description: str) -> str:
    if description.startswith("[Completed]"):
        return "completed"
    if description.startswith(("[Canceled]", "[Cancelled]")):
        return "canceled"
    return "scheduled"


def parse_instance_status(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """`{"InstanceStatuses": [...]}`: scheduled events and impaired status checks."""
    for status in doc.get("InstanceStatuses") or ():
        if not isinstance(status, Mapping):
            yield Rejected(line, "InstanceStatus is not a JSON object")
            continue
        instance = text_or_none(status.get("InstanceId"))
        if instance is None:
            yield Rejected(line, "InstanceStatus without InstanceId", orjson.dumps(status))
            continue
        for event in status.get("Events") or ():
            yield from _instance_event(ctx, instance, event, line)
        for check, label in (("SystemStatus", "system"), ("InstanceStatus", "instance")):
            yield from _impaired(ctx, instance, status.get(check), label, line)


def _instance_event(ctx: Context, instance: str, event: Any, line: int | None) -> Iterator[Item]:
    if not isinstance(event, Mapping):
        yield Rejected(line, f"{instance}: scheduled event is not a JSON object")
        return
    code = text_or_none(event.get("Code")) or "unknown"
    try:
        start = _ts(event.get("NotBefore"))
        end = _ts(event.get("NotAfter"))
        deadline = _ts(event.get("NotBeforeDeadline"))
    except ValueError as exc:
        yield Rejected(line, f"{instance} event {code}: {exc}", orjson.dumps(event))
        return
    if start is None:
        yield Rejected(line, f"{instance} event {code} without NotBefore", orjson.dumps(event))
        return
    description = text_or_none(event.get("Description")) or ""
    state = _event_state(description)
    event_id = text_or_none(event.get("InstanceEventId")) or f"{instance}/{code}/{start}"
    yield ctx.evidence(
        source="aws.ec2",
        native_id=event_id,
        version=f"{state}/{start}/{end}",
        ts=start,
        ts_end=end,
        kind="maintenance.scheduled",
        message=f"EC2 {code} {state} for {instance}: {description}".rstrip(": "),
        severity=_STATE_SEVERITY[state],
        instance_id=instance,
        attrs={
            "provider": "aws",
            "code": code,
            "state": state,
            "description": description or None,
            "event_id": event_id,
            "deadline": deadline,
        },
        raw=orjson.dumps(event),
        line=line,
    )


def _impaired(
    ctx: Context, instance: str, summary: Any, label: str, line: int | None
) -> Iterator[Item]:
    if not isinstance(summary, Mapping) or summary.get("Status") != "impaired":
        return
    details = [d for d in summary.get("Details") or () if isinstance(d, Mapping)]
    failed = [d for d in details if d.get("Status") == "failed"] or details
    try:
        since = min(
            (t for d in failed if (t := _ts(d.get("ImpairedSince"))) is not None), default=None
        )
    except ValueError as exc:
        yield Rejected(line, f"{instance} {label} status: {exc}", orjson.dumps(summary))
        return
    ts_source = "impaired_since"
    if since is None:
        since, ts_source = (
            (ctx.options.at, "at") if ctx.options.at is not None else (ctx.mtime_ms, "mtime")
        )
    if since is None:
        yield Rejected(line, f"{instance} {label} status impaired with no time: pass --at TIME")
        return
    checks = ", ".join(f"{d.get('Name')} {d.get('Status')}" for d in failed) or "impaired"
    yield ctx.evidence(
        source="aws.ec2",
        native_id=f"{instance}/{label}-status",
        version=f"impaired/{since if ts_source == 'impaired_since' else ''}",
        ts=since,
        kind="instance.state",
        message=f"EC2 {label} status check impaired for {instance} ({checks})",
        severity=Severity.ERROR,
        instance_id=instance,
        attrs={"state": "impaired", "detail": f"{label} status: {checks}", "ts_source": ts_source},
        raw=orjson.dumps(summary),
        line=line,
    )


# --- EventBridge ----------------------------------------------------------------------------


def _is_event(doc: Any) -> bool:
    return isinstance(doc, dict) and "detail-type" in doc and "detail" in doc


def looks_like_eventbridge(doc: Any) -> bool:
    """One EventBridge event, or a list of them."""
    if isinstance(doc, list):
        return bool(doc) and _is_event(doc[0])
    return _is_event(doc)


def parse_eventbridge(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """EventBridge events that explain an instance going away; others are counted as skipped."""
    for event in doc if isinstance(doc, list) else (doc,):
        if not _is_event(event) or not isinstance(event.get("detail"), Mapping):
            yield Rejected(line, "EventBridge event without detail-type or detail")
            continue
        try:
            yield from _eventbridge(ctx, event, line)
        except ValueError as exc:
            yield Rejected(
                line, f"EventBridge {event.get('detail-type')}: {exc}", orjson.dumps(event)
            )


def _instance_of(event: Mapping[str, Any], detail: Mapping[str, Any]) -> str | None:
    instance = text_or_none(detail.get("instance-id")) or text_or_none(detail.get("EC2InstanceId"))
    if instance:
        return instance
    for resource in event.get("resources") or ():
        if isinstance(resource, str) and (match := _INSTANCE_ARN.search(resource)):
            return match.group("id")
    return None


def _eventbridge(ctx: Context, event: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    detail_type = str(event["detail-type"])
    detail: Mapping[str, Any] = event["detail"]
    at = _ts(event.get("time"))
    raw = orjson.dumps(event)
    event_id = text_or_none(event.get("id"))
    instance = _instance_of(event, detail)
    if detail_type in _ASG_SUCCESS_TYPES:
        activity = dict(detail)
        activity.setdefault("StartTime", event.get("time"))
        description = text_or_none(activity.get("Description")) or ""
        if not _DESCRIPTION.match(description):
            verb = (
                "Launching a new EC2 instance"
                if _ASG_SUCCESS_TYPES[detail_type] == "launch"
                else ("Terminating EC2 instance")
            )
            activity["Description"] = f"{verb}: {instance}" if instance else verb
        yield from _activity(ctx, activity, "aws.eventbridge", instance, line, raw)
        return
    if at is None:
        raise ValueError("event without time")
    native = event_id or f"{detail_type}/{instance}/{at}"
    if detail_type == "EC2 Spot Instance Interruption Warning":
        action = text_or_none(detail.get("instance-action")) or "terminate"
        yield ctx.evidence(
            source="aws.eventbridge",
            native_id=native,
            ts=at,
            ts_end=at + SPOT_NOTICE_MS,
            kind="spot.interruption",
            message=f"EC2 Spot interruption warning for {instance}: {action} in 2 minutes",
            severity=Severity.WARNING,
            instance_id=instance,
            attrs={
                "provider": "aws",
                "action": action,
                "notice_time": at,
                "action_time": at + SPOT_NOTICE_MS,
            },
            raw=raw,
            line=line,
        )
    elif detail_type == "EC2 Instance Rebalance Recommendation":
        yield ctx.evidence(
            source="aws.eventbridge",
            native_id=native,
            ts=at,
            kind="spot.rebalance",
            message=f"EC2 rebalance recommendation for {instance}",
            severity=Severity.NOTICE,
            instance_id=instance,
            attrs={"provider": "aws"},
            raw=raw,
            line=line,
        )
    elif detail_type == "EC2 Instance State-change Notification":
        state = text_or_none(detail.get("state")) or "unknown"
        yield ctx.evidence(
            source="aws.eventbridge",
            native_id=native,
            version=state,
            ts=at,
            kind="instance.state",
            message=f"EC2 instance {instance} is {state}",
            severity=Severity.WARNING if state in _STOPPING_STATES else Severity.INFO,
            instance_id=instance,
            attrs={"state": state, "detail": None},
            raw=raw,
            line=line,
        )
    elif detail_type in _ASG_LIFECYCLE_TYPES:
        yield from _lifecycle(ctx, event, detail, instance, at, raw, line)
    elif detail_type == "AWS Health Event":
        yield from _health(ctx, event, detail, at, raw, line)
    else:
        ctx.skipped[f"EventBridge {detail_type}"] = (
            ctx.skipped.get(f"EventBridge {detail_type}", 0) + 1
        )


def _lifecycle(
    ctx: Context,
    event: Mapping[str, Any],
    detail: Mapping[str, Any],
    instance: str | None,
    at: int,
    raw: bytes,
    line: int | None,
) -> Iterator[Item]:
    action = _ASG_LIFECYCLE_TYPES[str(event["detail-type"])]
    asg = text_or_none(detail.get("AutoScalingGroupName"))
    hook = text_or_none(detail.get("LifecycleHookName"))
    token = (
        text_or_none(detail.get("LifecycleActionToken"))
        or text_or_none(event.get("id"))
        or f"{instance}/{at}"
    )
    yield ctx.evidence(
        source="aws.eventbridge",
        native_id=token,
        version=action,
        ts=at,
        kind="asg.activity",
        message=f"ASG {asg or '?'}: lifecycle hook {hook or '?'} holds {instance} ({action})",
        severity=Severity.WARNING if action == "terminate" else Severity.INFO,
        asg=asg,
        instance_id=instance,
        attrs={
            "activity_id": None,
            "status_code": "MidLifecycleAction",
            "description": None,
            "cause": None,
            "action": action,
            "trigger": "unknown",
            "progress": None,
            "status_message": None,
            "lifecycle_hook": hook,
            "transition": text_or_none(detail.get("LifecycleTransition")),
        },
        raw=raw,
        line=line,
    )
    if instance and asg:
        yield Binding("instance.asg", instance, asg, at, at)


def _health(
    ctx: Context,
    event: Mapping[str, Any],
    detail: Mapping[str, Any],
    at: int,
    raw: bytes,
    line: int | None,
) -> Iterator[Item]:
    """AWS Health scheduledChange for EC2: one maintenance.scheduled per affected instance."""
    category = text_or_none(detail.get("eventTypeCategory"))
    if detail.get("service") != "EC2" or category != "scheduledChange":
        key = f"AWS Health {detail.get('service')} {category}"
        ctx.skipped[key] = ctx.skipped.get(key, 0) + 1
        return
    start = _ts(detail.get("startTime")) or at
    end = _ts(detail.get("endTime"))
    code = text_or_none(detail.get("eventTypeCode")) or "unknown"
    arn = text_or_none(detail.get("eventArn")) or text_or_none(event.get("id")) or f"{code}/{start}"
    status = (text_or_none(detail.get("statusCode")) or "upcoming").lower()
    state = _EVENT_STATES.get(status, status)
    description = next(
        (
            d.get("latestDescription")
            for d in detail.get("eventDescription") or ()
            if isinstance(d, Mapping) and d.get("latestDescription")
        ),
        None,
    )
    instances = [
        e["entityValue"]
        for e in detail.get("affectedEntities") or ()
        if isinstance(e, Mapping) and isinstance(e.get("entityValue"), str)
    ]
    if not instances:
        instances = [
            m.group("id")
            for r in event.get("resources") or ()
            if isinstance(r, str) and (m := _INSTANCE_ARN.search(r))
        ]
    if not instances:
        yield Rejected(line, f"AWS Health {code} names no instance", raw)
        return
    for instance in instances:
        yield ctx.evidence(
            source="aws.eventbridge",
            native_id=f"{arn}/{instance}",
            version=f"{state}/{start}/{end}",
            ts=start,
            ts_end=end,
            kind="maintenance.scheduled",
            message=f"AWS Health {code} ({state}) for {instance}",
            severity=_STATE_SEVERITY.get(state, Severity.WARNING),
            instance_id=instance,
            attrs={
                "provider": "aws",
                "code": code,
                "state": state,
                "description": description,
                "event_id": arn,
            },
            raw=raw,
            line=line,
        )


# --- IMDS -----------------------------------------------------------------------------------


def _imds_target(ctx: Context) -> tuple[str | None, str | None] | Rejected:
    instance, node = ctx.options.instance, ctx.node_hint
    if instance is None and node is None:
        return Rejected(
            None,
            "IMDS documents do not name their instance: pass --instance INSTANCE_ID or --node NODE",
        )
    return instance, node


def looks_like_imds_spot(doc: Any) -> bool:
    """`spot/instance-action` (`{"action", "time"}`) or the rebalance `{"noticeTime"}`."""
    if not isinstance(doc, dict):
        return False
    keys = doc.keys()
    return (keys == {"action", "time"} and isinstance(doc.get("action"), str)) or keys == {
        "noticeTime"
    }


def parse_imds_spot(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """A Spot interruption notice or rebalance recommendation read from IMDS on the node."""
    target = _imds_target(ctx)
    if isinstance(target, Rejected):
        yield target
        return
    instance, node = target
    who = instance or node
    raw = orjson.dumps(doc)
    try:
        if "noticeTime" in doc:
            notice = _ts(doc.get("noticeTime"))
            if notice is None:
                yield Rejected(line, "rebalance recommendation without noticeTime", raw)
                return
            yield ctx.evidence(
                source="aws.imds",
                native_id=f"{who}/rebalance/{notice}",
                ts=notice,
                kind="spot.rebalance",
                message=f"EC2 rebalance recommendation for {who}",
                severity=Severity.NOTICE,
                instance_id=instance,
                node=node,
                attrs={"provider": "aws"},
                raw=raw,
                line=line,
            )
            return
        action_time = _ts(doc.get("time"))
    except ValueError as exc:
        yield Rejected(line, f"IMDS spot document: {exc}", raw)
        return
    if action_time is None:
        yield Rejected(line, "spot instance-action without time", raw)
        return
    action = str(doc.get("action"))
    notice = action_time - SPOT_NOTICE_MS
    yield ctx.evidence(
        source="aws.imds",
        native_id=f"{who}/instance-action/{action_time}",
        version=action,
        ts=notice,
        ts_end=action_time,
        kind="spot.interruption",
        message=f"EC2 Spot interruption for {who}: {action} at the end of the 2-minute notice",
        severity=Severity.WARNING,
        instance_id=instance,
        node=node,
        attrs={
            "provider": "aws",
            "action": action,
            "notice_time": notice,
            "action_time": action_time,
        },
        raw=raw,
        line=line,
    )


def _is_scheduled_event(doc: Any) -> bool:
    return isinstance(doc, dict) and "NotBefore" in doc and "Code" in doc and "EventId" in doc


def looks_like_imds_scheduled(doc: Any) -> bool:
    """`events/maintenance/scheduled`: a list of `{NotBefore, Code, EventId, …}`."""
    return isinstance(doc, list) and bool(doc) and _is_scheduled_event(doc[0])


def parse_imds_scheduled(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """IMDS scheduled maintenance events of the instance the document was read on."""
    target = _imds_target(ctx)
    if isinstance(target, Rejected):
        yield target
        return
    instance, node = target
    for event in doc:
        if not _is_scheduled_event(event):
            yield Rejected(line, "scheduled event without NotBefore, Code or EventId")
            continue
        raw = orjson.dumps(event)
        try:
            start = _ts(event.get("NotBefore"))
            end = _ts(event.get("NotAfter"))
        except ValueError as exc:
            yield Rejected(line, f"scheduled event {event.get('EventId')}: {exc}", raw)
            continue
        if start is None:
            yield Rejected(line, f"scheduled event {event.get('EventId')} without NotBefore", raw)
            continue
        description = text_or_none(event.get("Description")) or ""
        state = _EVENT_STATES.get(str(event.get("State") or "").lower()) or _event_state(
            description
        )
        event_id = str(event["EventId"])
        code = str(event.get("Code"))
        yield ctx.evidence(
            source="aws.imds",
            native_id=event_id,
            version=f"{state}/{start}/{end}",
            ts=start,
            ts_end=end,
            kind="maintenance.scheduled",
            message=f"EC2 {code} {state} for {instance or node}: {description}".rstrip(": "),
            severity=_STATE_SEVERITY[state],
            instance_id=instance,
            node=node,
            attrs={
                "provider": "aws",
                "code": code,
                "state": state,
                "description": description or None,
                "event_id": event_id,
            },
            raw=raw,
            line=line,
        )
