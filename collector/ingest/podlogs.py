"""Container logs: the kubelet's CRI files, docker json-file logs, and plain log files.

The kubelet writes `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`, so the
path names the pod, its uid, the container and which run of it (the restart index). A plain
log file says none of that and is attached to a pod with `--pod NAMESPACE/POD[/CONTAINER]`.

Every line is cleaned (ANSI codes), redacted (secrets) and classified (loglines.py). Its id
hashes the container run with the line's own timestamp and, for lines sharing a timestamp,
their order; so the same line read from the file and from a live tail is stored once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, Final

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.collector.ingest.launchers import Failure, SummaryTracker
from whyjob.collector.ingest.loglines import LineClassifier, clean
from whyjob.collector.ingest.tracebacks import Traceback, TracebackTracker
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = [
    "looks_like_cri",
    "looks_like_docker_json",
    "parse_cri_text",
    "parse_docker_json",
    "parse_plain_text",
    "pod_from_path",
]

_CRI_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) ([FP]) ?(.*)$"
)
_POD_DIR = re.compile(
    r"^(?P<namespace>[a-z0-9][-a-z0-9]*)_(?P<pod>[a-z0-9][-a-z0-9.]*)_(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)
_RESTART_FILE = re.compile(r"^(?P<restart>\d+)\.log(?:\.\d{8}-\d{6}(?:\.gz)?)?$")
# /var/log/containers/<pod>_<namespace>_<container>-<64 hex container id>.log
_CONTAINERS_FILE = re.compile(
    r"^(?P<pod>[a-z0-9][-a-z0-9.]*)_(?P<namespace>[a-z0-9][-a-z0-9]*)_(?P<container>[-a-z0-9]+)-[0-9a-f]{64}\.log$"
)

# Leading timestamps in plain logs, newest styles first.
_PLAIN_STAMPS = (
    # kubectl logs --timestamps, RFC 3339
    re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s"),
    # python logging / DeepSpeed: 2026-03-04 10:11:12,345 or [2026-03-04 10:11:12,345]
    re.compile(r"^\[?(?P<iso>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]?\s"),
    # glog and c10 (PyTorch): E1218 20:27:21.426415540, [rank0]:[E1218 20:27:21.426 ...
    re.compile(
        r"^(?:\[rank\d+\]:)?\[?[IWEF](?P<mon>\d\d)(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?\s"
    ),
)


@lru_cache(maxsize=4096)
def _second(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()) * 1000


def _cri_ts(stamp: str) -> int:
    """RFC 3339 with nanoseconds, fast for the common UTC form (one parse per second)."""
    if stamp.endswith("Z") and len(stamp) >= 20:
        millis = int(stamp[20:23].ljust(3, "0")) if stamp[19] == "." else 0
        return _second(stamp[:19]) + millis
    return parse_ts(stamp)


# A host name: DNS labels with a digit, and a dot or two dashes (ip-10-0-1-2.ec2.internal,
# gke-pool-1a2b3c4d-x7k2, aks-gpupool-12345678-vmss000003), not "kern" or "events".
_NODE_NAME = re.compile(
    r"^(?=.*\d)(?=.*[.]|.*-.*-)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def node_from_path(path: str) -> str | None:
    """The node a node-local file names by its own name or its folder's."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    for part in (PurePosixPath(parts[-1]).stem if parts else "", *reversed(parts[-3:-1])):
        if _NODE_NAME.match(part):
            return part
    return None


