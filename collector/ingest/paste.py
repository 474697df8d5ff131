"""Whatever a person pastes, split into the parts each reader understands.

`whyjob diagnose` takes text as it comes out of a terminal or a bug report: a pod's JSON or
YAML, `kubectl describe pod`, `kubectl get events|pods` tables, dmesg or journal lines, a
termination handler's or autoscaler's log lines, and the job's own log — often several of
these in one paste, with ANSI colours, timestamps in front and lines wrapped by the terminal.
Structured documents go through the ordinary format readers; text is cut into runs of one
kind each; what is left is the job's log, attached to a stand-in pod.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import pairwise
from typing import Any, Final

import orjson
import yaml

from whyjob.collector.ingest import detect, formats, kernel, kubectl_text, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, PodRef, Rejected
from whyjob.collector.ingest.loglines import clean
from whyjob.collector.ingest.yamlload import load_untrusted
from whyjob.core.evidence import Evidence
from whyjob.core.standins import (
    PASTED_CONTAINER,
    PASTED_NAMESPACE,
    PASTED_NODE,
    PASTED_POD,
    standin_uid,
)

__all__ = ["read_paste"]

# The CRI log prefix, and the RFC 3339 time `kubectl logs --timestamps` puts before each line.
_CRI_PREFIX: Final = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:(?:stdout|stderr) [FP] )?"
)
# The header and rule lines of a describe `Events:` block pasted on its own.
_EVENTS_FURNITURE: Final = re.compile(r"^\s*(?:Type\s+Reason\s+Age|[-\s]+$)")
# Widths terminals and bug trackers wrap at: a line exactly this long was probably cut.
_WRAP_WIDTHS: Final = frozenset({80, 100, 120, 132, 140, 160, 180, 200, 240})
_LINE_START: Final = re.compile(
    r"^(?:\s|\[|\d{4}[-/]\d\d[-/]\d\d|[IWEF]\d{4} |Traceback|During handling|The above exception|[A-Z][\w.]*(?:Error|Exception):|terminate called|\s*what\(\):|NCCL |torch\.|\w+\.\w+:\d+\]|[\w./-]+: (?:[Ee]rror|[Ww]arning|[Ff]atal|ERROR|WARNING|FATAL)\b)"
)
# Years written in the paste's dated lines ("2024-05-21", "Sat, 20 Jul 2024", "Nov 22 ... 2026").
_YEAR: Final = re.compile(
    r"\b(20\d\d)(?=[-/]\d\d[-/]\d\d|\s+\d\d:\d\d|\s*\]|,? \d\d:)|\b\d{1,2} \w{3} (20\d\d)\b"
)


# A row of a kubectl table: a lower-case first cell (a name, an age, a namespace) and the
# two or more spaces kubectl puts between columns; a prompt or another tool's line ends it.
_TABLE_ROW: Final = re.compile(r"^[a-z0-9<][\w./:<>()-]*\s{2,}\S")
# A rule line (IPython's dashes above a traceback, a table's box border, a banner) is drawn to
# a width, not cut: it holds no word at all.
_RULE_LINE: Final = re.compile(r"^\W+$")


def _wrapped(lines: list[tuple[int, str]]) -> frozenset[int]:
    """The lines a terminal probably cut: as long as a common terminal width, or as a width
    three or more long lines of this paste share exactly (two is often a coincidence).
    Measured as pasted, prefixes and all: the terminal cut them so."""
    widths = _wrap_widths(lines)
    return frozenset(n for n, t in lines if len(t) in widths and not _RULE_LINE.match(t))


def _wrap_widths(lines: list[tuple[int, str]]) -> frozenset[int]:
    # Table rows and rule lines are drawn to one width by design: they say nothing of wrapping.
    # Nor does a line the same log's next line follows (a trainer's fixed-format progress
    # rows share widths by chance): it was whole.
    lengths = Counter(
        len(t)
        for (_, t), (_, following) in zip(lines, [*lines[1:], (0, "")], strict=True)
        if len(t) >= 60
        and not _TABLE_ROW.match(t)
        and not _RULE_LINE.match(t)
        and not _same_start(t, following)
    )
    return _WRAP_WIDTHS | {width for width, count in lengths.items() if count >= 3}


def _same_start(previous: str, text: str) -> bool:
    """A line that opens with the previous line's first word (`fuse:`, a logger's name), or is
    indented as deep as it (a usage message's options, a block's aligned rows), is the next
    line of the same output, not the rest of a cut one."""
    head = text.split(" ", 1)[0]
    if head:
        return previous.split(" ", 1)[0] == head
    indent = len(text) - len(text.lstrip(" "))
    return indent > 0 and len(previous) - len(previous.lstrip(" ")) == indent


def _unwrap(lines: list[tuple[int, str]], wrapped: frozenset[int]) -> list[tuple[int, str]]:
    """Join lines a terminal wrapped: a cut line followed by a line that does not look like the
    start of a new one, as often as a long line was cut. A line merely long is left alone."""
    out: list[tuple[int, str]] = []
    last = 0  # the paste line the last record ends with
    for number, text in lines:
        if (
            out
            and last in wrapped
            and not _same_start(out[-1][1], text)
            and text
            and not _LINE_START.match(text)
            and not _TABLE_ROW.match(text)
            and not _PROMPT.match(text)
        ):
            out[-1] = (out[-1][0], out[-1][1] + text)
        else:
            out.append((number, text))
        last = number
    return out


def _is_kernel(text: str) -> bool:
    return kernel.looks_like_kernel_text([text])


def _block_end(lines: list[tuple[int, str]], start: int, *, describe: bool) -> int:
    """Where a describe block or a table that starts at `start` ends (exclusive)."""
    seen_events = False
    for index in range(start + 1, len(lines)):
        text = lines[index][1]
        if describe:
            if _PROMPT.match(text):
                return index  # the next command's output starts
            seen_events = seen_events or text.startswith("Events:")
            if seen_events and not text.strip():
                return index
            if text.startswith("Events:") and "<none>" in text:
                return index + 1
        elif not _TABLE_ROW.match(text):
            return index
    return len(lines)


# What a `kubectl ...` command line in the paste says about the output that follows it.
_KUBECTL: Final = re.compile(r"\bkubectl\b")
_NAMESPACE_FLAG: Final = re.compile(r"(?:^|\s)(?:-n|--namespace)[= ](?P<ns>[a-z0-9][-a-z0-9]*)")
_POD_ARG: Final = re.compile(
    r"\b(?:(?:get|describe)\s+(?:pods?|po)(?:/|\s+)|logs\s+(?:-\S+\s+)*(?:pods?/)?)(?P<pod>[a-z0-9][-a-z0-9.]*[a-z0-9])\b"
)
_NODE_ARG: Final = re.compile(
    r"\b(?:get|describe)\s+(?:nodes?|no)(?:/|\s+)(?P<node>[a-z0-9][-a-z0-9.]*[a-z0-9])\b"
)
_PROMPT: Final = re.compile(r"^\s*(?:\$|#|%|>|❯|\w+@[\w.-]+:\S*[$#])\s")
_YAML_LINE: Final = re.compile(r"^(?:\s|-|[\w./-]+:|---|#)")
# A key of a Kubernetes object or of a part of one (`yq .status`, a jsonpath state, a
# condition list), at the margin or indented where a paste cut it out of a larger document.
_YAML_START: Final = re.compile(
    r"^(?P<indent>\s*)(?:- )?(?:apiVersion|kind|metadata|spec|status|items|conditions|containerStatuses"
    r"|phase|state|lastState|limits|requests|terminated|waiting|exitCode|lastTransitionTime"
    r"|lastProbeTime|lastHeartbeatTime|reason|message|type):(?:\s|$)"
)
_MAX_BLOCK_LINES = 50_000
_NVRM_CONTINUED: Final = re.compile(r"^\s+NVRM: ")
_TEXT_FORMATS: Final = frozenset({f.name for f in formats.TEXT_FORMATS} | {formats.PLAIN_LOG.name})


def _command_hints(text: str, hints: dict[str, str]) -> None:
    if not _KUBECTL.search(text):
        return
    if namespace := _NAMESPACE_FLAG.search(text):
        hints["namespace"] = namespace.group("ns")
    if pod := _POD_ARG.search(text):
        hints["pod"] = pod.group("pod")
    else:
        hints.pop("pod", None)
    if node := _NODE_ARG.search(text):
        hints["node"] = node.group("node")


def _json_block(lines: list[tuple[int, str]], start: int) -> tuple[int, Any] | None:
    """A JSON value written over lines `start`..: (end, value), or None when it is not one."""
    depth = 0
    for index in range(start, min(len(lines), start + _MAX_BLOCK_LINES)):
        text = lines[index][1]
        depth += text.count("{") + text.count("[") - text.count("}") - text.count("]")
        if depth <= 0:
            try:
                value = orjson.loads("\n".join(t for _, t in lines[start : index + 1]))
            except orjson.JSONDecodeError:
                return None
            return index + 1, value
    return None


def _structured_block(
    lines: list[tuple[int, str]], start: int, hints: dict[str, str]
) -> tuple[int, bytes, bool] | None:
    """A JSON or YAML document (or a pod fragment such as `jq .status`) starting at `start`:
    its end, the bytes for the readers and whether it was a fragment made whole; None when
    the line starts ordinary text."""
    text = lines[start][1]
    if text.lstrip()[:1] in ("{", "["):
        found = _json_block(lines, start)
        if found is None:
            return None
        end, value = found
    elif yaml_start := _YAML_START.match(text):
        indent = len(yaml_start.group("indent"))
        end = _yaml_block_end(lines, start, indent)
        if end - start < 2:
            return None
        try:
            value = load_untrusted("\n".join(t[indent:] for _, t in lines[start:end]))
        except yaml.YAMLError:
            return None
    else:
        return None
    document = _as_pod(value, hints)
    return end, orjson.dumps(document or value), document is not None


def _pretty_json(lines: list[tuple[int, str]], start: int) -> tuple[int, str] | None:
    """A JSON object written over several lines (a log record through `jq .`, an audit event,
    an API answer no reader knows): its end and the object on one line."""
    if lines[start][1].strip() not in ("{", "["):
        return None
    found = _json_block(lines, start)
    if found is None or not isinstance(found[1], dict | list):
        return None
    return found[0], orjson.dumps(found[1]).decode()


# The fields a structured (JSON) log line keeps its message in, across logging libraries.
_MESSAGE_KEYS: Final = ("msg", "message", "log", "MESSAGE")


def _words_of(text: str) -> str:
    """A JSON log line as words: its message first, then its other plain fields, unescaped, so a
    quoted name reads as it was written; any other line as it is."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        fields = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if not isinstance(fields, dict):
        return text
    message = next((fields[k] for k in _MESSAGE_KEYS if isinstance(fields.get(k), str)), None)
    if message is None:
        return text
    rest = " ".join(
        f"{key}={value}"
        for key, value in fields.items()
        if key not in _MESSAGE_KEYS and isinstance(value, str | int | float)
    )
    return f"{message} {rest}".strip()


