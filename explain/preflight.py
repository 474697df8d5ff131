"""Preflight: is this node safe to start a job on?

The infrastructure team whyjob grew from fixed its maintenance storms by starting a job only
on hosts with no scheduled maintenance in the next hour. This answers that question from the
index, for one node: `unsafe` with the reasons (maintenance or retirement inside the window, a
spot interruption or rebalance notice, an autoscaler taking the node, hardware-class GPU faults
or NotReady within the look-back), `safe` when the node has evidence and none of it is a
reason, `unknown` when the index knows nothing about the node.

What counts as a notice or a hardware fault is the rule packs' own signals (`notice.*`,
`xid.hardware`, `gpu.ecc`, ...), so a team that extends the rules extends preflight too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from whyjob.core.evidence import Evidence
from whyjob.core.index import Index
from whyjob.core.timeutil import format_duration, format_ts
from whyjob.explain.matching import Matcher
from whyjob.explain.ruleset import RuleSet

__all__ = [
    "FAULTS",
    "IMMINENT",
    "LOOKBACK_MS",
    "PREFLIGHT_KEYS",
    "WINDOWED",
    "WINDOW_MS",
    "Check",
    "Preflight",
    "node_key",
    "node_records",
    "preflight",
    "preflight_defaults",
    "split_node_key",
]

WINDOW_MS: Final = 3_600_000  # maintenance starting this soon makes a node unsafe
LOOKBACK_MS: Final = 86_400_000  # faults this recent make it unsafe
# The `preflight:` section of the config file (docs/configuration.md), in seconds.
PREFLIGHT_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "window": ("duration", WINDOW_MS / 1000),
    "lookback": ("duration", LOOKBACK_MS / 1000),
}

# Notices dated by their window (known before it starts): unsafe when the window overlaps
# [now, now + window].
WINDOWED: Final = {
    "notice.maintenance": "scheduled maintenance",
    "notice.host-maintenance-event": "host maintenance",
    "notice.terminate": "scheduled termination",
    "notice.user-host-action": "reboot or redeploy a person scheduled",
}
# Notices and states dated when they were seen, meaning "leaving now": unsafe while recent.
IMMINENT: Final = {
    "taint.maintenance": "maintenance taint",
    "notice.spot": "spot interruption notice",
    "notice.rebalance": "spot rebalance recommendation",
    "taint.spot": "spot interruption taint",
    "taint.scale-in": "autoscaler removal taint",
    "event.scale-down": "autoscaler removing the node",
    "event.nth-rebalance": "spot rebalance recommendation",
}
# Faults of the node and its GPUs: unsafe within the look-back.
FAULTS: Final = {
    "xid.hardware": "hardware-class Xid",
    "xid.after-hardware": "Xid after a hardware-class Xid",
    "gpu.ecc": "uncorrectable ECC or row-remap failure",
    "gpu.nvlink": "NVLink errors",
    "gpu.unhealthy": "GPU marked Unhealthy by the device plugin",
    "kernel.gpu-fault": "NVRM or NVSwitch fault",
    "gpu.fabric-down": "NVSwitch fabric down (Fabric Manager)",
    "node.not-ready": "NotReady",
    "notice.host-error": "the cloud host failed under the node",
}
_IMMINENT_MS: Final = 2 * 3_600_000  # a spot or removal notice older than this is history
_HORIZON_MS: Final = 30 * 86_400_000  # how far ahead a scheduled window is looked for
# A window announced without an end (an Azure Reboot or Redeploy, an EC2 retirement) is taken
# as over this long after it opened: Azure's own events are done within minutes of NotBefore.
_OPEN_WINDOW_MS: Final = 2 * 3_600_000
_ENDED: Final = frozenset({"completed", "canceled", "cancelled", "Completed", "Canceled"})


@dataclass(frozen=True, slots=True)
class Check:
    """One reason, or one thing worth knowing that is not a reason (`blocking` false)."""

    code: str  # the rule signal that found it
    what: str
    blocking: bool
    message: str
    at: int
    until: int | None = None
    count: int = 1
    evidence: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "what": self.what,
            "blocking": self.blocking,
            "message": self.message,
            "at": format_ts(self.at),
            "until": format_ts(self.until) if self.until is not None else None,
            "count": self.count,
            "evidence": self.evidence,
        }


@dataclass(slots=True)
class Preflight:
    node: str
    now: int
    window_ms: int
    lookback_ms: int
    records: int = 0  # evidence about the node, its instance and GPUs known by `now`
    known: bool = False  # the index had heard of the node by `now` (records or bindings)
    checks: list[Check] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if any(c.blocking for c in self.checks):
            return "unsafe"
        return "safe" if self.known else "unknown"

    @property
    def exit_code(self) -> int:
        return {"safe": 0, "unsafe": 1, "unknown": 2}[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "whyjob.preflight/v1",
            "node": self.node,
            "verdict": self.verdict,
            "at": format_ts(self.now),
            "window": format_duration(self.window_ms),
            "lookback": format_duration(self.lookback_ms),
            "records": self.records,
            "reasons": [c.to_json() for c in self.checks if c.blocking],
            "notes": [c.to_json() for c in self.checks if not c.blocking],
        }


def preflight(
    index: Index,
    rules: RuleSet,
    node: str,
    *,
    now: int,
    window_ms: int = WINDOW_MS,
    lookback_ms: int = LOOKBACK_MS,
) -> Preflight:
    """The preflight of one node at `now`: notices for [now, now + window], faults since
    now - lookback."""
    result = Preflight(node, now, window_ms, lookback_ms)
    matcher = Matcher(rules)
    faults: dict[str, list[Evidence]] = {}
    # The first of each within the last two hours, and how often it was seen since (a taint
    # is seen again and again): the same notice keeps the same time, message and evidence.
    imminent: dict[str, Evidence] = {}
    sightings: Counter[str] = Counter()
    windows: set[int] = set()  # one event told by two sources is one reason
    for ev in node_records(index, node, now - lookback_ms, now + _HORIZON_MS):
        signals = matcher.match(ev)
        # What was known at `now`: what had happened, and the windows announced ahead.
        result.records += ev.ts <= now or any(s in WINDOWED for s in signals)
        for signal in signals:
            if signal in WINDOWED and _minutes(ev) not in windows:
                told = _windowed(signal, ev, now, window_ms)
                if told:
                    windows.add(_minutes(ev))
                result.checks.extend(told)
            elif signal in IMMINENT and now - _IMMINENT_MS <= ev.ts <= now:
                imminent.setdefault(signal, ev)  # records come oldest first
                sightings[signal] += 1
            elif signal in FAULTS and ev.ts <= now:
                faults.setdefault(signal, []).append(ev)
    result.checks.extend(
        replace(_check(s, IMMINENT[s], True, ev), count=sightings[s]) for s, ev in imminent.items()
    )
    result.known = result.records > 0 or _seen_before(index, node, now)
    for signal, found in faults.items():
        last = max(found, key=lambda ev: ev.ts)
        what = FAULTS[signal]
        xids = Counter(str(ev.attrs.get("xid")) for ev in found if ev.attrs.get("xid"))
        detail = f" (Xid {', '.join(f'{x} x{n}' for x, n in sorted(xids.items()))})" if xids else ""
        message = (
            f"{what}{detail}: {len(found)} in the last {format_duration(lookback_ms)}, "
            f"latest {format_ts(last.ts)}: {last.message[:160]}"
        )
        result.checks.append(
            Check(signal, what, True, message, last.ts, None, len(found), last.public_id)
        )
    result.checks.sort(key=lambda c: (not c.blocking, c.at))
    return result


def preflight_defaults(config: Path | None) -> tuple[int, int]:
    """The window and look-back (ms) of the config file's `preflight:` section."""
    from whyjob.core.configfile import ConfigFile

    if config is None:
        values = {k: d for k, (_, d) in PREFLIGHT_KEYS.items()}
    else:
        f = ConfigFile(config)
        values = f.section(f.top.get("preflight"), PREFLIGHT_KEYS, "preflight")
    return int(values["window"] * 1000), int(values["lookback"] * 1000)


