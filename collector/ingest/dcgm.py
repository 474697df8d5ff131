"""dcgm-exporter metrics: a scrape in Prometheus text format, or a Prometheus HTTP API answer.

Samples are grouped per GPU (the `UUID` label, and the MIG `GPU_I_ID` when there is one) and
per time: each group is one `gpu.status` record holding every metric of that scrape
(`attrs.metrics`), so a user can see what the GPU looked like. Each GPU is bound to its node
(`gpu.node`, from the `Hostname` label, else a `node` / `kubernetes_node` label a relabelling
added, else --node) and, when the exporter's pod labels are set, to the pod holding it
(`pod.gpu`, keyed `namespace/pod` like the pod parser's binding).

Problem records are written when a problem metric becomes or changes non-zero, not on every
scrape: a Prometheus range of a latched value would otherwise repeat the same fact thousands of
times. `DCGM_FI_DEV_XID_ERRORS` is the *last* Xid the GPU reported, latched, so a `gpu.xid`
from it says "at or before this time" (attrs `latched`) and a repeat of the same code is
invisible; `DCGM_EXP_XID_ERRORS_COUNT{xid="N"}` is the exporter's windowed count per code.
Double-bit ECC → `gpu.ecc`; uncorrectable remapped rows, pending remaps and remap failures →
`gpu.row_remap`; NVLink CRC / replay / recovery counters → `gpu.nvlink`; a GPU at or above
90 °C, or a clock-event mask with the hardware thermal (0x40) or hardware slowdown (0x8) bit
→ `gpu.thermal`.

Times: a sample's own timestamp; else --at; else the file's modification time, recorded in
attrs `ts_source` (`sample`, `at`, `mtime`) because a file's mtime is only a guess at when it
was scraped. Samples without a GPU UUID (the exporter's own go_/process_ metrics) are counted
as skipped. Several scrapes pasted into one file without timestamps share one time, so the
later value of a metric wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.collector.ingest.kernel import XID_MEANING, normalize_pci, xid_info, xid_severity
from whyjob.core.entities import Binding
from whyjob.core.evidence import Severity

__all__ = [
    "EVENTS_ONLY",
    "PREVIOUS",
    "looks_like_prometheus_api",
    "looks_like_prometheus_text",
    "parse_prometheus_api",
    "parse_prometheus_text",
]

SOURCE: Final = "dcgm"
# Context.memory keys a live collector sets: the series' last values, and "no gpu.status
# records" (the raw series stay in Prometheus; only the changes become evidence).
PREVIOUS: Final = "dcgm.previous"
EVENTS_ONLY: Final = "dcgm.events_only"
# Our own line parser, not prometheus_client.parser.text_string_to_metric_families: measured on
# 420,000 lines of dcgm-exporter scrapes (8 GPUs, 21 metrics, HELP/TYPE, ms timestamps, pod
# labels), the library parsed 20 k samples/s and this regex with a cache of label sets 446 k/s
# (22x; 236 k/s for the whole of parse_prometheus_text, records included), and ingest reads
# millions of lines. The library also gives up on a whole document at its first bad line, where
# this rejects that line with its number and keeps the rest.
_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?[ \t]+(?P<value>\S+)"
    r"(?:[ \t]+(?P<ts>-?\d+))?[ \t]*$"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")
_METRIC_IN_QUERY = re.compile(r"\bDCGM_[A-Z0-9_]+\b")

_HW_SLOWDOWN: Final = 0x8
_HW_THERMAL: Final = 0x40
_THROTTLE_BITS: Final = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
_HOT_CELSIUS: Final = 90.0


@dataclass(frozen=True, slots=True)
class _Rule:
    """When a metric is a problem: `change` (non-zero and different from the last value),
    `threshold` (crossing up through `limit`), `bits` (any of `limit`'s bits newly set)."""

    kind: str
    severity: int
    mode: str = "change"
    limit: float = 0.0


_RULES: Final = {
    "DCGM_FI_DEV_XID_ERRORS": _Rule("gpu.xid", Severity.ERROR),
    "DCGM_EXP_XID_ERRORS_COUNT": _Rule("gpu.xid", Severity.ERROR),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": _Rule("gpu.ecc", Severity.ERROR),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": _Rule("gpu.ecc", Severity.WARNING),
    "DCGM_FI_DEV_RETIRED_DBE": _Rule("gpu.ecc", Severity.WARNING),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": _Rule("gpu.row_remap", Severity.WARNING),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": _Rule("gpu.row_remap", Severity.WARNING),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": _Rule("gpu.row_remap", Severity.CRITICAL),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _Rule("gpu.nvlink", Severity.WARNING),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": _Rule("gpu.nvlink", Severity.WARNING),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": _Rule("gpu.nvlink", Severity.WARNING),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": _Rule("gpu.nvlink", Severity.ERROR),
    "DCGM_FI_DEV_GPU_TEMP": _Rule("gpu.thermal", Severity.WARNING, "threshold", _HOT_CELSIUS),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": _Rule(
        "gpu.thermal", Severity.WARNING, "bits", _HW_THERMAL | _HW_SLOWDOWN
    ),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": _Rule(
        "gpu.thermal", Severity.WARNING, "bits", _HW_THERMAL | _HW_SLOWDOWN
    ),
}