def pod_from_path(path: str) -> dict[str, Any]:
    """What a kubelet log path says: namespace, pod, pod_uid, container, restart."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    restart = _RESTART_FILE.match(parts[-1]) if len(parts) >= 3 else None
    pod = _POD_DIR.match(parts[-3]) if restart else None
    if restart and pod:
        return {**pod.groupdict(), "container": parts[-2], "restart": int(restart["restart"])}
    if parts and (match := _CONTAINERS_FILE.match(parts[-1])):
        return dict(match.groupdict())
    return {}


def looks_like_cri(first_lines: list[str]) -> bool:
    """Most of the first lines are CRI lines: a garbage line or two (a torn write) must not
    turn the whole file into plain text."""
    lines = [line for line in first_lines if line.strip()]
    hits = sum(1 for line in lines if _CRI_LINE.match(line))
    return hits > 0 and hits * 3 >= len(lines) * 2


def looks_like_docker_json(doc: Any) -> bool:
    return isinstance(doc, dict) and "log" in doc and "stream" in doc and "time" in doc


_classifiers: dict[tuple[tuple[str, tuple[str, ...]], ...], LineClassifier] = {}


# The C++ runtime's verbose terminate handler writes one failure on two lines: the exception's
# class, then `  what():  <its message>`. Read as one, the message (an NCCL or a socket error)
# speaks for the exception instead of standing after it as a second error.
_TERMINATE = re.compile(r"terminate called after throwing an instance of ")
_WHAT = re.compile(r"^\s*what\(\):\s")

_Held = tuple[int, int, str, str]  # line, ts, stamp, text


def _classifier(ctx: Context) -> LineClassifier:
    """One compiled classifier per set of configured patterns."""
    key = tuple(sorted(ctx.options.log_markers.items()))
    if key not in _classifiers:
        _classifiers[key] = LineClassifier(ctx.options.log_markers)
    return _classifiers[key]


class _LogSink:
    """Turns (line, ts, text, stream) into records for one container run, and puts the
    tracebacks among those lines back together as `log.traceback` records."""

    def __init__(
        self, ctx: Context, ident: Mapping[str, Any], closing: Mapping[int, int] | None = None
    ) -> None:
        self.ctx = ctx
        self.closing = closing or {}
        self.fields = {
            "namespace": ident.get("namespace"),
            "pod": ident.get("pod"),
            "pod_uid": ident.get("uid"),
            "container": ident.get("container"),
        }
        self.restart = ident.get("restart")
        self.native = (
            f"{ident.get('uid') or ident.get('namespace')}/{ident.get('pod')}/"
            f"{ident.get('container')}/{self.restart if self.restart is not None else '-'}"
        )
        self._last_stamp = ""
        self._dup = 0
        self._trackers: dict[str | None, TracebackTracker] = {}
        self._summaries: dict[str | None, SummaryTracker] = {}
        self._last_ts = 0
        self._classify = _classifier(ctx).classify
        self._terminating: dict[str | None, _Held] = {}

    def records(self, line: int, ts: int, stamp: str, text: str, stream: str | None) -> list[Item]:
        out: list[Item] = []
        if held := self._terminating.pop(stream, None):
            if _WHAT.match(text):
                return self._line(held[0], held[1], held[2], f"{held[3]} {text.strip()}", stream)
            out = self._line(*held, stream)
        if _TERMINATE.search(text):
            self._terminating[stream] = (line, ts, stamp, text)
            return out
        return out + self._line(line, ts, stamp, text, stream)

    def _line(self, line: int, ts: int, stamp: str, text: str, stream: str | None) -> list[Item]:
        if stamp == self._last_stamp:
            self._dup += 1
        else:
            self._last_stamp, self._dup = stamp, 0
        self._last_ts = ts
        text = clean(text)  # secrets are masked for every record at once (collector/redaction)
        verdict = self._classify(text)
        attrs: dict[str, Any] = {"seq": line}
        if stream:
            attrs["stream"] = stream
        if self.restart is not None:
            attrs["restart"] = self.restart
        if verdict.step is not None:
            attrs["step"] = verdict.step
        if verdict.phase is not None:
            attrs["phase"] = verdict.phase
        if line in self.closing:
            attrs["closing"] = self.closing[line]
        out: list[Item] = [
            self.ctx.evidence(
                source="log",
                native_id=self.native,
                version=f"{stamp}/{self._dup}",
                ts=ts,
                kind=verdict.kind,
                message=text,
                severity=verdict.severity,
                attrs=attrs,
                line=line,
                **self.fields,
            )
        ]
        tracker = self._trackers.get(stream)
        if tracker is None:
            tracker = self._trackers[stream] = TracebackTracker()
        out.extend(self._traceback(tb, ts, stream) for tb in tracker.feed(line, text))
        summary = self._summaries.get(stream)
        if summary is None:
            summary = self._summaries[stream] = SummaryTracker()
        out.extend(self._launcher(summary.feed(line, text), ts, stream))
        return out

    def close(self) -> list[Item]:
        out = [
            item
            for stream, held in list(self._terminating.items())
            for item in self._line(*held, stream)
        ]
        self._terminating.clear()
        out += [
            self._traceback(tb, self._last_ts, stream)
            for stream, tracker in self._trackers.items()
            for tb in tracker.close()
        ]
        for stream, summary in self._summaries.items():
            out.extend(self._launcher(summary.close(), self._last_ts, stream))
        return out

    def _launcher(self, failures: list[Failure], ts: int, stream: str | None) -> list[Item]:
        """One record per worker of a launcher's failure table, each knowing the first."""
        first = next((f for f in failures if f.first), None)
        out: list[Item] = []
        for failure in failures:
            attrs: dict[str, Any] = {
                "seq": failure.line,
                "first": failure.first,
                "rank": failure.rank,
                "local_rank": failure.local_rank,
                "exit_code": failure.exit_code,
                "signal": failure.signal,
                "host": failure.host,
                "time": failure.time,
                "detail": failure.detail,
                "first_rank": first.rank if first else None,
                "workers": len(failures),
            }
            if stream:
                attrs["stream"] = stream
            if self.restart is not None:
                attrs["restart"] = self.restart
            out.append(
                self.ctx.evidence(
                    source="log",
                    native_id=self.native,
                    version=f"launcher/{failure.line}",
                    ts=ts,
                    kind="launcher.failure",
                    message=f"the launcher reports {failure.summary}"
                    + (f": {failure.detail}" if failure.detail else ""),
                    severity=Severity.ERROR,
                    attrs=attrs,
                    line=failure.line,
                    **self.fields,
                )
            )
        return out

    def _traceback(self, tb: Traceback, ts: int, stream: str | None) -> Item:
        attrs: dict[str, Any] = {
            "seq": tb.last_line or tb.first_line,
            "first_seq": tb.first_line,
            "exception": tb.exception,
            # IPython names the exception above its frames: a cut paste still says which.
            "detail": tb.detail
            or ("(the log ends before its message)" if tb.exception and tb.truncated else None),
            "functions": tb.functions,
            "files": tb.files,
            "chained": tb.chained,
            "truncated": tb.truncated,
        }
        if tb.rank is not None:
            attrs["rank"] = tb.rank
        if stream:
            attrs["stream"] = stream
        if self.restart is not None:
            attrs["restart"] = self.restart
        return self.ctx.evidence(
            source="log",
            native_id=self.native,
            version=f"traceback/{tb.first_line}/{tb.rank}",
            ts=ts,
            kind="log.traceback",
            message=tb.summary,
            severity=Severity.ERROR,
            attrs=attrs,
            line=tb.first_line,
            **self.fields,
        )


