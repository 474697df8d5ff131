"""What people paste from a terminal: `kubectl describe pod`, `kubectl get events|pods` tables,
and the logs of the controllers that take nodes away (aws-node-termination-handler,
cluster-autoscaler, Karpenter).

These are human formats: times are relative ("35m", "2m (x4 over 6m)") and the pod's uid is not
shown. Relative times are taken back from `--at` (or the file's modification time); a pod
without a uid gets a stable stand-in made from its namespace and name, so the same paste read
twice stores nothing new. The records are the same kinds the JSON parsers make, so the same
rules read them.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

import orjson

from whyjob.collector.ingest import gce
from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Severity
from whyjob.core.experiments import recognise
from whyjob.core.standins import standin_uid
from whyjob.core.timeutil import parse_ts

__all__ = [
    "looks_like_controller_log",
    "looks_like_describe_fragment",
    "looks_like_describe_node",
    "looks_like_describe_pod",
    "looks_like_event_row",
    "looks_like_events_table",
    "looks_like_gcloud_operations_table",
    "looks_like_nodes_table",
    "looks_like_old_events_header",
    "looks_like_pods_table",
    "namespace_hint",
    "parse_controller_log",
    "parse_describe_fragment",
    "parse_describe_node",
    "parse_describe_pod",
    "parse_event_rows",
    "parse_events_table",
    "parse_gcloud_operations_table",
    "parse_nodes_table",
    "parse_old_event_rows",
    "parse_pods_table",
    "relative_ms",
]

Lines = Iterable[tuple[int, str]]

_KEY: Final = re.compile(r"^(?P<indent> *)(?P<key>[A-Z][\w .-]*?):\s*(?P<value>.*)$")
_AGE_PART: Final = re.compile(r"(\d+)([dhms])")
_AGE_UNITS: Final = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
_EVENTS_HEADER: Final = re.compile(r"^\s*Type\s+Reason\s+Age\s+From\s+Message\s*$")
_TABLE_EVENTS: Final = re.compile(
    r"^(NAMESPACE\s+)?LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+(SUBOBJECT\s+)?(SOURCE\s+)?MESSAGE"
)
_TABLE_PODS: Final = re.compile(r"^(NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE")
# `kubectl get nodes`; clients before 1.8 printed no ROLES column.
_TABLE_NODES: Final = re.compile(r"^NAME\s+STATUS\s+(?:ROLES\s+)?AGE\s+VERSION")
_WAITING: Final = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
_TERMINATED: Final = frozenset(
    {
        "OOMKilled",
        "Error",
        "Completed",
        "ContainerStatusUnknown",
        "StartError",
        "ContainerCannotRun",
        "DeadlineExceeded",
    }
)


def namespace_hint(ctx: Context) -> str:
    """The namespace a paste's `kubectl ... -n NAMESPACE` named, for tables that omit it."""
    hint = ctx.memory.get("namespace")
    return hint if isinstance(hint, str) else "default"


def relative_ms(age: str) -> int | None:
    """'35m', '5m33s', '2d4h' as milliseconds; None for '<unknown>' and anything else."""
    parts = _AGE_PART.findall(age.strip())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != age.strip():
        return None
    return sum(int(n) * _AGE_UNITS[u] for n, u in parts)


def _now(ctx: Context) -> int:
    return ctx.options.at or ctx.mtime_ms or int(time.time() * 1000)


def _ts(value: str | None) -> int | None:
    if not value or value in ("<none>", "<unknown>") or " 0001 " in value:
        return None  # Go's zero time ("Mon, 01 Jan 0001 ...") means never
    try:
        return parse_ts(value)
    except ValueError:
        return None


# -- kubectl describe pod ----------------------------------------------------------------------


def looks_like_describe_pod(first_lines: list[str]) -> bool:
    head = "\n".join(first_lines[:6])
    return bool(
        re.search(r"^Name:\s+\S+", head, re.M) and re.search(r"^Namespace:\s+\S+", head, re.M)
    )


def _columns(header: str, names: list[str]) -> list[int]:
    return [header.index(name) for name in names]


def _split(line: str, starts: list[int]) -> list[str]:
    cells = []
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(line)
        cells.append(line[start:end].strip())
    return cells


def parse_describe_pod(ctx: Context, lines: Lines) -> Iterator[Item]:
    """One `kubectl describe pod` block (or several, one after the other)."""
    block: list[tuple[int, str]] = []
    for number, text in lines:
        if text.startswith("Name:") and block and any(t.startswith("Namespace:") for _, t in block):
            yield from _describe_block(ctx, block)
            block = []
        block.append((number, text))
    if block:
        yield from _describe_block(ctx, block)