def _inline_document(ctx: Context, number: int, text: str) -> list[Item]:
    """A JSON document a script logged on one line after its own prefix (a sidecar printing
    the IMDS scheduled events); nothing when the rest of the line is not one a reader knows."""
    try:
        value = orjson.loads(text[text.index('{"') :])
    except orjson.JSONDecodeError:
        return []
    if not isinstance(value, dict):
        return []
    return list(_document(ctx, number, orjson.dumps(value)))


def _yaml_block_end(lines: list[tuple[int, str]], start: int, indent: int = 0) -> int:
    """Where a YAML block that starts at `start` with `indent` leading spaces ends: at the
    first line that is not YAML, or that sits left of where the block began."""
    for index in range(start + 1, len(lines)):
        text = lines[index][1]
        if not text.strip():
            continue
        if len(text) - len(text.lstrip()) < indent or not _YAML_LINE.match(text[indent:]):
            return index
    return len(lines)


# Fields only a Job's status has (batch/v1 JobStatus): such a fragment is not a pod's, and its
# lines are left to the text rules, which know a Complete or Failed condition when they see one.
_JOB_STATUS_FIELDS: Final = frozenset(
    {"succeeded", "failed", "active", "completionTime", "uncountedTerminatedPods", "terminating"}
)
_JOB_CONDITIONS: Final = frozenset(
    {"Complete", "Failed", "Suspended", "FailureTarget", "SuccessCriteriaMet"}
)
# Condition types a node reports (a pod's are PodScheduled, Initialized, Ready, ...).
_NODE_CONDITIONS: Final = frozenset(
    {
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
        "OutOfDisk",
        "KernelDeadlock",
    }
)


