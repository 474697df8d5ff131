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

import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Severity
from whyjob.core.experiments import recognise
from whyjob.core.timeutil import parse_ts

__all__ = [
    "looks_like_controller_log",
    "looks_like_describe_pod",
    "looks_like_events_table",
    "looks_like_pods_table",
    "parse_controller_log",
    "parse_describe_pod",
    "parse_events_table",
    "parse_pods_table",
    "relative_ms",
    "standin_uid",
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


def standin_uid(namespace: str, name: str) -> str:
    """A stable id for a pod shown without its uid (describe output, tables)."""
    return f"pasted:{namespace}/{name}"


def relative_ms(age: str) -> int | None:
    """'35m', '5m33s', '2d4h' as milliseconds; None for '<unknown>' and anything else."""
    parts = _AGE_PART.findall(age.strip())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != age.strip():
        return None
    return sum(int(n) * _AGE_UNITS[u] for n, u in parts)


def _now(ctx: Context) -> int:
    return ctx.options.at or ctx.mtime_ms or int(time.time() * 1000)


def _ts(value: str | None) -> int | None:
    if not value or value in ("<none>", "<unknown>"):
        return None
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
    uid = standin_uid(namespace, name)
    node = (top.get("Node") or "").split("/")[0] or None
    if node == "<none>":
        node = None
    member = recognise(name, labels, None, ctx.options.launchers)
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
    if conditions.get("PodScheduled") == "False":
        yield ctx.evidence(
            native_id=uid, version="unschedulable", ts=now, kind="pod.unschedulable",
            message="PodScheduled: False", severity=Severity.WARNING,
            attrs={"condition": "PodScheduled", "reason": "Unschedulable"}, **fields, **common,
        )  # fmt: skip
    if conditions.get("DisruptionTarget") == "True":
        yield ctx.evidence(
            native_id=uid, version="disruption", ts=now, kind="pod.disruption",
            message="DisruptionTarget: True", severity=Severity.WARNING,
            attrs={"condition": "DisruptionTarget", "reason": None}, **fields, **common,
        )  # fmt: skip
    for cname, parts in containers.items():
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


# -- kubectl get events / pods tables --------------------------------------------------------


def looks_like_events_table(first_lines: list[str]) -> bool:
    return bool(first_lines) and bool(_TABLE_EVENTS.match(first_lines[0]))


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
        cells = _split(text, [p for _, p in columns])
        yield number, dict(zip([n for n, _ in columns], cells, strict=True))


def parse_events_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`kubectl get events [-A]` as a table: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE."""
    now = _now(ctx)
    for number, row in _table(lines, _TABLE_EVENTS):
        kind_name = row.get("OBJECT", "")
        object_kind, _, name = kind_name.partition("/")
        object_kind = {"pod": "Pod", "node": "Node"}.get(object_kind.lower(), object_kind.title())
        namespace = row.get("NAMESPACE") or None
        uid = standin_uid(namespace or "default", name) if object_kind == "Pod" else None
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


def parse_pods_table(ctx: Context, lines: Lines) -> Iterator[Item]:
    """`kubectl get pods [-A]` as a table: each pod's STATUS as a termination or waiting fact."""
    now = _now(ctx)
    for number, row in _table(lines, _TABLE_PODS):
        name, status = row.get("NAME", ""), row.get("STATUS", "")
        namespace = row.get("NAMESPACE") or "default"
        if not name:
            continue
        uid = standin_uid(namespace, name)
        restarts = int(re.match(r"\d*", row.get("RESTARTS", "0")).group() or 0)  # type: ignore[union-attr]
        yield PodRecord(uid=uid, namespace=namespace, name=name, seen=now, phase=status)
        common: dict[str, Any] = {
            "namespace": namespace,
            "pod": name,
            "pod_uid": uid,
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
        elif reason == "Evicted":
            yield ctx.evidence(
                native_id=uid,
                version="status/Evicted",
                ts=now,
                kind="pod.status",
                message=f"Pod {name} Evicted",
                severity=Severity.WARNING,
                attrs={"reason": "Evicted"},
                **common,
            )


# -- node termination handler, cluster-autoscaler and Karpenter logs ---------------------------

_CONTROLLER_LINES: Final = (
    # aws-node-termination-handler, text or JSON logs
    (
        re.compile(r"SPOT_ITN|Spot ITN received|Spot Interruption notice"),
        "spot.interruption",
        {"provider": "aws", "action": "terminate", "via": "aws-node-termination-handler"},
    ),
    (
        re.compile(r"REBALANCE_RECOMMENDATION|Rebalance Recommendation"),
        "spot.rebalance",
        {"provider": "aws", "via": "aws-node-termination-handler"},
    ),
    (
        re.compile(r"SCHEDULED_EVENT|[Ss]cheduled [Ee]vent|scheduled maintenance"),
        "maintenance.scheduled",
        {"provider": "aws", "state": "active", "via": "aws-node-termination-handler"},
    ),
    (
        re.compile(r"ASG_LIFECYCLE|EC2_INSTANCE_TERMINATING|ASG Lifecycle Termination"),
        "asg.activity",
        {"action": "terminate", "trigger": "scale_in", "via": "aws-node-termination-handler"},
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
        re.compile(r"spot_interrupted|SpotInterrupted|spot interruption"),
        "spot.interruption",
        {"provider": "aws", "action": "terminate", "via": "karpenter"},
    ),
    (
        re.compile(r"disrupting node|disrupting nodeclaim|DisruptionTerminating", re.IGNORECASE),
        "k8s.event",
        {"reason": "DisruptionTerminating", "object_kind": "Node", "via": "karpenter"},
    ),
)
_CONTROLLER_HINT: Final = re.compile(
    r"aws-node-termination-handler|node-termination-handler|scale_down\.go|cluster-autoscaler|karpenter|SPOT_ITN|Scale-down:|nodeclaim",
    re.IGNORECASE,
)
_NODE_NAME: Final = re.compile(
    r"(?:(?i:node[-_ ]?name)[=\":\s]+|node[= ]|on node |removing (?:empty )?node )\"?(?P<node>[a-z0-9][-a-z0-9.]*[a-z0-9])"
)
_INSTANCE: Final = re.compile(r"\b(?P<instance>i-[0-9a-f]{8,17})\b")


def looks_like_controller_log(first_lines: list[str]) -> bool:
    hits = sum(1 for line in first_lines if _CONTROLLER_HINT.search(line))
    return hits >= max(1, len(first_lines) // 2)


def parse_controller_log(ctx: Context, lines: Lines) -> Iterator[Item]:
    """Lines of the controllers that remove nodes, as notices and events about those nodes;
    other lines of theirs are not evidence and are skipped."""
    now = _now(ctx)
    for number, text in lines:
        for pattern, kind, attrs in _CONTROLLER_LINES:
            if not pattern.search(text):
                continue
            node = _NODE_NAME.search(text)
            instance = _INSTANCE.search(text)
            stamp = re.search(r"\d{4}[-/]\d\d[-/]\d\dT?[ ]?\d\d:\d\d:\d\d(?:\.\d+)?Z?", text)
            ts = (
                _ts(
                    stamp.group().replace("/", "-").replace(" ", "T")
                    + ("" if stamp.group().endswith("Z") else "Z")
                )
                if stamp
                else None
            )
            yield ctx.evidence(
                source="controller.log",
                native_id=f"{ctx.origin}",
                version=str(number),
                ts=ts or now,
                kind=kind,
                message=text.strip()[:2000],
                severity=Severity.WARNING,
                node=node.group("node") if node else ctx.node_hint,
                instance_id=instance.group("instance") if instance else None,
                attrs={**attrs, "raw_line": number},
                raw=orjson.dumps({"line": text}),
                line=number,
            )
            break