def _describe_block(ctx: Context, block: list[tuple[int, str]]) -> Iterator[Item]:
    top: dict[str, str] = {}
    labels: dict[str, str] = {}
    containers: dict[str, dict[str, dict[str, str]]] = {}
    conditions: dict[str, str] = {}
    events: list[tuple[int, list[str]]] = []
    section = container = state = None
    event_columns: list[int] | None = None
    first = block[0][0]
    for number, text in block:
        if not text.strip():
            continue
        match = _KEY.match(text)
        indent = len(text) - len(text.lstrip())
        if indent == 0 and match:
            key, value = match.group("key"), match.group("value").strip()
            section, container, state = key, None, None
            top.setdefault(key, value)
            if key == "Labels" and "=" in value:
                name, _, label = value.partition("=")
                labels[name] = label
            continue
        if section == "Labels" and indent > 0 and "=" in text:
            name, _, label = text.strip().partition("=")
            labels[name] = label
        elif section in ("Containers", "Init Containers"):
            if indent == 2 and text.rstrip().endswith(":"):
                container = text.strip()[:-1]
                containers[container] = {
                    "": {"init": "true" if section == "Init Containers" else ""}
                }
                state = None
            elif container and match and indent == 4:
                key, value = match.group("key"), match.group("value").strip()
                if key in ("State", "Last State"):
                    state = key
                    containers[container][key] = {"state": value}
                else:
                    containers[container][""][key] = value
                    state = None
            elif container and match and indent >= 6 and state:
                containers[container][state][match.group("key")] = match.group("value").strip()
        elif section == "Conditions" and indent > 0:
            cells = text.split()
            if len(cells) >= 2 and cells[0] != "Type":
                conditions[cells[0]] = cells[1]
        elif section == "Events":
            if _EVENTS_HEADER.match(text):
                header = text
                event_columns = _columns(header, ["Type", "Reason", "Age", "From", "Message"])
            elif event_columns and not set(text.strip()) <= {"-", " "}:
                events.append((number, _split(text, event_columns)))
    name, namespace = top.get("Name"), top.get("Namespace")
    if not name or not namespace:
        yield Rejected(first, "kubectl describe output without Name and Namespace")
        return
    now = _now(ctx)
    uid = standin_uid(namespace, name, ctx.options.cluster)
    node = (top.get("Node") or "").split("/")[0] or None
    if node == "<none>":
        node = None
    controller = (top.get("Controlled By") or "").split("/")[0] or None  # "PyTorchJob/NAME"
    member = recognise(name, labels, None, ctx.options.launchers, controller)
    yield PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        seen=now,
        experiment=member.experiment if member else None,
        launcher=member.launcher if member else None,
        label=member.label if member else None,
        rank=member.rank if member else None,
        node=node,
        created=_ts(top.get("Start Time")),
        phase=top.get("Status"),
        labels=labels,
    )
    common: dict[str, Any] = {"namespace": namespace, "pod": name, "pod_uid": uid, "node": node}
    fields: dict[str, Any] = {"source": "kubectl.describe", "line": first}
    if top.get("Reason"):
        reason = top["Reason"]
        yield ctx.evidence(
            native_id=uid, version=f"status/{reason}", ts=now, kind="pod.status",
            message=f"Pod {reason}: {top.get('Message', '')}".strip(), severity=Severity.WARNING,
            attrs={"reason": reason, "message": top.get("Message"), "phase": top.get("Status")}, **fields, **common,
        )  # fmt: skip
    # describe shows no condition or waiting messages; its events say what they would have.
    said: dict[str, str] = {}
    for _, (kind, reason, _age, _source, message) in events:
        if kind == "Warning" and len(message) > len(said.get(reason, "")):
            said[reason] = message  # the most telling: "Failed to pull image ...", not "Error: ..."
    if conditions.get("PodScheduled") == "False":
        yield ctx.evidence(
            native_id=uid, version="unschedulable", ts=now, kind="pod.unschedulable",
            message="PodScheduled: False", severity=Severity.WARNING,
            attrs={"condition": "PodScheduled", "reason": "Unschedulable", "message": said.get("FailedScheduling")},
            **fields, **common,
        )  # fmt: skip
    if conditions.get("DisruptionTarget") == "True":
        yield ctx.evidence(
            native_id=uid, version="disruption", ts=now, kind="pod.disruption",
            message="DisruptionTarget: True", severity=Severity.WARNING,
            attrs={"condition": "DisruptionTarget", "reason": None}, **fields, **common,
        )  # fmt: skip
    for cname, parts in containers.items():
        for which in ("State", "Last State"):
            if which in parts and "Message" not in parts[which] and "Failed" in said:
                parts[which]["Message"] = said["Failed"]
        yield from _describe_container(ctx, cname, parts, now, common, first)
    for number, (kind, reason, age, source, message) in events:
        yield _event(
            ctx, now, number, namespace, "Pod", name, uid, node, kind, reason, age, source, message
        )


def _describe_container(
    ctx: Context,
    name: str,
    parts: dict[str, dict[str, str]],
    now: int,
    common: dict[str, Any],
    line: int,
) -> Iterator[Item]:
    info = parts.get("", {})
    try:
        restarts = int(info.get("Restart Count", "0"))
    except ValueError:
        restarts = 0
    fields = {**common, "container": name}
    for which in ("Last State", "State"):
        state = parts.get(which)
        if not state:
            continue
        kind = state.get("state", "")
        if kind.startswith("Terminated"):
            restart = (
                restarts
                if which == "State" or "Waiting" in parts.get("State", {}).get("state", "")
                else max(restarts - 1, 0)
            )
            try:
                exit_code: int | None = int(state.get("Exit Code", ""))
            except ValueError:
                exit_code = None
            finished = _ts(state.get("Finished")) or now
            yield ctx.evidence(
                source="kubectl.describe", native_id=f"{common['pod_uid']}/{name}/{restart}", version="terminated",
                ts=finished, kind="container.terminated",
                message=f"Container {name} terminated: {state.get('Reason', '?')}, exit code {exit_code}",
                severity=Severity.INFO if exit_code == 0 else Severity.ERROR,
                attrs={"exit_code": exit_code, "reason": state.get("Reason"), "restart": restart, "started_at": _ts(state.get("Started")), "finished_at": finished, "termination_message": state.get("Message")},
                line=line, **fields,
            )  # fmt: skip
        elif kind.startswith("Waiting") and state.get("Reason") not in (
            None,
            "ContainerCreating",
            "PodInitializing",
        ):
            yield ctx.evidence(
                source="kubectl.describe", native_id=f"{common['pod_uid']}/{name}", version=f"waiting/{state.get('Reason')}/{restarts}",
                ts=now, kind="container.waiting", message=f"Container {name} waiting: {state.get('Reason')}",
                severity=Severity.WARNING, attrs={"reason": state.get("Reason"), "message": state.get("Message"), "restart": restarts},
                line=line, **fields,
            )  # fmt: skip
        elif kind.startswith("Running") and which == "State":
            yield ctx.evidence(
                source="kubectl.describe", native_id=f"{common['pod_uid']}/{name}/{restarts}", version="running",
                ts=_ts(state.get("Started")) or now, kind="container.running", message=f"Container {name} running (restart {restarts})",
                severity=Severity.DEBUG, attrs={"restart": restarts}, line=line, **fields,
            )  # fmt: skip