@dataclass(frozen=True, slots=True)
class _Identity:
    """What a series' labels say about where it comes from (computed once per label set)."""

    uuid: str
    gpu_instance: str | None
    node: str | None
    namespace: str | None
    pod: str | None
    container: str | None
    gpu: str | None
    pci: str | None
    model: str | None
    driver: str | None
    xid: str | None

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> _Identity | None:
        uuid = labels.get("UUID") or labels.get("uuid")
        if not uuid:
            return None
        pci = labels.get("pci_bus_id")
        return cls(
            uuid=uuid,
            gpu_instance=labels.get("GPU_I_ID") or None,
            node=labels.get("Hostname")
            or labels.get("node")
            or labels.get("kubernetes_node")
            or None,
            namespace=labels.get("namespace") or None,
            pod=labels.get("pod") or None,
            container=labels.get("container") or None,
            gpu=labels.get("gpu") or None,
            pci=normalize_pci(pci) if pci else None,
            model=labels.get("modelName") or None,
            driver=labels.get("DCGM_FI_DRIVER_VERSION") or labels.get("driver_version") or None,
            xid=labels.get("xid") or None,
        )


@dataclass(slots=True)
class _Group:
    """One GPU at one time: the future gpu.status record."""

    ident: _Identity
    node: str
    ts: int
    ts_source: str
    line: int | None
    metrics: dict[str, float | int | None] = field(default_factory=dict)