def _status_of(value: Any) -> dict[str, Any] | None:
    """The status a fragment shows, whatever level the paste cut it at: a whole `status:`, a
    container status or its `state:`, a bare terminated state, or a list of conditions."""
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "type" in v and "status" in v for v in value):
            if {v["type"] for v in value} <= _JOB_CONDITIONS:
                return None
            return {"conditions": value}
        return None
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("status"), dict) and not value.keys() - {
        "status",
        "metadata",
        "spec",
        "kind",
        "apiVersion",
    }:
        value = value["status"]
    if value.keys() & _JOB_STATUS_FIELDS and not value.keys() & {"containerStatuses", "phase"}:
        return None
    if "type" in value and "status" in value and not value.keys() & {"containerStatuses"}:
        if not isinstance(value["type"], str) or value["type"] in _JOB_CONDITIONS:
            return None  # a condition's type is a name; anything else is no condition
        return {"conditions": [value]}  # one condition object
    if "exitCode" in value:
        value = {"terminated": value}  # `.state.terminated` or `.lastState.terminated`
    if value.keys() & {"terminated", "waiting", "running"}:
        value = {"state": value}
    if value.keys() & {"state", "lastState"} and "containerStatuses" not in value:
        value = {"containerStatuses": [{"name": PASTED_CONTAINER, "restartCount": 0, **value}]}
    if not value.keys() & {"containerStatuses", "conditions", "phase", "reason"}:
        return None
    return dict(value)