def _identity(ctx: Context) -> dict[str, Any] | None:
    """The pod a log belongs to: from its path, else from --pod."""
    hints = dict(ctx.path_hints)
    ref = ctx.options.pod
    if ref is not None:
        hints.setdefault("namespace", ref.namespace)
        hints.setdefault("pod", ref.name)
        if ref.container:
            hints.setdefault("container", ref.container)
        if ref.uid:
            hints.setdefault("uid", ref.uid)
    if ctx.options.restart is not None:
        hints["restart"] = ctx.options.restart
    if not hints.get("pod"):
        return None
    hints.setdefault("container", "main")
    return hints


def _pod_record(ident: Mapping[str, Any], seen: int) -> PodRecord | None:
    if ident.get("uid") and ident.get("namespace"):
        return PodRecord(
            uid=ident["uid"], namespace=ident["namespace"], name=ident["pod"], seen=seen
        )
    return None


_NO_POD = (
    "cannot tell which pod this log belongs to: its path is not a kubelet log path "
    "(/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log); pass --pod NAMESPACE/POD[/CONTAINER]"
)


def parse_cri_text(ctx: Context, lines: Iterable[tuple[int, str]]) -> Iterator[Item]:
    """Kubelet CRI log lines: `<RFC3339Nano> <stream> <F|P> <text>`; P parts are joined."""
    ident = _identity(ctx)
    if ident is None:
        yield Rejected(None, _NO_POD)
        return
    sink = _LogSink(ctx, ident)
    partial: dict[str, tuple[int, str, list[str]]] = {}
    first = None
    for number, text in lines:
        match = _CRI_LINE.match(text)
        if match is None:
            if text.strip():
                yield Rejected(
                    number, "not a CRI log line (<timestamp> <stream> <F|P> <text>)", text.encode()
                )
            continue
        stamp, stream, tag, body = match.groups()
        if tag == "P":
            held = partial.setdefault(stream, (number, stamp, []))
            held[2].append(body)
            continue
        if stream in partial:
            number, stamp, parts = partial.pop(stream)
            body = "".join(parts) + body
        try:
            ts = _cri_ts(stamp)
        except ValueError as exc:
            yield Rejected(number, str(exc), text.encode())
            continue
        first = first if first is not None else ts
        yield from sink.records(number, ts, stamp, body, stream)
    for stream, (number, stamp, parts) in partial.items():
        yield from sink.records(number, _cri_ts(stamp), stamp, "".join(parts), stream)
    yield from sink.close()
    if first is not None and (record := _pod_record(ident, first)):
        yield record