class _Scrape:
    """Accumulates samples into per-GPU groups and decides which samples are problems."""

    def __init__(self, ctx: Context, query: str | None) -> None:
        self.ctx = ctx
        self.query = query
        self.groups: dict[tuple[str, str | None, int], _Group] = {}
        # A live collector reads one document per poll through the same context: the values
        # seen so far carry over, so a latched value is a change once, not once per poll.
        self.previous: dict[tuple[str, str | None, str, str | None], float] = ctx.memory.setdefault(
            PREVIOUS, {}
        )
        self.status_records = not ctx.memory.get(EVENTS_ONLY)
        self.gpu_nodes: dict[tuple[str, str], list[int]] = {}
        self.pods: dict[tuple[str, str], tuple[list[int], str | None]] = {}
        self.stopped = False
        self.skipped = 0

    def add(
        self,
        name: str,
        ident: _Identity,
        value: float,
        ts: int,
        ts_source: str,
        line: int | None,
    ) -> Iterator[Item]:
        node = ident.node or self.ctx.node_hint
        if node is None:
            self.stopped = True
            yield Rejected(None, "dcgm metrics without a Hostname label: pass --node NODE")
            return
        key = (ident.uuid, ident.gpu_instance, ts)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(ident, node, ts, ts_source, line)
            self._bind(ident, node, ts)
        metric = f'{name}{{xid="{ident.xid}"}}' if ident.xid else name
        group.metrics[metric] = None if value != value else _number(value)
        rule = _RULES.get(name)
        if rule is None or value != value:  # not a problem metric, or NaN
            return
        series = (ident.uuid, ident.gpu_instance, name, ident.xid)
        before = self.previous.get(series)
        self.previous[series] = value
        if rule.mode == "change":
            problem = value > 0 and value != before
        elif rule.mode == "threshold":
            problem = value >= rule.limit and (before is None or before < rule.limit)
        else:
            bits = int(value) & int(rule.limit)
            problem = bits != 0 and (before is None or bits & ~int(before) != 0)
        if problem:
            yield self._problem(rule, name, ident, node, value, before, ts, ts_source, line)

    def _bind(self, ident: _Identity, node: str, ts: int) -> None:
        span = self.gpu_nodes.get((ident.uuid, node))
        if span is None:
            self.gpu_nodes[(ident.uuid, node)] = [ts, ts]
        else:
            span[0], span[1] = min(span[0], ts), max(span[1], ts)
        if ident.namespace and ident.pod:
            pod_key = (f"{ident.namespace}/{ident.pod}", ident.uuid)
            seen = self.pods.get(pod_key)
            if seen is None:
                self.pods[pod_key] = ([ts, ts], ident.container)
            else:
                seen[0][0], seen[0][1] = min(seen[0][0], ts), max(seen[0][1], ts)

    def _problem(
        self,
        rule: _Rule,
        name: str,
        ident: _Identity,
        node: str,
        value: float,
        before: float | None,
        ts: int,
        ts_source: str,
        line: int | None,
    ) -> Item:
        number = _number(value)
        attrs: dict[str, Any] = {
            "metric": name,
            "value": number,
            "previous": None if before is None else _number(before),
        }
        severity = rule.severity
        if rule.kind == "gpu.xid":
            code = int(ident.xid) if ident.xid and ident.xid.isdigit() else int(value)
            mnemonic, fatal = xid_info(code)
            attrs.update(
                xid=code, pci=ident.pci, name=mnemonic, meaning=XID_MEANING.get(code), fatal=fatal
            )
            if name == "DCGM_FI_DEV_XID_ERRORS":
                attrs["latched"] = True
                message = f"DCGM: last Xid {code} on {ident.uuid}"
            else:
                attrs["count"] = number
                message = f"DCGM: Xid {code} seen {number} times in the window on {ident.uuid}"
            severity = xid_severity(code)
        elif rule.kind == "gpu.thermal" and rule.mode == "bits":
            mask = int(value)
            attrs["reasons"] = [label for bit, label in _THROTTLE_BITS.items() if mask & bit]
            message = f"DCGM: {ident.uuid} clocks slowed by {', '.join(attrs['reasons'])}"
        elif rule.kind == "gpu.thermal":
            message = f"DCGM: {ident.uuid} at {number} °C"
        else:
            message = f"DCGM: {name} = {number} on {ident.uuid}" + (
                f" (was {before:g})" if before is not None else ""
            )
        if ts_source != "sample":
            attrs["ts_source"] = ts_source
        if self.query:
            attrs["query"] = self.query
        return self.ctx.evidence(
            source=SOURCE,
            native_id=f"{ident.uuid}/{ident.gpu_instance or ''}/{name}/{ident.xid or ''}",
            version=f"{number}/{ts}",
            ts=ts,
            kind=rule.kind,
            message=message,
            severity=severity,
            node=node,
            gpu_uuid=ident.uuid,
            namespace=ident.namespace,
            pod=ident.pod,
            container=ident.container,
            attrs=attrs,
            line=line,
        )

    def finish(self) -> Iterator[Item]:
        """The gpu.status records and the bindings, once every sample has been read."""
        if self.skipped:
            key = "dcgm samples without a GPU UUID"
            self.ctx.skipped[key] = self.ctx.skipped.get(key, 0) + self.skipped
        for group in self.groups.values() if self.status_records else ():
            ident = group.ident
            attrs: dict[str, Any] = {
                "metrics": group.metrics,
                "gpu": ident.gpu,
                "pci": ident.pci,
                "model": ident.model,
                "driver": ident.driver,
            }
            if ident.gpu_instance:
                attrs["gpu_instance"] = ident.gpu_instance
            if group.ts_source != "sample":
                attrs["ts_source"] = group.ts_source
            if self.query:
                attrs["query"] = self.query
            yield self.ctx.evidence(
                source=SOURCE,
                native_id=f"{ident.uuid}/{ident.gpu_instance or ''}",
                version=str(group.ts),
                ts=group.ts,
                kind="gpu.status",
                message=f"GPU {ident.gpu or '?'} {ident.uuid} on {group.node}: "
                f"{len(group.metrics)} metrics"
                + (f", held by {ident.namespace}/{ident.pod}" if ident.pod else ""),
                severity=Severity.DEBUG,
                node=group.node,
                gpu_uuid=ident.uuid,
                namespace=ident.namespace,
                pod=ident.pod,
                container=ident.container,
                attrs=attrs,
                line=group.line,
            )
        pcis = {g.ident.uuid: g.ident for g in self.groups.values()}
        for (uuid, node), (first, last) in self.gpu_nodes.items():
            ident = pcis[uuid]
            yield Binding(
                "gpu.node", uuid, node, first, last, {"pci": ident.pci, "model": ident.model}
            )
        for (pod, uuid), ((first, last), container) in self.pods.items():
            yield Binding("pod.gpu", pod, uuid, first, last, {"container": container})