def _as_pod(value: Any, hints: dict[str, str]) -> dict[str, Any] | None:
    """A fragment of a pod or a node (`jq .status`, a jsonpath state, a conditions list) as a
    document for the readers."""
    status = _status_of(value)
    if status is None:
        return None
    conditions = status.get("conditions")
    types = {
        c.get("type")
        for c in (conditions if isinstance(conditions, list) else ())
        if isinstance(c, dict) and isinstance(c.get("type"), str)
    }
    if types & _NODE_CONDITIONS and not status.keys() & {"containerStatuses", "phase"}:
        node = hints.get("node", PASTED_NODE)
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": status}
    name = hints.get("pod", PASTED_POD)
    namespace = hints.get("namespace", PASTED_NAMESPACE if "pod" not in hints else "default")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": standin_uid(namespace, name)},
        "status": status,
    }


def _document(ctx: Context, first_line: int, data: bytes) -> Iterator[Item]:
    """A document pasted amid text, read by the ordinary readers, its lines counted in place."""
    shifted = replace(ctx, line_offset=first_line - 1)
    _, items = detect.read(shifted, data)
    found = list(items or ())
    if all(isinstance(item, Rejected) for item in found):
        return  # not a document any reader knows: the lines are left to the log
    for item in found:
        if isinstance(item, Rejected) and item.line is not None:
            item = replace(item, line=item.line + first_line - 1)
        yield item