def parse_docker_json(ctx: Context, docs: Iterable[tuple[int, Any]]) -> Iterator[Item]:
    """Docker json-file lines: {"log": "...\\n", "stream": "stderr", "time": "..."}."""
    ident = _identity(ctx)
    if ident is None:
        yield Rejected(None, _NO_POD)
        return
    sink = _LogSink(ctx, ident)
    first = None
    for line, doc in docs:
        if not looks_like_docker_json(doc):
            yield Rejected(line, "not a docker json-file log line (log, stream, time)")
            continue
        stamp = str(doc["time"])
        try:
            ts = _cri_ts(stamp)
        except ValueError as exc:
            yield Rejected(line, f"docker log line: {exc}")
            continue
        first = first if first is not None else ts
        yield from sink.records(line, ts, stamp, str(doc["log"]).rstrip("\n"), doc.get("stream"))
    yield from sink.close()
    if first is not None and (record := _pod_record(ident, first)):
        yield record


def _plain_stamp(text: str, year: int) -> int | None:
    for pattern in _PLAIN_STAMPS:
        match = pattern.match(text)
        if match is None:
            continue
        groups = match.groupdict()
        try:
            if groups.get("iso"):
                iso = groups["iso"].replace(",", ".")
                return parse_ts(
                    iso if iso[-1] == "Z" or "+" in iso[10:] or iso.count("-") > 2 else iso + "Z"
                )
            frac = (groups.get("frac") or "0")[:3].ljust(3, "0")
            return _second(f"{year:04d}-{groups['mon']}-{groups['day']}T{groups['time']}") + int(
                frac
            )
        except ValueError:
            return None
    return None


# A training step's own line, besides what the line classifier counts as progress: a loss value
# with an epoch, iteration, step or batch counter (`Epoch: [14][ 0/5005] ... Loss 1.70`,
# detectron2's `iter: 5019  total_loss: 9.92`, `[800/300000] Train loss: 1.75`, `[E 15 | it
# 1100] loss {total 1.34, ...}`), or an epoch begun before the last (`Starting epoch 2/6`);
# not an evaluation's (`Test: [190/196] Loss`, `Testing DataLoader 0: 100%|`, `Epoch(val)`, a
# metrics dict keyed `test_loss`, `eval_accuracy`), which a finished run prints last.
_LOSS_VALUE: Final = re.compile(r"(?i)loss\w*\b[^\n\d]{0,20}\d")
_STEP_COUNTER: Final = re.compile(
    r"(?i)\b(?:epoch|iter|iteration|it|step|global_step|batch)\b|\[\s*\d+\s*/\s*\d+\s*\]"
)
_EPOCH_OF: Final = re.compile(r"(?i)\bepoch\W{0,3}(\d+)\s*/\s*(\d+)")
_EVALUATING: Final = re.compile(
    r"(?i)^\W*(?:\S+\s+)?(?:test|testing|val|valid|validation|validating|eval|evaluating|evaluation)(?:\b|_)"
    r"|\((?:val|test)\)"
)
_BAR_DONE: Final = re.compile(r"\b(\d+)/(\d+) \[")
# A line that calls itself final ("Target loss reached at step 6034! Final Loss: 0.088").
_FINAL: Final = re.compile(r"(?i)\bfinal\b")
# How many of a whole log's last lines may be the words a finished run closes with (a result
# table's last rows, a save and its path wrapped by the terminal).
_CLOSING_LINES: Final = 3
# Weights & Biases' footer (its run summary, "Synced N W&B file(s)", "Find logs at:"), printed
# by run.finish() or its exit hook after the program's last words whether the run finished or
# raised, never after a signal's default action killed it: the closing lines are the ones
# before it, and a footer that ends the log after them is marked closing 0. A launcher's rank
# prefix (torchrun's `[default0]:`) may come first.
_EXIT_HOOK_FOOTER: Final = re.compile(r"^\s*(?:\[(?:default|rank)\d+\]:\s*)?wandb:")


