"""Warnings before the fall: a running experiment on a node the cloud is about to take.

Each round, the explanations of the experiments `whyjob serve` watches carry `at_risk`
(explain/risk.py): a node under running ranks with a maintenance window about to open, a spot
or removal notice, or GPUs failing under the run. Each (experiment, node, notice) fires once to
every sink, is renewed for the sinks that forget (Alertmanager), and is resolved when it no
longer holds: the window passed, the job moved or finished, the notice was canceled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from whyjob.api.alerts import Alert, ended, named, revive, send
from whyjob.api.alertstate import AlertState, MemoryAlertState
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation

__all__ = ["RiskAlert", "RiskWatch", "risk_alerts"]


@dataclass(frozen=True, slots=True)
class RiskAlert:
    namespace: str
    experiment: str
    node: str
    ranks: tuple[str, ...]
    reason: str  # the first reason's rule signal (notice.maintenance, xid.hardware, ...)
    what: str
    notice: str  # the evidence id of the notice: one warning per experiment and notice
    starts_ms: int
    ends_ms: int | None
    until: str  # "in 40m 00s" or "now"
    gpu_hours_at_risk: float
    last_checkpoint_ms: int | None
    advice: str
    url: str
    pod_uid: str = ""  # one pod at risk: its labels may name the owner to tell
    cluster: str = ""  # where several clusters share the index: two run9s are two warnings

    @property
    def key(self) -> tuple[str, ...]:
        return (
            self.namespace,
            self.experiment,
            self.node,
            self.notice,
            *((self.cluster,) if self.cluster else ()),
        )

    def alertmanager(self, ends: int | None) -> dict[str, Any]:
        checkpoint = (
            format_ts(self.last_checkpoint_ms) if self.last_checkpoint_ms is not None else "none"
        )
        document: dict[str, Any] = {
            "labels": {
                "alertname": "WhyjobExperimentAtRisk",
                "namespace": self.namespace,
                "experiment": self.experiment,
                "node": self.node,
                "reason": self.reason,
                "severity": "warning",
                **({"cluster": self.cluster} if self.cluster else {}),
            },
            "annotations": {
                "summary": f"{self.experiment}: {self.what} on {self.node} {self.until} "
                f"(ranks {', '.join(self.ranks)})",
                "window_start": format_ts(self.starts_ms),
                "window_end": format_ts(self.ends_ms) if self.ends_ms is not None else "",
                "gpu_hours_at_risk": f"{self.gpu_hours_at_risk:g}",
                "last_checkpoint": checkpoint,
                "advice": self.advice,
            },
            "generatorURL": self.url,
        }
        return ended(document, ends)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "at_risk",
            "namespace": self.namespace,
            "experiment": self.experiment,
            "node": self.node,
            "ranks": list(self.ranks),
            "reason": self.reason,
            "what": self.what,
            "notice": self.notice,
            "starts": format_ts(self.starts_ms),
            "ends": format_ts(self.ends_ms) if self.ends_ms is not None else None,
            "in": self.until,
            "gpu_hours_at_risk": self.gpu_hours_at_risk,
            "last_checkpoint": format_ts(self.last_checkpoint_ms)
            if self.last_checkpoint_ms is not None
            else None,
            "advice": self.advice,
            "url": self.url,
            "cluster": self.cluster or None,
        }


def risk_alerts(explanation: Explanation, url: str) -> list[RiskAlert]:
    """One alert per node at risk under this experiment's running ranks."""
    experiment = explanation.experiment
    out = []
    for risk in explanation.at_risk:
        first = risk.reasons[0]
        out.append(
            RiskAlert(
                namespace=experiment.namespace,
                experiment=experiment.name,
                node=risk.node,
                ranks=tuple(risk.ranks),
                reason=first.code,
                what=first.what,
                notice=first.evidence,
                starts_ms=risk.starts,
                ends_ms=risk.ends,
                until="now" if risk.until == "now" else f"in {risk.until}",
                gpu_hours_at_risk=round(risk.gpu_hours, 1),
                last_checkpoint_ms=risk.last_checkpoint,
                advice=risk.advice,
                url=url + (f"?cluster={experiment.cluster}" if experiment.cluster else ""),
                pod_uid=risk.pod_uids[0] if risk.pod_uids else "",
                cluster=experiment.cluster or "",
            )
        )
    return out


class RiskWatch:
    """Fires each new warning once, renews the firing ones for sinks that forget, and
    resolves the ones that no longer hold. One failing sink never keeps the others from hearing."""

    def __init__(
        self,
        sinks: Sequence[Any],
        *,
        url_for: Callable[[str, str], str] = lambda ns, name: "",
        on_error: Callable[[str], object] = lambda message: None,
        state: AlertState | None = None,
    ) -> None:
        self.sinks = sinks
        self.url_for = url_for
        self.on_error = on_error
        self.state: AlertState = state or MemoryAlertState()
        self._lock = threading.Lock()

    @property
    def firing(self) -> dict[tuple[str, ...], RiskAlert]:
        """The warnings firing now, as the state remembers them (another replica's too)."""
        out = {}
        for body in self.state.load("risk").values():
            alert = revive(
                RiskAlert, {**body, "ranks": tuple(body.get("ranks") or ())}, self.on_error
            )
            if alert is not None:
                out[alert.key] = alert
        return out

    def check(self, explanations: Iterable[Explanation]) -> list[str]:
        """One round; returns what happened ("warned ns/name on node", "cleared ...")."""
        current = {
            alert.key: alert
            for explanation in explanations
            for alert in risk_alerts(
                explanation,
                self.url_for(explanation.experiment.namespace, explanation.experiment.name),
            )
        }
        events: list[str] = []
        with self._lock:
            firing = self.firing
            # Saved before anything is sent (as the loop watch does): a failed save sends nothing.
            self.state.save("risk", {"\x1f".join(k): asdict(a) for k, a in current.items()})
            for key, alert in current.items():
                renewal = key in firing
                self._send("fire", alert, renewal=renewal)
                if not renewal:
                    events.append(f"warned {named(alert)} on {alert.node}")
            for key, alert in firing.items():
                if key not in current:
                    self._send("resolve", alert)
                    events.append(f"cleared {named(alert)} on {alert.node}")
        return events

    def _send(self, what: str, alert: Alert, renewal: bool = False) -> None:
        send(self.sinks, what, alert, renewal=renewal, on_error=self.on_error)