def _event(
    ctx: Context,
    now: int,
    line: int,
    namespace: str | None,
    object_kind: str,
    name: str | None,
    uid: str | None,
    node: str | None,
    event_type: str,
    reason: str,
    age: str,
    source: str,
    message: str,
) -> Item:
    """One event row, with its time taken back from its age ("2m (x4 over 6m)": 2m ago)."""
    ago = relative_ms(age.split(" ")[0]) if age else None
    count_match = re.search(r"\(x(\d+) over", age)
    fields: dict[str, Any] = {"namespace": namespace}
    if object_kind == "Pod":
        fields.update(pod=name, pod_uid=uid, node=node)
    elif object_kind == "Node":
        fields.update(node=name, namespace=None)
    return ctx.evidence(
        source="kubectl.events",
        native_id=f"{namespace}/{object_kind}/{name}/{reason}",
        version=f"{message}/{count_match.group(1) if count_match else 1}",
        ts=now - (ago or 0),
        kind="k8s.event",
        message=f"{reason}: {message}" if message else reason,
        severity=Severity.WARNING if event_type == "Warning" else Severity.INFO,
        attrs={
            "reason": reason,
            "type": event_type,
            "object_kind": object_kind,
            "object_name": name,
            "count": int(count_match.group(1)) if count_match else 1,
            "component": source.split(",")[0] or None,
            "age": age,
        },
        line=line,
        **fields,
    )


# -- what `kubectl describe pod ... | grep` keeps -----------------------------------------------

_FRAGMENT_KEYS: Final = frozenset(
    {
        "Node",
        "State",
        "Last State",
        "Reason",
        "Exit Code",
        "Started",
        "Finished",
        "Restart Count",
        "Status",
        "Message",
    }
)


def looks_like_describe_fragment(line: str) -> bool:
    match = _KEY.match(line)
    return bool(match and match.group("key") in _FRAGMENT_KEYS)


_PHASES: Final = frozenset({"Failed", "Succeeded", "Pending", "Running", "Unknown"})


def parse_describe_fragment(ctx: Context, lines: Lines, pod: tuple[str, str]) -> Iterator[Item]:
    """Lines a filter or a hand kept from `kubectl describe pod`, with no Name line. Each
    `State:` or `Last State:` starts a block of its own (Reason, Exit Code, Started, Finished,
    Message): a termination or a waiting reason. Keys before any state are the pod's own
    Status / Reason / Message (an eviction, a node shutdown), or a termination grep cut."""
    namespace, name = pod
    blocks: list[tuple[int, dict[str, str]]] = []
    top: dict[str, str] = {}
    first: int | None = None
    for number, text in lines:
        match = _KEY.match(text)
        if not match:
            continue
        key, value = match.group("key"), match.group("value").strip()
        first = first or number
        if key in ("State", "Last State"):
            blocks.append((number, {"State": value, "which": key}))
        elif blocks and key not in ("Node", "Status", "Restart Count"):
            blocks[-1][1].setdefault(key, value)
        else:
            top.setdefault(key, value)
    uid = standin_uid(namespace, name, ctx.options.cluster)
    node = (top.get("Node") or "").split("/")[0] or None
    common: dict[str, Any] = {"namespace": namespace, "pod": name, "pod_uid": uid, "node": node}
    if not blocks and "Exit Code" in top:
        blocks.append((first or 0, {**top, "State": "Terminated", "which": "State"}))
    for number, block in blocks:
        yield from _fragment_state(ctx, number, block, common)
    reason = top.get("Reason")
    if reason and (top.get("Status") in _PHASES or not blocks):
        message = top.get("Message")
        yield ctx.evidence(
            source="kubectl.describe", native_id=uid, version=f"status/{reason}", ts=_now(ctx),
            kind="pod.status", message=f"Pod {reason}: {message or ''}".strip(),
            severity=Severity.WARNING, line=first,
            attrs={"reason": reason, "message": message, "phase": top.get("Status")}, **common,
        )  # fmt: skip


