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
from collections.abc import Iterator
from dataclasses import replace
from typing import Final

from whyjob.collector.ingest import detect, kernel, kubectl_text, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, PodRef, Rejected
from whyjob.collector.ingest.loglines import clean

__all__ = ["PASTED_CONTAINER", "PASTED_NAMESPACE", "PASTED_NODE", "PASTED_POD", "read_paste"]

PASTED_NAMESPACE, PASTED_POD, PASTED_CONTAINER = "pasted", "pasted-pod", "main"
PASTED_NODE = "pasted-node"

_CRI_PREFIX: Final = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [FP] "
)
# Widths terminals and bug trackers wrap at: a line exactly this long was probably cut.
_WRAP_WIDTHS: Final = frozenset({80, 100, 120, 132, 140, 160, 180, 200, 240})
_LINE_START: Final = re.compile(
    r"^(?:\s|\[|\d{4}-\d\d-\d\d|[IWEF]\d{4} |Traceback|During handling|The above exception|[A-Z][\w.]*(?:Error|Exception):)"
)


# A row of a kubectl table: a lower-case first cell (a name, an age, a namespace) and the
# two or more spaces kubectl puts between columns; a prompt or another tool's line ends it.
_TABLE_ROW: Final = re.compile(r"^[a-z0-9<][\w./:<>()-]*\s{2,}\S")


def _unwrap(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join lines a terminal wrapped: a line of a wrapping width followed by a line that does
    not look like the start of a new one."""
    out: list[tuple[int, str]] = []
    for number, text in lines:
        if out and len(out[-1][1]) in _WRAP_WIDTHS and text and not _LINE_START.match(text):
            out[-1] = (out[-1][0], out[-1][1] + text)
        else:
            out.append((number, text))
    return out


def _is_kernel(text: str) -> bool:
    return kernel.looks_like_kernel_text([text])


def _block_end(lines: list[tuple[int, str]], start: int, *, describe: bool) -> int:
    """Where a describe block or a table that starts at `start` ends (exclusive)."""
    seen_events = False
    for index in range(start + 1, len(lines)):
        text = lines[index][1]
        if describe:
            seen_events = seen_events or text.startswith("Events:")
            if seen_events and not text.strip():
                return index
            if text.startswith("Events:") and "<none>" in text:
                return index + 1
        elif not _TABLE_ROW.match(text):
            return index
    return len(lines)


def read_paste(origin: str, data: bytes, options: IngestOptions | None = None) -> Iterator[Item]:
    """Items from one pasted file (or standard input), whatever mix it holds."""
    base = options or IngestOptions()
    now = base.at or int(time.time() * 1000)
    # Stand-ins for what a paste does not say: the node of node-local lines, a pod for the log.
    opts = replace(
        base,
        node=base.node or PASTED_NODE,
        boot_time=base.boot_time if base.boot_time is not None else now - 86_400_000,
        at=now,
        pod=base.pod or PodRef(PASTED_NAMESPACE, PASTED_POD, PASTED_CONTAINER),
    )
    ctx = Context(origin, opts, now)
    head = data.lstrip()[:1]
    if head in (b"{", b"[") or data.lstrip().startswith(
        (b"apiVersion:", b"kind:", b"items:", b"---")
    ):
        fmt, items = detect.read(ctx, data)
        # `[rank3]:` and `[  12.345678] NVRM:` start like JSON too: text unless a document parsed.
        parsed = list(items) if items is not None and fmt != "kernel" else []
        if any(not isinstance(item, Rejected) for item in parsed):
            yield from parsed
            return
    lines = [
        (n, clean(t)) for n, t in enumerate(data.decode("utf-8", "replace").split("\n"), start=1)
    ]
    lines = [(n, _CRI_PREFIX.sub("", t, count=1)) for n, t in lines]
    app: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        number, text = lines[index]
        window = [t for _, t in lines[index : index + 8]]
        if kubectl_text.looks_like_describe_pod(window) and text.startswith("Name:"):
            end = _block_end(lines, index, describe=True)
            yield from kubectl_text.parse_describe_pod(ctx, lines[index:end])
        elif kubectl_text.looks_like_events_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_events_table(ctx, lines[index:end])
        elif kubectl_text.looks_like_pods_table([text]):
            end = _block_end(lines, index, describe=False)
            yield from kubectl_text.parse_pods_table(ctx, lines[index:end])
        elif text.strip() and _is_kernel(text):
            end = index + 1
            while end < len(lines) and lines[end][1].strip() and _is_kernel(lines[end][1]):
                end += 1
            yield from kernel.parse_kernel_text(ctx, lines[index:end])
        elif text.strip() and kubectl_text.looks_like_controller_log([text]):
            end = index + 1
            yield from kubectl_text.parse_controller_log(ctx, [(number, text)])
        else:
            end = index + 1
            if text.strip():
                app.append((number, text))
        index = end
    if app:
        yield from podlogs.parse_plain_text(replace(ctx, path_hints={}), _unwrap(app))