def _windowed(signal: str, ev: Evidence, now: int, window_ms: int) -> list[Check]:
    """A notice with a window: blocking when it overlaps the start window, a note when later."""
    if str(ev.attrs.get("state") or "") in _ENDED:
        return []
    start = ev.ts
    end = ev.ts_end if ev.ts_end is not None else start + _OPEN_WINDOW_MS
    if end < now:
        return []  # over
    what = WINDOWED[signal]
    if start > now + window_ms:
        note = f"after the window, in {format_duration(start - now)}"
        return [_check(signal, what, False, ev, note=note)]
    note = f"starts in {format_duration(start - now)}" if start > now else "under way"
    return [_check(signal, what, True, ev, note=note)]


def _minutes(ev: Evidence) -> int:
    """A notice's start to the minute: two sources stamp one event a few seconds apart, and one
    may give an end where the other gives none (AWS Health and the instance's own event)."""
    return ev.ts // 60_000


def _check(signal: str, what: str, blocking: bool, ev: Evidence, note: str = "") -> Check:
    span = f"{format_ts(ev.ts)}" + (f" to {format_ts(ev.ts_end)}" if ev.ts_end else "")
    message = f"{what} ({span}{'; ' + note if note else ''}): {ev.message[:160]}"
    return Check(signal, what, blocking, message, ev.ts, ev.ts_end, 1, ev.public_id)


def node_key(node: str, cluster: str | None) -> str:
    """How a node is named where several clusters share an index: `gpu-node-0@us-east`, as an
    experiment is `ml/run9@us-east`; a node of no cluster by its name alone."""
    return f"{node}@{cluster}" if cluster else node


def split_node_key(key: str) -> tuple[str, str | None]:
    """The node name and cluster of a `node_key` (None: any cluster, when none is named)."""
    node, _, cluster = key.partition("@")
    return node, cluster or None


def _seen_before(index: Index, key: str, now: int) -> bool:
    """The node ran pods, was bound to an instance or held GPUs before `now`: known, though
    nothing about it falls in the look-back."""
    node, cluster = split_node_key(key)
    bound = (
        index.bindings("node.instance", subjects=[node], cluster=cluster)
        + index.bindings("gpu.node", objects=[node], cluster=cluster)
        + index.bindings("pod.node", objects=[node], cluster=cluster)
    )
    return any(b.first_ts <= now for b in bound)


def node_records(index: Index, key: str, t0: int, t1: int) -> list[Evidence]:
    """What the index holds about the node itself, the instance behind it and its GPUs; of its
    cluster only when the key names one (`node_key`). Records about a pod (which carry its
    namespace) are that pod's tenant's, never read here."""
    node, cluster = split_node_key(key)
    instances = {
        b.object for b in index.bindings("node.instance", subjects=[node], cluster=cluster)
    }
    gpus = {b.subject for b in index.bindings("gpu.node", objects=[node], cluster=cluster)}
    found = index.entity_evidence("node", [node], t0, t1)
    found += index.entity_evidence("instance_id", instances, t0, t1)
    found += index.entity_evidence("gpu_uuid", gpus, t0, t1)
    unique = {
        ev.id: ev
        for ev in found
        if ev.namespace is None and (cluster is None or ev.cluster in (None, cluster))
    }
    return sorted(unique.values(), key=lambda ev: ev.ts)