def read_paste(origin: str, data: bytes, options: IngestOptions | None = None) -> Iterator[Item]:
    """Items from one pasted file (or standard input), whatever mix it holds."""
    base = options or IngestOptions()
    now = base.at or int(time.time() * 1000)
    # Stand-ins for what a paste does not say: the node of node-local lines, a pod for the log.
    opts = replace(
        base,
        boot_time=base.boot_time if base.boot_time is not None else now - 86_400_000,
        at=now,
        pod=base.pod or PodRef(PASTED_NAMESPACE, PASTED_POD, PASTED_CONTAINER),
    )
    text = data.decode("utf-8", "replace")
    years = Counter(a or b for a, b in _YEAR.findall(text))
    if opts.year is None and years:
        # Syslog and journal lines carry no year: the one the paste's dated lines show.
        opts = replace(opts, year=int(years.most_common(1)[0][0]))
    # A hint, not --node: journal and syslog lines keep the host they name.
    ctx = Context(origin, opts, now, path_hints={"node": base.node or PASTED_NODE})
    head = data.lstrip()[:1]
    if head in (b"{", b"[") or data.lstrip().startswith(
        (b"apiVersion:", b"kind:", b"items:", b"---")
    ):
        fmt, items = detect.read(ctx, data)
        # `[rank3]:` and `[  12.345678] NVRM:` start like JSON too: text unless a document
        # (JSON or YAML, not a text format or the plain log) parsed.
        parsed = list(items) if items is not None and fmt not in _TEXT_FORMATS else []
        if any(not isinstance(item, Rejected) for item in parsed):
            yield from parsed
            return
    limit = opts.limits.line_bytes
    lines = [(n, clean(detect.cut_line(t, limit))) for n, t in enumerate(text.split("\n"), start=1)]
    lines = _undouble([(n, _CRI_PREFIX.sub("", t, count=1)) for n, t in lines])
    wrapped = _wrapped(lines)  # measured as pasted, prefixes and all: the terminal cut them so
    lines = _rejoin_yaml_values(_strip_prefixes(lines))
    yield from _in_paste_order(_read_lines(ctx, lines, wrapped))


# An indented YAML line, and a line that starts a key of its own (`image:`, not `docker://`).
_INDENTED_YAML: Final = re.compile(r"^\s+(?:- )?[\w./-]+:")
_YAML_KEY: Final = re.compile(r"^(?:- )?[\w./-]+:(?:\s|$)")