def _fragment_state(
    ctx: Context, number: int, block: dict[str, str], common: dict[str, Any]
) -> Iterator[Item]:
    reason = block.get("Reason")
    state = block.get("State", "")
    try:
        exit_code: int | None = int(block.get("Exit Code", ""))
    except ValueError:
        exit_code = None
    uid = common["pod_uid"]
    if state.startswith("Terminated") or exit_code is not None:
        finished = _ts(block.get("Finished")) or _now(ctx)
        yield ctx.evidence(
            source="kubectl.describe", native_id=f"{uid}/fragment/{block['which']}", version="terminated",
            ts=finished, kind="container.terminated", line=number,
            message=f"Container terminated: {reason or '?'}, exit code {exit_code}"
            + (f": {block['Message']}" if block.get("Message") else ""),
            severity=Severity.INFO if exit_code == 0 and reason in (None, "Completed") else Severity.ERROR,
            attrs={"exit_code": exit_code, "reason": reason, "started_at": _ts(block.get("Started")), "finished_at": finished, "termination_message": block.get("Message")},
            **common,
        )  # fmt: skip
    elif state.startswith("Waiting") and reason:
        yield ctx.evidence(
            source="kubectl.describe", native_id=f"{uid}/fragment", version=f"waiting/{reason}",
            ts=_now(ctx), kind="container.waiting", message=f"Container waiting: {reason}",
            severity=Severity.WARNING, attrs={"reason": reason, "message": block.get("Message")},
            line=number, **common,
        )  # fmt: skip


# -- kubectl describe node (whole, or the part a `sed`/`grep` kept) ------------------------------

_NODE_CONDITION_ROW: Final = re.compile(
    r"^\s+(?P<type>[A-Z]\w+)\s+(?P<status>True|False|Unknown)\s+(?P<heartbeat>\S.*?\d{4}(?: [+-]\d{4}| \w+)?)\s{2,}(?P<transition>\S.*?\d{4}(?: [+-]\d{4}| \w+)?)\s{2,}(?P<reason>\S+)\s+(?P<message>.*)$"
)
_TAINT: Final = re.compile(
    r"^(?:Taints:)?\s+(?P<key>[\w./-]+)(?:=(?P<value>[^:\s]*))?:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute)\s*$"
)


def looks_like_describe_node(first_lines: list[str]) -> bool:
    """`kubectl describe node`: its Taints or Conditions section (with or without the rest)."""
    head = first_lines[0] if first_lines else ""
    return head.startswith("Taints:") or (
        head.startswith("Conditions:")
        and any(_NODE_CONDITION_ROW.match(line) for line in first_lines[1:5])
    )


def parse_describe_node(ctx: Context, lines: Lines, node: str | None) -> Iterator[Item]:
    """Taints, conditions and events of the node `node` (from a `Name:` line, else the
    command line)."""
    now = _now(ctx)
    in_events = False
    for number, text in lines:
        if text.startswith("Name:") and not node:
            node = text.split(":", 1)[1].strip() or None
        # A Conditions table pasted on its own is about the node the paste is about.
        node = node or ctx.node_hint
        if node is None:
            continue
        if not text[:1].isspace() and text.strip():
            in_events = text.startswith("Events:")
        if in_events:
            if row := _DESCRIBE_EVENT_ROW.match(text):
                yield _event(ctx, now, number, None, "Node", node, None, None, row["type"],
                             row["reason"], row["age"], row["source"], row["message"])  # fmt: skip
            continue
        if taint := _TAINT.match(text):
            key, effect = taint["key"], taint["effect"]
            yield ctx.evidence(
                source="kubectl.describe", native_id=node, version=f"taint/{key}/{effect}", ts=now,
                kind="node.taint", message=f"Node tainted {key}:{effect}", severity=Severity.NOTICE,
                node=node, attrs={"key": key, "value": taint["value"], "effect": effect}, line=number,
            )  # fmt: skip
        elif row := _NODE_CONDITION_ROW.match(text):
            kind, status = row["type"], row["status"]
            healthy = status == ("True" if kind == "Ready" else "False")  # Unknown is not
            if healthy and kind != "Ready":
                continue  # a problem that is not there ("Filesystem is not read-only")
            yield ctx.evidence(
                source="kubectl.describe", native_id=node, version=f"condition/{kind}/{status}",
                ts=_ts(row["transition"]) or now, kind="node.condition",
                message=f"Node condition {kind}={status} ({row['reason']}): {row['message']}",
                severity=Severity.INFO if healthy else Severity.WARNING, node=node,
                attrs={"condition": kind, "status": status, "reason": row["reason"], "message": row["message"]},
                line=number,
            )  # fmt: skip


# -- kubectl get events / pods tables --------------------------------------------------------


# Event rows cut from their header (`| grep`, `| tail`, an `Events:` block pasted alone):
# describe's "Type Reason Age From Message" and the table's "LAST SEEN TYPE REASON OBJECT MESSAGE".
_DESCRIBE_EVENT_ROW: Final = re.compile(
    r"^\s*(?P<type>Normal|Warning)\s+(?P<reason>[A-Z]\w+)\s+(?P<age>[\w<>]+(?: \(x\d+ over \w+\))?)\s{2,}(?P<source>\S+(?:, \S+)?)\s{2,}(?P<message>\S.*)$"
)
# A `get events` row keeps its shape when a paste squeezed its columns to single spaces.
_TABLE_EVENT_ROW: Final = re.compile(
    r"^(?:(?P<namespace>[a-z0-9][-a-z0-9]*)\s+)?(?P<age>[\w<>]+(?: \(x\d+ over \w+\))?)\s+(?P<type>Normal|Warning)\s+(?P<reason>[A-Z]\w+)\s+(?P<object>[A-Za-z]+/\S+)\s+(?P<message>\S.*)$"
)