def _closing_lines(
    rows: list[tuple[int, str, int | None]], classify: LineClassifier
) -> dict[int, int]:
    """A log's last lines that no training step follows, each with its place from the end (1,
    the last; 0, an exit hook's footer after them): words a finished run closes with (a save,
    a result) before one more step are routine, not an end, and so is a footer straight after
    a step (a run.finish() a kill came after). Whether an error or a kill among them undoes an
    end is the rules' to say."""
    tail: dict[int, int] = {}
    footer: list[int] = []
    placed = 0
    for number, text, _ in reversed(rows):
        if placed == _CLOSING_LINES:
            break
        if _EXIT_HOOK_FOOTER.match(text):
            if not placed:
                footer.append(number)
            continue
        if _is_training_step(text, classify.classify(text).kind):
            break
        placed += 1
        tail[number] = placed
    if placed:
        tail.update(dict.fromkeys(footer, 0))
    return tail


def _is_training_step(text: str, kind: str) -> bool:
    """One more step of training (the classifier's progress, unless a bar at its total), not
    an evaluation's line nor one that says it is the final one."""
    if _EVALUATING.search(text) or _FINAL.search(text):
        return False
    if kind == "log.progress":
        bar = _BAR_DONE.search(text)
        return not (bar and bar.group(1) == bar.group(2))
    epoch = _EPOCH_OF.search(text)
    if epoch and int(epoch.group(1)) < int(epoch.group(2)):
        return True
    return bool(_LOSS_VALUE.search(text) and _STEP_COUNTER.search(text))


def parse_plain_text(
    ctx: Context, lines: Iterable[tuple[int, str]], *, closing: bool = False
) -> Iterator[Item]:
    """A log file with no fixed format, attached to a pod by --pod.

    Lines take the timestamp they start with; lines without one (traceback frames) take the
    previous line's. When the file has no timestamps at all, every line gets --at or the file's
    modification time, and the order is kept in attrs.seq. With `closing` (the lines are a
    whole log, as a paste's are), its last lines no training step follows are marked
    attrs.closing with their place from the end (1, the last): a whole log ends where the
    program stopped writing.
    """
    ident = _identity(ctx)
    if ident is None:
        yield Rejected(None, _NO_POD)
        return
    year = ctx.options.year or datetime.fromtimestamp((ctx.mtime_ms or 0) / 1000, UTC).year
    rows = [(number, text, _plain_stamp(text, year)) for number, text in lines if text.strip()]
    stamps = [ts for _, _, ts in rows if ts is not None]
    fallback = ctx.options.at or ctx.mtime_ms
    if not stamps and fallback is None:
        yield Rejected(None, "log lines carry no timestamps: pass --at TIME (when the log ended)")
        return
    sink = _LogSink(ctx, ident, _closing_lines(rows, _classifier(ctx)) if closing else None)
    current = stamps[0] if stamps else fallback
    assert current is not None
    for number, text, ts in rows:
        current = ts if ts is not None else current
        yield from sink.records(number, current, str(current), text, None)
    yield from sink.close()
    if record := _pod_record(ident, stamps[0] if stamps else current):
        yield record