def _number(value: float) -> float | int:
    """Integral values as ints (counters and codes read better), NaN and ±Inf kept as floats."""
    return int(value) if value.is_integer() else value


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _parse_labels(text: str) -> dict[str, str] | None:
    """`a="x",b="y\\"z"` → dict; None when the text is not a label set."""
    labels: dict[str, str] = {}
    pos, end = 0, len(text.rstrip())
    while pos < end:
        match = _LABEL.match(text, pos)
        if match is None:
            return None
        labels[match.group(1)] = _unescape(match.group(2))
        pos = match.end()
    return labels


def looks_like_prometheus_text(first_lines: list[str]) -> bool:
    """A dcgm-exporter scrape: DCGM metric families or samples among the first lines."""
    return any(line.startswith(("# HELP DCGM_", "# TYPE DCGM_", "DCGM_")) for line in first_lines)


def _default_time(ctx: Context) -> tuple[int, str] | None:
    if ctx.options.at is not None:
        return ctx.options.at, "at"
    if ctx.mtime_ms is not None:
        return ctx.mtime_ms, "mtime"
    return None


def parse_prometheus_text(ctx: Context, lines: Iterable[tuple[int, str]]) -> Iterator[Item]:
    """A dcgm-exporter scrape (`curl :9400/metrics`), possibly several with timestamps."""
    scrape = _Scrape(ctx, None)
    identities: dict[str | None, _Identity | None] = {}
    default: tuple[int, str] | None = None
    sample_match = _SAMPLE.match
    for number, text in lines:
        if not text or text[0] == "#" or text.isspace():
            continue
        match = sample_match(text)
        if match is None:
            yield Rejected(number, "not a Prometheus sample line", text.encode())
            continue
        name, label_text, value_text, ts_text = match.groups()
        if label_text in identities:
            ident = identities[label_text]
        else:
            labels = _parse_labels(label_text) if label_text else {}
            if labels is None:
                yield Rejected(number, "malformed label set", text.encode())
                continue
            ident = identities[label_text] = _Identity.of(labels)
        if ident is None:
            scrape.skipped += 1
            continue
        try:
            value = float(value_text)
        except ValueError:
            yield Rejected(number, f"sample value {value_text!r} is not a number", text.encode())
            continue
        if ts_text is not None:
            ts, ts_source = int(ts_text), "sample"
        else:
            if default is None:
                default = _default_time(ctx)
                if default is None:
                    yield Rejected(None, "dcgm scrape without timestamps: pass --at TIME")
                    return
            ts, ts_source = default
        yield from scrape.add(name, ident, value, ts, ts_source, number)
        if scrape.stopped:
            return
    yield from scrape.finish()


# --- Prometheus HTTP API --------------------------------------------------------------------


def looks_like_prometheus_api(doc: Any) -> bool:
    """`/api/v1/query` or `/api/v1/query_range` output, or its error answer (so the person
    importing it reads Prometheus's error rather than "unknown format")."""
    if not isinstance(doc, dict) or "status" not in doc:
        return False
    if doc.get("status") == "error" and "errorType" in doc:
        return True
    data = doc.get("data")
    return isinstance(data, dict) and "resultType" in data and "result" in data


def parse_prometheus_api(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """An instant vector or a range matrix of dcgm-exporter series."""
    if doc.get("status") != "success":
        yield Rejected(line, f"Prometheus query failed: {doc.get('error') or doc.get('status')}")
        return
    data = doc.get("data") or {}
    result_type = data.get("resultType")
    if result_type not in ("vector", "matrix") or not isinstance(data.get("result"), list):
        yield Rejected(line, f"Prometheus resultType {result_type!r} has no series to read")
        return
    query = doc.get("query") or ctx.path_hints.get("query")
    query = query if isinstance(query, str) else None
    named = _METRIC_IN_QUERY.findall(query) if query else []
    implied = named[0] if len(set(named)) == 1 else None
    scrape = _Scrape(ctx, query)
    for series in data["result"]:
        metric = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(metric, dict):
            yield Rejected(line, "series without a metric object")
            continue
        name = metric.get("__name__") or implied
        if not isinstance(name, str):
            yield Rejected(line, "series without __name__ and no single metric in the query")
            continue
        ident = _Identity.of({k: v for k, v in metric.items() if isinstance(v, str)})
        if ident is None:
            scrape.skipped += 1
            continue
        points = series.get("values") if result_type == "matrix" else [series.get("value")]
        for point in points or ():
            try:
                stamp, value_text = point
                ts = round(float(stamp) * 1000)
                value = float(value_text)
            except (TypeError, ValueError):
                yield Rejected(line, f"{name}: bad sample {point!r}", orjson.dumps(series))
                continue
            yield from scrape.add(name, ident, value, ts, "sample", line)
            if scrape.stopped:
                return
    yield from scrape.finish()