# Events as kubectl printed them before 1.7 (describe and get): FirstSeen, LastSeen, Count,
# From ({component host}), an optional SubobjectPath, an optional Type, Reason, Message,
# separated by tabs or runs of spaces, the empty SubobjectPath leaving only separators.
_OLD_EVENTS_HEADER: Final = re.compile(
    r"^\s*FirstSeen\s+LastSeen\s+Count\s+From\s+(?:SubobjectPath\s+)?(?:Type\s+)?Reason\s+Message"
)
_SEP = r"(?:\t+\s*|\s{2,})"
_OLD_EVENT_ROW: Final = re.compile(
    rf"^\s*(?P<first>\S.*?){_SEP}(?P<last>\S.*?){_SEP}(?P<count>\d+){_SEP}(?P<source>\{{[^}}]*\}})"
    rf"(?:{_SEP}(?P<sub>(?!Normal\b|Warning\b)\S[^\t]*?))??{_SEP}(?:(?P<type>Normal|Warning){_SEP})?"
    rf"(?P<reason>[A-Za-z]\w*){_SEP}(?P<message>\S.*)$"
)


def looks_like_old_events_header(line: str) -> bool:
    return bool(_OLD_EVENTS_HEADER.match(line))


def parse_old_event_rows(ctx: Context, lines: Lines, pod: tuple[str, str]) -> Iterator[Item]:
    """Rows under an old events header, about `pod` (namespace, name) unless a row's source
    names a node event."""
    now = _now(ctx)
    namespace, name = pod
    for number, text in lines:
        row = _OLD_EVENT_ROW.match(text)
        if row is None or set(text.strip()) <= set("-\t "):
            continue
        source = row["source"].strip("{} ")
        event_type = row["type"] or ("Warning" if row["reason"][:1].islower() else "Normal")
        yield _event(ctx, now, number, namespace, "Pod", name, standin_uid(namespace, name, ctx.options.cluster), None,
                     event_type, row["reason"], row["first"].strip(), source, row["message"])  # fmt: skip


def looks_like_event_row(line: str) -> bool:
    return bool(_DESCRIBE_EVENT_ROW.match(line) or _TABLE_EVENT_ROW.match(line))


def parse_event_rows(
    ctx: Context, lines: Lines, pod: tuple[str, str] | None, node: str | None = None
) -> Iterator[Item]:
    """Event rows without their header; describe-style rows are about `pod` (namespace, name),
    the one the paste's command named, when the rows do not say."""
    now = _now(ctx)
    for number, text in lines:
        if match := _TABLE_EVENT_ROW.match(text):
            object_kind, _, name = match["object"].partition("/")
            object_kind = {"pod": "Pod", "node": "Node"}.get(
                object_kind.lower(), object_kind.title()
            )
            namespace = match["namespace"] or namespace_hint(ctx)
            uid = (
                standin_uid(namespace, name, ctx.options.cluster) if object_kind == "Pod" else None
            )
            yield _event(ctx, now, number, namespace, object_kind, name, uid, None,
                         match["type"], match["reason"], match["age"], "", match["message"])  # fmt: skip
        elif match := _DESCRIBE_EVENT_ROW.match(text):
            namespace, name = pod or (namespace_hint(ctx), None)
            uid = standin_uid(namespace, name, ctx.options.cluster) if name else None
            yield _event(ctx, now, number, namespace, "Pod", name, uid, node, match["type"],
                         match["reason"], match["age"], match["source"], match["message"])  # fmt: skip


def looks_like_events_table(first_lines: list[str]) -> bool:
    return bool(first_lines) and bool(_TABLE_EVENTS.match(first_lines[0]))


def looks_like_nodes_table(first_lines: list[str]) -> bool:
    return bool(first_lines) and bool(_TABLE_NODES.match(first_lines[0]))


def parse_nodes_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`kubectl get nodes`: a node NotReady or cordoned (SchedulingDisabled) when it was run."""
    now = _now(ctx)
    for number, row in _table(lines, _TABLE_NODES):
        name, status = row.get("NAME", ""), row.get("STATUS", "").split(",")
        if not name:
            continue
        if {"NotReady", "Unknown", "NodeLost"} & set(status):
            yield ctx.evidence(
                source="kubectl.nodes", native_id=name, version="NotReady", ts=now,
                kind="node.condition", message=f"Node {name} NotReady (kubectl get nodes)",
                severity=Severity.WARNING, node=name, line=number,
                attrs={"condition": "Ready", "status": "Unknown", "reason": "NotReady", "message": None},
            )  # fmt: skip
        if "SchedulingDisabled" in status:
            yield ctx.evidence(
                source="kubectl.nodes", native_id=name, version="cordoned", ts=now,
                kind="node.taint", message=f"Node {name} cordoned (SchedulingDisabled)",
                severity=Severity.NOTICE, node=name, line=number,
                attrs={"key": "node.kubernetes.io/unschedulable", "value": None, "effect": "NoSchedule"},
            )  # fmt: skip


_TABLE_GCLOUD_OPERATIONS: Final = re.compile(
    r"^NAME\s+TYPE\s+TARGET\s+HTTP_STATUS\s+STATUS\s+TIMESTAMP"
)


def looks_like_gcloud_operations_table(first_lines: list[str]) -> bool:
    return bool(first_lines) and bool(_TABLE_GCLOUD_OPERATIONS.match(first_lines[0]))


def parse_gcloud_operations_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`gcloud compute operations list` as a table: each row as the operation it lists."""
    for number, row in _table(lines, _TABLE_GCLOUD_OPERATIONS):
        operation = {
            "name": row.get("NAME"),
            "operationType": row.get("TYPE"),
            "targetLink": row.get("TARGET"),
            "status": row.get("STATUS"),
            "insertTime": row.get("TIMESTAMP"),
        }
        yield from gce.parse_operations(ctx, operation, number)


