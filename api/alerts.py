"""Stuck restart loops: experiments that restart and restart without getting anywhere.

An experiment loops when at least `min_restarts` of its runs failed on their own (first
dominoes, not collateral ranks) within `window`, and none of them got further than the one
before (no new checkpoint, no later step). The alert says what kind of loop it is (the same
user error, a maintenance storm, a bad node, unschedulable) and whether retrying can help,
both from the experiment's Explanation. It fires to every sink, is repeated while it lasts
(Alertmanager forgets alerts it does not hear about again), and is resolved as soon as a run
makes progress or the failures fall out of the window.

Sinks: Alertmanager's API v2, a generic webhook (JSON), and Slack (slack.py).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol, TypeVar

import orjson

from whyjob.api.alertstate import AlertState, MemoryAlertState
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation
from whyjob.explain.progress import marks, progressed

__all__ = [
    "Alert",
    "AlertmanagerSink",
    "LoopAlert",
    "LoopDetector",
    "Sink",
    "WebhookSink",
    "ended",
    "loop_alert",
    "named",
    "revive",
    "send",
]

_A = TypeVar("_A")


@dataclass(frozen=True, slots=True)
class LoopAlert:
    namespace: str
    experiment: str
    kind: str
    restarts: int
    retry_helps: bool | None
    reason: str
    summary: str
    category: str
    gpu_hours_lost: float
    url: str
    since_ms: int
    cluster: str = ""  # where several clusters share the index: two run9s are two alerts

    @property
    def key(self) -> tuple[str, ...]:
        return (self.namespace, self.experiment, *((self.cluster,) if self.cluster else ()))

    def alertmanager(self, ends: int | None) -> dict[str, Any]:
        document: dict[str, Any] = {
            "labels": {
                "alertname": "WhyjobRestartLoop",
                "namespace": self.namespace,
                "experiment": self.experiment,
                "loop_kind": self.kind,
                "severity": "warning" if self.retry_helps else "critical",
                **({"cluster": self.cluster} if self.cluster else {}),
            },
            "annotations": {
                "summary": f"{self.experiment} restarted {self.restarts} times without progress ({self.kind})",
                "description": self.summary,
                "retry_helps": "unknown"
                if self.retry_helps is None
                else ("yes" if self.retry_helps else "no"),
                "retry_reason": self.reason,
                "gpu_hours_lost": f"{self.gpu_hours_lost:g}",
            },
            "startsAt": format_ts(self.since_ms),
            "generatorURL": self.url,
        }
        return ended(document, ends)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "experiment": self.experiment,
            "kind": self.kind,
            "restarts": self.restarts,
            "retry_helps": self.retry_helps,
            "reason": self.reason,
            "summary": self.summary,
            "category": self.category,
            "gpu_hours_lost": self.gpu_hours_lost,
            "url": self.url,
            "since": format_ts(self.since_ms),
            "cluster": self.cluster or None,
        }


def ended(document: dict[str, Any], ends: int | None) -> dict[str, Any]:
    """An Alertmanager alert, resolved at `ends` when given (firing with no end otherwise)."""
    if ends is not None:
        document["endsAt"] = format_ts(ends)
    return document


def loop_alert(
    explanation: Explanation, *, min_restarts: int, window_s: float, now_ms: int, url: str
) -> LoopAlert | None:
    """The alert this experiment deserves now, or None."""
    roots = [
        a
        for a in explanation.attempts
        if a.failed
        and a.category != "peer.failure"
        and a.ended_at is not None
        and now_ms - a.ended_at <= window_s * 1000
    ]
    roots.sort(key=lambda a: a.ended_at or 0)
    if len(roots) < min_restarts:
        return None
    start = roots[0].started_at or 0
    generations = marks(explanation.attempts)
    before = [m for m in generations if (m.started or 0) <= start]
    if before and any(progressed(before[-1], m) for m in generations if (m.started or 0) > start):
        return None  # a later generation got further: training is moving, however bumpily
    loop, retry = explanation.loop, explanation.retry_helps
    experiment = explanation.experiment
    return LoopAlert(
        namespace=experiment.namespace,
        experiment=experiment.name,
        kind=loop.kind or "mixed",
        restarts=len(roots),
        retry_helps=retry.value,
        reason=retry.reason,
        summary=explanation.verdict.summary,
        category=explanation.verdict.category,
        gpu_hours_lost=round(explanation.gpu_hours.lost, 1),
        url=url + (f"?cluster={experiment.cluster}" if experiment.cluster else ""),
        since_ms=roots[0].ended_at or now_ms,
        cluster=experiment.cluster or "",
    )


class Alert(Protocol):
    """What a sink sends: a loop (here) or a warning before the fall (api/risk.py)."""

    @property
    def namespace(self) -> str: ...

    @property
    def experiment(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    def alertmanager(self, ends: int | None) -> dict[str, Any]: ...

    def to_json(self) -> dict[str, Any]: ...


class Sink(Protocol):
    """Told when a loop starts and ends; a sink with `renews = True` (Alertmanager, which
    forgets an alert it stops hearing about) is told again at every check while it lasts."""

    renews: bool

    def fire(self, alert: LoopAlert) -> None: ...

    def resolve(self, alert: LoopAlert) -> None: ...


def _post(url: str, document: Any, timeout_s: float = 10.0) -> None:
    request = urllib.request.Request(
        url, orjson.dumps(document), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


class AlertmanagerSink:
    """POST /api/v2/alerts: firing with no end (renewed every check), resolved with endsAt now."""

    renews = True

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/api/v2/alerts"

    def fire(self, alert: Alert) -> None:
        _post(self.url, [alert.alertmanager(None)])

    def resolve(self, alert: Alert) -> None:
        _post(self.url, [alert.alertmanager(int(time.time() * 1000))])


class WebhookSink:
    """A POST of `{"status": "firing" | "resolved", "alert": {...}}` to any URL."""

    renews = False

    def __init__(self, url: str) -> None:
        self.url = url

    def fire(self, alert: Alert) -> None:
        _post(self.url, {"status": "firing", "alert": alert.to_json()})

    def resolve(self, alert: Alert) -> None:
        _post(self.url, {"status": "resolved", "alert": alert.to_json()})


class LoopDetector:
    """Checks the experiments it is given; fires new loops, renews firing ones, resolves the
    ones that ended. One failing sink never keeps the others from hearing."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        min_restarts: int = 3,
        window_s: float = 6 * 3600,
        url_for: Callable[[str, str], str] = lambda ns, name: "",
        on_error: Callable[[str], object] = lambda message: None,
        state: AlertState | None = None,
    ) -> None:
        self.sinks = sinks
        self.min_restarts = min_restarts
        self.window_s = window_s
        self.url_for = url_for
        self.on_error = on_error
        self.state: AlertState = state or MemoryAlertState()
        self._lock = threading.Lock()

    @property
    def firing(self) -> dict[tuple[str, ...], LoopAlert]:
        """The loops firing now, as the state remembers them (another replica's too)."""
        alerts = (
            revive(LoopAlert, body, self.on_error) for body in self.state.load("loop").values()
        )
        return {alert.key: alert for alert in alerts if alert is not None}

    def check(self, explanations: Iterable[Explanation], now_ms: int | None = None) -> list[str]:
        """One round; returns what happened ("fired ns/name", "resolved ns/name")."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        current: dict[tuple[str, ...], LoopAlert] = {}
        for explanation in explanations:
            experiment = explanation.experiment
            alert = loop_alert(
                explanation,
                min_restarts=self.min_restarts,
                window_s=self.window_s,
                now_ms=now,
                url=self.url_for(experiment.namespace, experiment.name),
            )
            if alert is not None:
                current[alert.key] = alert
        events: list[str] = []
        with self._lock:
            firing = self.firing
            for key, alert in list(current.items()):
                before = firing.get(key)
                if before is not None:
                    # The same episode: keep its start, though old failures leave the window.
                    current[key] = replace(alert, since_ms=before.since_ms)
            # Saved before anything is sent: a save that fails sends nothing, and the next round
            # tries again from the state as it was, rather than firing everything as new.
            self.state.save("loop", {"\x1f".join(k): asdict(a) for k, a in current.items()})
            for key, alert in current.items():
                self._send("fire", alert, renewal=key in firing)
                if key not in firing:
                    events.append(f"fired {named(alert)}")
            for key, alert in firing.items():
                if key not in current:
                    self._send("resolve", alert)
                    events.append(f"resolved {named(alert)}")
        return events

    def _send(self, what: str, alert: LoopAlert, renewal: bool = False) -> None:
        send(self.sinks, what, alert, renewal=renewal, on_error=self.on_error)


def named(alert: Alert) -> str:
    """`namespace/experiment`, with `@cluster` where the alert names one."""
    return f"{alert.namespace}/{alert.experiment}" + (f"@{alert.cluster}" if alert.cluster else "")


def revive(kind: type[_A], body: Mapping[str, Any], on_error: Callable[[str], object]) -> _A | None:
    """A stored alert as this whyjob's `kind`: fields a newer or older whyjob wrote that this
    one does not know are left out, missing ones take their defaults; one it cannot read at all
    is reported and skipped, never a watch stuck on it for good."""
    known = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    try:
        return kind(**{k: v for k, v in body.items() if k in known})
    except TypeError as exc:
        on_error(f"a stored {kind.__name__} could not be read, skipped: {exc}")
        return None


def send(
    sinks: Sequence[Any],
    what: str,
    alert: Alert,
    *,
    renewal: bool,
    on_error: Callable[[str], object],
) -> None:
    """`fire` or `resolve` an alert at every sink (a renewal only at those that forget); one
    sink that is down never keeps the others from hearing."""
    for sink in sinks:
        if renewal and not getattr(sink, "renews", False):
            continue
        try:
            getattr(sink, what)(alert)
        except Exception as exc:  # a sink that is down must not silence the others
            on_error(f"{type(sink).__name__} {what} {alert.namespace}/{alert.experiment}: {exc}")