def _rejoin_yaml_values(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Put back a status document's long values a bug tracker or a terminal wrapped onto a line
    of their own at the left margin (`containerID:` / `docker://2bb4...`, `...@sha256` /
    `:f676...`): such a line between two indented YAML lines, one token that is no key of its
    own nor a comment, was cut where it stands and joins the line above (after a space when
    that one ended with its key). A line with words in it is a line of its own (a log line
    printed amid a config)."""
    out: list[tuple[int, str]] = []
    for index, (number, text) in enumerate(lines):
        following = lines[index + 1][1] if index + 1 < len(lines) else ""
        if (
            out
            and (token := text.rstrip())
            and not any(c.isspace() for c in token)  # one token, at the left margin
            and not token.startswith("#")
            and not _YAML_KEY.match(text)
            and _INDENTED_YAML.match(out[-1][1])
            and _INDENTED_YAML.match(following)
        ):
            previous = out[-1][1]
            out[-1] = (
                out[-1][0],
                f"{previous} {text}" if previous.endswith(":") else previous + text,
            )
        else:
            out.append((number, text))
    return out


def _undouble(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Close up a double-spaced paste (copied from a page that puts a blank line after every
    line), so a describe block or a table reads as one: a lone blank line between two filled
    ones goes, a run of them (two blocks' separator) stays."""
    filled = [bool(t.strip()) for _, t in lines]
    touching = sum(1 for a, b in pairwise(filled) if a and b)
    if sum(filled) < 4 or touching * 10 > sum(filled):
        return lines
    last = len(lines) - 1
    return [
        line
        for index, line in enumerate(lines)
        if filled[index] or not (0 < index < last and filled[index - 1] and filled[index + 1])
    ]


def _where(item: Item, previous: int) -> int:
    """The paste line an item stands for: a log record's own sequence number (a traceback's
    is its exception line), else the line its origin names."""
    if isinstance(item, Evidence):
        seq = item.attrs.get("seq")
        if isinstance(seq, int):
            return seq
        _, _, line = (item.origin or "").rpartition(":")
        return int(line) if line.isdigit() else previous
    if isinstance(item, Rejected) and item.line is not None:
        return item.line
    return previous


def _in_paste_order(items: Iterable[Item]) -> Iterator[Item]:
    """Items in the order their lines were pasted: the readers hand back structured blocks as
    they meet them and the log's lines at the end, and a diagnosis reads a paste in order."""
    keyed: list[tuple[int, int, Item]] = []
    line = 0
    for position, item in enumerate(items):
        line = _where(item, line)
        keyed.append((line, position, item))
    keyed.sort(key=lambda entry: (entry[0], entry[1]))
    for _, _, item in keyed:
        yield item


# What launchers and log tools put before every line of a worker: grep's file name before a
# dated log line ("messages:Jun 17 ...", "/var/log/syslog:12:..."), srun --label ("15: "),
# mpirun --tag-output ("[1,0]<stderr>:"), horovodrun ("[0]<stderr>:", and with
# --prefix-output-with-timestamp "Thu Aug 29 16:41:02 2019[0]<stderr>:"), Ray's worker prefix
# ("(RayTrainWorker pid=42, ip=10.0.0.3) ", SkyPilot's "(task, pid=42) " and
# "(worker1, rank=1, pid=42, ip=10.0.0.4) "), kubectl logs
# --prefix ("[pod/name/container] "), docker compose ("svc-1  | "), and the quote marks of a
# reply in a thread or a mail ("> > ").
_LAUNCHER_PREFIXES: Final = (
    re.compile(r"^(?:> ?)+"),
    re.compile(
        r"^(?:/?[\w.-]+/)*[\w.-]+:(?:\d+:)?"
        r"(?=[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:|\[\s*\d+\.\d+\])"
    ),
    re.compile(r"^ {0,5}\d+: "),
    re.compile(r"^\s*\[\d+,\d+\]<(?:stdout|stderr)>:"),
    re.compile(
        r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[\d+\]<(?:stdout|stderr)>:"
    ),
    re.compile(r"^(?:[\w/.-]+ )?\((?:[\w.-]+,? )?(?:rank=\d+, )?pid=\d+(?:, ip=[\d.]+)?\)\s?"),
    re.compile(r"^\[pod/[^\]\s]+\] "),
    re.compile(r"^[\w.-]+\s+\| "),
)


def _strip_prefixes(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Cut a launcher's per-line prefix where it marks most of a paste's lines, so a traceback
    or an error line reads as the program wrote it."""
    filled = [t for _, t in lines if t.strip()]
    for prefix in _LAUNCHER_PREFIXES:
        if sum(1 for t in filled if prefix.match(t)) * 3 >= max(2, len(filled)):
            lines = [(n, prefix.sub("", t, count=1)) for n, t in lines]
    return lines


def _read_lines(
    ctx: Context, lines: list[tuple[int, str]], wrapped: frozenset[int]
) -> Iterator[Item]:
    app: list[tuple[int, str]] = []
    hints: dict[str, str] = {}
    index = 0
    while index < len(lines):
        number, text = lines[index]
        _command_hints(text, hints)
        ctx.memory["namespace"] = hints.get("namespace", "default")
        window = [t for _, t in lines[index : index + 8]]
        stripped = text.strip()
        end = index + 1
        if not stripped:
            pass
        elif kubectl_text.looks_like_describe_pod(window) and text.startswith("Name:"):
            end = _block_end(lines, index, describe=True)
            found = list(kubectl_text.parse_describe_pod(ctx, lines[index:end]))
            yield from found
            if not any(isinstance(item, Evidence) for item in found):
                # `describe` of a Job, a PyTorchJob, a PodGroup: not a pod, but its words
                # (Completed At, a condition's message) may still name the cause.
                app.extend(lines[index:end])
        elif kubectl_text.looks_like_describe_node(window) or (
            text.startswith("Name:")
            and any(t.startswith(("Roles:", "Role:", "Taints:", "Unschedulable:")) for t in window)
            and not any(t.startswith("Namespace:") for t in window)
        ):
            while end < len(lines) and lines[end][1].strip() and not _PROMPT.match(lines[end][1]):
                end += 1
            yield from kubectl_text.parse_describe_node(ctx, lines[index:end], hints.get("node"))
        elif kubectl_text.looks_like_old_events_header(text):
            while end < len(lines) and lines[end][1].strip():
                end += 1
            about = (
                (hints.get("namespace", "default"), hints["pod"])
                if "pod" in hints
                else (PASTED_NAMESPACE, PASTED_POD)
            )
            rows = lines[index + 1 : end]
            found = list(kubectl_text.parse_old_event_rows(ctx, rows, about))
            yield from found
            # A row the reader could not split is still the paste's words.
            read = {_where(item, 0) for item in found}
            app.extend(row for row in rows if row[0] not in read and row[1].strip("-\t "))
        elif kubectl_text.looks_like_events_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_events_table(ctx, lines[index:end])
        elif kubectl_text.looks_like_gcloud_operations_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_gcloud_operations_table(ctx, lines[index:end])
        elif kubectl_text.looks_like_nodes_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_nodes_table(ctx, lines[index:end])
        elif kubectl_text.looks_like_describe_fragment(text) and (
            "pod" in hints
            or (end < len(lines) and kubectl_text.looks_like_describe_fragment(lines[end][1]))
        ):
            while end < len(lines) and kubectl_text.looks_like_describe_fragment(lines[end][1]):
                end += 1
            about = (
                (hints.get("namespace", "default"), hints["pod"])
                if "pod" in hints
                else (PASTED_NAMESPACE, PASTED_POD)
            )
            yield from kubectl_text.parse_describe_fragment(ctx, lines[index:end], about)
            # A fragment's Message and Reason are words too (a cut may have kept the telling
            # line and lost the structure around it), read together so each keeps its context.
            app.append((number, " ".join(t.strip() for _, t in lines[index:end])))
        elif kubectl_text.looks_like_pods_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_pods_table(ctx, lines[index:end])
            # A STATUS the reader does not model ("Couldn't find key x in Secret y") is words.
            app.extend(lines[index + 1 : end])
        elif kubectl_text.looks_like_event_row(text) or text.startswith("Events:"):
            rows = [lines[index]]
            while end < len(lines):
                following = lines[end][1]
                if kubectl_text.looks_like_event_row(following) or _EVENTS_FURNITURE.match(
                    following
                ):
                    rows.append(lines[end])
                elif following.strip() and len(rows[-1][1]) in _WRAP_WIDTHS:
                    rows[-1] = (rows[-1][0], rows[-1][1] + following)  # wrapped by the terminal
                else:
                    break
                end += 1
            about = (
                (hints.get("namespace", "default"), hints["pod"])
                if "pod" in hints
                else (PASTED_NAMESPACE, PASTED_POD)
            )
            yield from kubectl_text.parse_event_rows(ctx, rows, about)
        elif _is_kernel(text):
            kernel_lines = [lines[index]]
            while end < len(lines) and lines[end][1].strip():
                following = lines[end][1]
                if _is_kernel(following):
                    kernel_lines.append(lines[end])
                elif _NVRM_CONTINUED.match(following):
                    # The driver wraps a long message over indented `NVRM:` lines.
                    kernel_lines[-1] = (
                        kernel_lines[-1][0],
                        f"{kernel_lines[-1][1]} {_NVRM_CONTINUED.sub('', following)}",
                    )
                else:
                    break
                end += 1
            yield from kernel.parse_kernel_text(ctx, kernel_lines)
        elif kubectl_text.looks_like_controller_log([text]) and (
            found := list(kubectl_text.parse_controller_log(ctx, [(number, text)]))
        ):
            yield from found
        elif (block := _structured_block(lines, index, hints)) is not None and (
            found := list(_document(ctx, number, block[1]))
        ):
            end, _, fragment = block
            yield from found
            if fragment:
                # A cut-out part of an object: its messages are words too (a condition type
                # the readers do not model may still say why).
                app.append((number, " ".join(t.strip() for _, t in lines[index:end])))
        elif '{"' in text and (found := _inline_document(ctx, number, text)):
            yield from found
        elif (pretty := _pretty_json(lines, index)) is not None:
            # JSON pretty-printed over many lines: read as the one line it was (a controller's
            # log record, else words).
            end, one_line = pretty
            found = list(kubectl_text.parse_controller_log(ctx, [(number, one_line)]))
            yield from found
            if not found:
                app.append((number, _words_of(one_line)))
        else:
            app.append((number, _words_of(text)))
        index = end
    if app:
        yield from podlogs.parse_plain_text(
            replace(ctx, path_hints={}), _unwrap(app, wrapped), closing=True
        )