def looks_like_pods_table(first_lines: list[str]) -> bool:
    return bool(first_lines) and bool(_TABLE_PODS.match(first_lines[0]))


def _table(lines: Lines, header_pattern: re.Pattern[str]) -> Iterator[tuple[int, dict[str, str]]]:
    columns: list[tuple[str, int]] = []
    for number, text in lines:
        if header_pattern.match(text):
            names = re.findall(r"\S+(?: \S+)?", text)
            positions = [text.index(n) for n in names]
            columns = list(zip(names, positions, strict=True))
            continue
        if not columns or not text.strip():
            continue
        # Cells are split on runs of two or more spaces when that gives one per column (a hand
        # edited or re-wrapped table drifts off the header's positions); else by position.
        cells = re.split(r"\s{2,}", text.strip(), maxsplit=len(columns) - 1)
        if len(cells) != len(columns):
            cells = _split(text, [p for _, p in columns])
        yield number, dict(zip([n for n, _ in columns], cells, strict=True))


def parse_events_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`kubectl get events [-A]` as a table: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE."""
    now = _now(ctx)
    for number, row in _table(lines, _TABLE_EVENTS):
        kind_name = row.get("OBJECT", "")
        object_kind, _, name = kind_name.partition("/")
        object_kind = {"pod": "Pod", "node": "Node"}.get(object_kind.lower(), object_kind.title())
        namespace = row.get("NAMESPACE") or namespace_hint(ctx)
        uid = standin_uid(namespace, name, ctx.options.cluster) if object_kind == "Pod" else None
        if not row.get("REASON"):
            yield Rejected(number, "an events table row without a REASON")
            continue
        yield _event(
            ctx,
            now,
            number,
            namespace,
            object_kind,
            name or None,
            uid,
            None,
            row.get("TYPE", ""),
            row["REASON"],
            row.get("LAST SEEN", ""),
            row.get("SOURCE", ""),
            row.get("MESSAGE", ""),
        )


# A STATUS that is the pod's own status reason. kubectl prints Unknown for a pod being deleted
# whose reason is NodeLost (its node stopped reporting; printers.go), and for the Unknown phase.
_STATUS_REASONS: Final = {"Evicted": "Evicted", "NodeLost": "NodeLost", "Unknown": "NodeLost"}


def parse_pods_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`kubectl get pods [-A]` as a table: each pod's STATUS as a termination or waiting fact."""
    now = _now(ctx)
    for number, row in _table(lines, _TABLE_PODS):
        name, status = row.get("NAME", ""), row.get("STATUS", "")
        namespace = row.get("NAMESPACE") or namespace_hint(ctx)
        if not name:
            continue
        uid = standin_uid(namespace, name, ctx.options.cluster)
        restarts = int(re.match(r"\d*", row.get("RESTARTS", "0")).group() or 0)  # type: ignore[union-attr]
        node = row.get("NODE") if row.get("NODE") not in (None, "", "<none>") else None
        yield PodRecord(uid=uid, namespace=namespace, name=name, seen=now, phase=status, node=node)
        common: dict[str, Any] = {
            "namespace": namespace,
            "pod": name,
            "pod_uid": uid,
            "node": node,
            "source": "kubectl.pods",
            "line": number,
        }
        reason = status.split(":")[-1]
        if reason in _WAITING:
            yield ctx.evidence(
                native_id=uid,
                version=f"waiting/{reason}/{restarts}",
                ts=now,
                kind="container.waiting",
                message=f"Pod {name} {status}",
                severity=Severity.WARNING,
                attrs={"reason": reason, "restart": restarts},
                **common,
            )
        elif reason in _TERMINATED:
            yield ctx.evidence(
                native_id=uid,
                version=f"terminated/{reason}/{restarts}",
                ts=now,
                kind="container.terminated",
                message=f"Pod {name} {status}",
                severity=Severity.INFO if reason == "Completed" else Severity.ERROR,
                attrs={
                    "reason": reason,
                    "exit_code": 0 if reason == "Completed" else None,
                    "restart": restarts,
                },
                **common,
            )
        elif reason == "Terminating":
            yield ctx.evidence(
                native_id=uid,
                version="deleting",
                ts=now,
                kind="pod.deleting",
                message=f"Pod {name} Terminating",
                severity=Severity.NOTICE,
                attrs={"grace_seconds": None},
                **common,
            )
        elif reason in _STATUS_REASONS:
            said = _STATUS_REASONS[reason]
            yield ctx.evidence(
                native_id=uid,
                version=f"status/{said}",
                ts=now,
                kind="pod.status",
                message=f"Pod {name} {status}"
                + (f" ({said}: its node stopped reporting)" if said != reason else ""),
                severity=Severity.WARNING,
                attrs={"reason": said},
                **common,
            )


# -- node termination handler, cluster-autoscaler and Karpenter logs ---------------------------

_NTH = {"via": "aws-node-termination-handler"}
_CONTROLLER_LINES: Final[tuple[tuple[re.Pattern[str], str, dict[str, Any]], ...]] = (
    # aws-node-termination-handler, text or JSON logs
    (
        re.compile(r"SPOT[_-]ITN|Spot ITN received|Spot Interruption notice", re.I),
        "spot.interruption",
        {"provider": "aws", "action": "terminate", **_NTH},
    ),
    (
        re.compile(
            r"REBALANCE_RECOMMENDATION|Rebalance Recommendation|rebalance-recommendation-", re.I
        ),
        "spot.rebalance",
        {"provider": "aws", **_NTH},
    ),
    (
        # Descriptions as the handler writes them: "system-reboot will occur between ... because
        # ...", "AWS Health scheduled change event received. Instance ... will be interrupted".
        re.compile(
            r"SCHEDULED_EVENT|Scheduled Event|Scheduled Maintenance|AWS Health scheduled change"
            r"|aws-health-scheduled-change-event-|event-id=instance-event-[0-9a-f]"
            r"|\b(?:system|instance)-(?:reboot|stop|retirement|maintenance) will occur between",
            re.I,
        ),
        "maintenance.scheduled",
        {"provider": "aws", "state": "active", **_NTH},
    ),
    (
        # "AST target lifecycle state received" (sic) is the instance-metadata monitor's. Before
        # v1.18 every queue event had kind SQS_TERMINATE and only the event id's prefix told
        # them apart; launch events share the `asg-lifecycle-term-` prefix.
        re.compile(
            r"^(?!.*(?:ASG_LAUNCH_LIFECYCLE|Lifecycle Launch))"
            r".*(?:ASG_LIFECYCLE|EC2_INSTANCE_TERMINATING|ASG Lifecycle Termination"
            r"|AST target lifecycle state|target-lifecycle-state-terminated|asg-lifecycle-term-)",
            re.I,
        ),
        "asg.activity",
        {"action": "terminate", "trigger": "scale_in", **_NTH},
    ),
    # A drain (the termination handler's, Karpenter's, kubectl drain's) goes through the
    # eviction API; the drain library prints `evicting pod NAMESPACE/NAME`.
    (
        re.compile(r"\bEvicting pod\b(?!.*, because of)", re.I),  # Volcano deletes, "because of"
        "pod.disruption",
        {"reason": "EvictionByEvictionAPI", "condition": "DisruptionTarget"},
    ),
    # cluster-autoscaler
    (
        re.compile(
            r"Scale-down: removing (?:empty )?node|ScaleDown: node .* removed|Successfully added ToBeDeletedTaint"
        ),
        "k8s.event",
        {"reason": "ScaleDown", "object_kind": "Node", "via": "cluster-autoscaler"},
    ),
    # Karpenter
    (
        re.compile(r"spot_interrupted|SpotInterrupt(?:ed|ionKind)|spot interruption", re.I),
        "spot.interruption",
        {"provider": "aws", "action": "terminate", "via": "karpenter"},
    ),
    (
        re.compile(r"\bscheduled_change\b|ScheduledChangeKind"),
        "maintenance.scheduled",
        {"provider": "aws", "state": "active", "via": "karpenter"},
    ),
    (
        re.compile(r"\brebalance_recommendation\b|RebalanceRecommendationKind"),
        "spot.rebalance",
        {"provider": "aws", "via": "karpenter"},
    ),
    (
        re.compile(r"disrupting node|disrupting nodeclaim|DisruptionTerminating", re.I),
        "k8s.event",
        {"reason": "DisruptionTerminating", "object_kind": "Node", "via": "karpenter"},
    ),
    (
        re.compile(r"^tainted node\b"),
        "node.taint",
        {"key": "karpenter.sh/disrupted", "effect": "NoSchedule", "via": "karpenter"},
    ),
    (
        re.compile(r"^deleted node\b"),
        "k8s.event",
        {"reason": "DeletingNode", "object_kind": "Node", "via": "karpenter"},
    ),
)
_CONTROLLER_HINT: Final = re.compile(
    r"Node successfully cordoned|Requesting instance drain|Adding new event to the event store"
    r"|\bevicting pod [a-z0-9][-a-z0-9]*/|aws-node-termination-handler|node-termination-handler|scale_down\.go|cluster-autoscaler|karpenter|SPOT_ITN|SCHEDULED_EVENT|ASG Lifecycle|SQS_TERMINATE|Scale-down:|nodeclaim|\"controller\":\"(?:disruption|node\.termination|interruption)",
    re.IGNORECASE,
)
_NODE_NAME: Final = re.compile(
    r"(?:(?i:node[-_ ]?name)[=\":\s]+|node[= ]|on node |removing (?:empty )?node |nodes? \(\d+ pods?\) )\"?(?P<node>[a-z0-9][-a-z0-9.]*[a-z0-9])"
)
_INSTANCE: Final = re.compile(r"\b(?P<instance>i-[0-9a-f]{8,17})\b")
_POD_NAME: Final = re.compile(
    r"pod[_-]?name[=\":\s]+\"?(?P<pod>[a-z0-9][-a-z0-9.]*[a-z0-9])"
    r"|\b[Ee]victing pod \"?(?P<ns_pod>[a-z0-9][-a-z0-9]*)/(?P<named>[a-z0-9][-a-z0-9.]*[a-z0-9])"
)
_POD_NAMESPACE: Final = re.compile(r"namespace[=\":\s]+\"?(?P<ns>[a-z0-9][-a-z0-9]*)")
_STAMP: Final = re.compile(r"\d{4}[-/]\d\d[-/]\d\dT?[ ]?\d\d:\d\d:\d\d(?:\.\d+)?Z?")


def looks_like_controller_log(first_lines: list[str]) -> bool:
    hits = sum(1 for line in first_lines if _CONTROLLER_HINT.search(line))
    return hits >= max(1, len(first_lines) // 2)


def _structured(text: str) -> tuple[str, dict[str, Any]]:
    """A JSON log line's message and fields (Karpenter, the termination handler in JSON mode);
    a text line as it is."""
    if text.lstrip().startswith("{"):
        try:
            fields = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text, {}
        if isinstance(fields, dict):
            message = fields.get("message") or fields.get("msg") or ""
            return str(message), fields
    return text, {}


# zerolog's console lines (the termination handler's text logs): time, level, message, then
# key=value fields, a value quoted when it has spaces and an object as compact JSON.
_CONSOLE: Final = re.compile(
    r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (?:DBG|INF|WRN|ERR|FTL|PNC) (?P<message>.*?)(?= [\w-]+=|$)"
)
_CONSOLE_FIELD: Final = re.compile(r' (?P<key>[\w-]+)=(?P<value>"(?:[^"\\]|\\.)*"|\S+)')
_DECODER: Final = json.JSONDecoder()


def _console_summary(text: str) -> str | None:
    """A console line as its message and the kind or description its fields name (`kind=`,
    `reason="..."`, the `event={...}` the handler stores), or None when it is not one."""
    line = _CONSOLE.match(text)
    if line is None:
        return None
    fields: dict[str, Any] = {}
    for field in _CONSOLE_FIELD.finditer(text, line.end()):
        key, value = field.group("key"), field.group("value")
        try:
            fields[key] = _DECODER.raw_decode(value)[0] if value[0] in '"{[' else value
        except ValueError:
            fields[key] = value
    if (start := text.find(" event={", line.end())) >= 0:
        with contextlib.suppress(ValueError):
            fields["event"] = _DECODER.raw_decode(text, start + len(" event="))[0]
    said = _kinds_of(fields)
    return f"{line.group('message')} ({said})" if said else line.group("message")


def _line_time(text: str, fields: dict[str, Any]) -> int | None:
    stamp_text = fields.get("time") or fields.get("ts")
    if not isinstance(stamp_text, str):
        stamp = _STAMP.search(text)
        if stamp is None:
            return None
        stamp_text = stamp.group().replace("/", "-").replace(" ", "T")
    return _ts(stamp_text if stamp_text.endswith("Z") or "+" in stamp_text else stamp_text + "Z")


def _kinds_of(fields: dict[str, Any]) -> str:
    """The fields a structured line names its event's kind in: Karpenter's `messageKind`, the
    termination handler's `Kind` (nested in `event` in its JSON logs), a `reason`."""
    found: list[str] = []
    for holder in (fields, fields.get("event")):
        if isinstance(holder, dict):
            found.extend(
                str(holder[key])
                for key in ("messageKind", "Kind", "kind", "reason", "Description")
                if isinstance(holder.get(key), str)
            )
    return " ".join(" ".join(value.split()) for value in found)  # descriptions end in "\n"


def parse_controller_log(ctx: Context, lines: Lines) -> Iterator[Item]:
    """Lines of the controllers that remove nodes, as notices and events about those nodes;
    other lines of theirs are not evidence and are skipped (a paste keeps them as log lines)."""
    now = _now(ctx)
    for number, text in lines:
        message, fields = _structured(text)
        kinds = _kinds_of(fields)
        said = f"{message} {kinds}" if fields else message
        # A JSON line reads as its message and the kind it names; the whole line stays in `raw`.
        if fields and message:
            shown = f"{message} ({kinds})" if kinds else message
        else:
            shown = _console_summary(text) or text
        for pattern, kind, attrs in _CONTROLLER_LINES:
            if not pattern.search(said):
                continue
            structured_node = fields.get("Node") or fields.get("node")
            if isinstance(structured_node, dict):
                structured_node = structured_node.get("name")
            node = _NODE_NAME.search(text)
            instance = _INSTANCE.search(text)
            where: dict[str, Any] = {
                "node": structured_node
                if isinstance(structured_node, str)
                else (node.group("node") if node else ctx.node_hint),
                "instance_id": instance.group("instance") if instance else None,
            }
            if kind == "pod.disruption":
                pod = _POD_NAME.search(text)
                if pod is None:
                    break
                name = pod.group("pod") or pod.group("named")
                namespace = _POD_NAMESPACE.search(text)
                ns = (
                    pod.group("ns_pod")
                    or (namespace.group("ns") if namespace else None)
                    or namespace_hint(ctx)
                )
                where.update(
                    pod=name, namespace=ns, pod_uid=standin_uid(ns, name, ctx.options.cluster)
                )
                where["node"] = where["node"] if where["node"] != ctx.node_hint else None
            yield ctx.evidence(
                source="controller.log",
                native_id=f"{ctx.origin}",
                version=str(number),
                ts=_line_time(text, fields) or now,
                kind=kind,
                message=shown.strip()[:2000],
                severity=Severity.WARNING,
                attrs={**attrs, "raw_line": number},
                raw=orjson.dumps({"line": text}),
                line=number,
                **where,
            )
            break
