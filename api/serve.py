"""Putting `whyjob serve` together from the config file: access, the app, the loop watch, the
warnings before the fall, Slack."""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from fastapi import FastAPI

from whyjob.api.access import Access, Principal, TrustedProxy, digest, load_tokens
from whyjob.api.alerts import AlertmanagerSink, LoopDetector, Sink, WebhookSink
from whyjob.api.alertstate import AlertState, IndexAlertState, MemoryAlertState
from whyjob.api.app import ApiOptions, create_app, open_audit
from whyjob.api.risk import RiskWatch
from whyjob.api.service import Service
from whyjob.api.slack import MemoryThreadStore, SlackNotifier, SqliteThreadStore
from whyjob.api.slackwire import (
    SlackLoopSink,
    SlackRiskSink,
    notify_failures,
    routes_from,
    slash_command,
)
from whyjob.explain.model import Explanation
from whyjob.explain.preflight import PREFLIGHT_KEYS
from whyjob.explain.ruleset import RuleSet

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["Served", "build"]

_EVERYTHING = Principal("loop-watch", frozenset({"*"}), via="internal")


@dataclass
class Served:
    app: FastAPI
    listen: tuple[str, int]
    detector: LoopDetector | None
    service: Service
    notes: list[str]
    notify: Callable[[list[Explanation], int], int] | None = None
    risk: RiskWatch | None = None
    leader: Any = None  # a LeaseElector: among replicas, only its holder sends

    _sending: bool = False  # as the last round found the lease (to say when that changes)

    def _may_send(self, log: TextIO) -> bool:
        """Without a Lease, always; with one, while this replica holds it (its own thread
        renews it, `LeaseElector.start`), asked again before each kind of message."""
        if self.leader is None:
            return True
        holding = bool(self.leader.holding)
        if holding != self._sending:
            log.write(
                f"whyjob serve: holding the lease as {self.leader.identity}; sending\n"
                if holding
                else "whyjob serve: not holding the lease; not sending\n"
            )
            self._sending = holding
        return holding

    def check(self, window_s: float, log: TextIO = sys.stderr, now_ms: int | None = None) -> None:
        """One round: the experiments seen within the window, their loops and new failures.
        With a Lease, a replica that does not hold it sends nothing."""
        if not self._may_send(log):
            return
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        names = self.service.recent(now - int(window_s * 1000))
        explanations = [
            self.service.explanation(_EVERYTHING, ns, name, current=True, cluster=cluster)
            for ns, name, cluster in names
        ]
        # Failures first: their first message starts the experiment's thread, where the loop
        # alert then goes.
        if self.notify is not None and self._may_send(log):
            posted = self.notify(explanations, now)
            if posted:
                log.write(f"whyjob serve: {posted} Slack notification(s)\n")
        if self.detector is not None and self._may_send(log):
            for event in self.detector.check(explanations, now):
                log.write(f"whyjob serve: loop {event}\n")
        if self.risk is not None and self._may_send(log):
            for event in self.risk.check(explanations):
                log.write(f"whyjob serve: at risk: {event}\n")

    def watch(
        self, interval_s: float, window_s: float, stop: threading.Event, log: TextIO = sys.stderr
    ) -> None:
        """`check` every `interval_s` until stopped; a failed round is reported, not fatal.
        With a Lease, its renewals run on their own thread meanwhile and give it up at the end."""
        if self.leader is not None:
            self.leader.start(stop, lambda message: log.write(f"whyjob serve: {message}\n"))
        while not stop.is_set():
            try:
                self.check(window_s, log)
            except Exception as exc:  # the watch goes on; the next round tries again
                log.write(f"whyjob serve: watch: {type(exc).__name__}: {exc}\n")
            stop.wait(interval_s)
        if self.leader is not None:
            self.leader.join()  # it gives the Lease up as it ends


def build(
    config: Mapping[str, Mapping[str, Any]],
    index: Path | ElasticSettings,
    rules: RuleSet,
    *,
    slack_client: Any = None,
    lease_client: Any = None,
) -> Served:
    """The app and its watch from the config sections; `slack_client` replaces the WebClient
    that `slack.token` would make, `lease_client` the Kubernetes client of `api.lease` (tests
    aim them at stand-ins)."""
    api, alerts, slack = config["api"], config["alerts"], config["slack"]
    host, port = api["listen"]
    public = (api["public_url"] or f"http://{host}:{port}").rstrip("/")
    notes: list[str] = []
    tokens = load_tokens(api["tokens"]) if api["tokens"] else {}
    proxy = (
        TrustedProxy(
            api["proxy_cidrs"], api["groups"], api["proxy_user_header"], api["proxy_groups_header"]
        )
        if api["proxy_cidrs"]
        else None
    )
    if not tokens and proxy is None:
        # Nothing configured: a token for this run only, so the server is never open to all.
        token = secrets.token_urlsafe(24)
        tokens = {digest(token): Principal("local", frozenset({"*"}))}
        notes.append(
            f"no api.tokens or proxy configured: this run's token (reads everything) is {token}"
        )
        notes.append(f"open {public}/login?token={token}")
    preflight = config.get("preflight") or {k: d for k, (_, d) in PREFLIGHT_KEYS.items()}
    service = Service(
        index,
        rules,
        cache_s=api["cache"],
        preflight_ms=(int(preflight["window"] * 1000), int(preflight["lookback"] * 1000)),
    )

    def url_for(namespace: str, name: str) -> str:
        return f"{public}/experiments/{namespace}/{name}"

    notify: Callable[[list[Explanation], int], int] | None = None
    slack_sink: Sink | None = None
    risk_slack: SlackRiskSink | None = None
    if slack_client is None and slack["token"]:
        from slack_sdk import WebClient

        kwargs = {"base_url": slack["base_url"]} if slack["base_url"] else {}
        slack_client = WebClient(token=slack["token"], **kwargs)
    # What was fired and posted is kept in the index file by default, so a restarted server
    # and every replica know it; a read-only index keeps it in this process only.
    sqlite = index if isinstance(index, Path) else None
    shared = sqlite is None or os.access(sqlite, os.W_OK)
    if not shared:
        notes.append(f"{index} is not writable: alert and Slack state live in memory only")
    state: AlertState = IndexAlertState(index) if shared else MemoryAlertState()
    if slack_client is not None:
        where: Path | None = slack["state"] or (sqlite if shared else None)
        if where is None and sqlite is None:
            notes.append(
                "Slack threads live in memory: set slack.state to a SQLite file to keep them"
            )
        store = SqliteThreadStore(where) if where else MemoryThreadStore()
        notifier = SlackNotifier(
            slack_client, store, per_channel_per_minute=slack["per_channel_per_minute"]
        )
        routes = routes_from(slack)

        def notify(explanations: list[Explanation], now_ms: int) -> int:
            return notify_failures(
                notifier,
                explanations,
                service.pod_labels,
                url_for,
                routes,
                slack["default_channel"],
                window_s=alerts["window"],
                now_ms=now_ms,
            )

        slack_sink = SlackLoopSink(slack_client, store, routes, slack["default_channel"])
        risk_slack = SlackRiskSink(
            slack_client, store, routes, slack["default_channel"], service.pod_labels
        )
    options = ApiOptions(
        Access(tokens, proxy),
        audit=open_audit(api["audit_log"]),
        public_url=public,
        login_links=api["login_links"] or bool(notes),
        open_docs=api["open_docs"],
        slack_command=slash_command(slack, service, url_for) if slack["signing_secret"] else None,
    )
    app = create_app(service, options)
    sinks: list[Sink] = []
    if alerts["alertmanager"]:
        sinks.append(AlertmanagerSink(alerts["alertmanager"]))
    if alerts["webhook"]:
        sinks.append(WebhookSink(alerts["webhook"]))
    if slack_sink is not None and alerts["slack"]:
        sinks.append(slack_sink)
    detector = (
        LoopDetector(
            sinks,
            min_restarts=alerts["min_restarts"],
            window_s=alerts["window"],
            url_for=url_for,
            on_error=lambda message: sys.stderr.write(f"whyjob serve: alert: {message}\n"),
            state=state,
        )
        if sinks
        else None
    )
    # Warnings before the fall go to the alert sinks and, in its own words, to Slack.
    alert_sinks: list[Any] = [s for s in sinks if s is not slack_sink]
    if risk_slack is not None and alerts["slack"]:
        alert_sinks.append(risk_slack)
    risk = (
        RiskWatch(
            alert_sinks,
            url_for=url_for,
            on_error=lambda message: sys.stderr.write(f"whyjob serve: warning: {message}\n"),
            state=state,
        )
        if alert_sinks
        else None
    )
    leader = _elector(api, lease_client) if api["lease"] else None
    return Served(app, api["listen"], detector, service, notes, notify, risk, leader)


def _elector(api: Mapping[str, Any], client: Any) -> Any:
    """The Lease (`api.lease: NAMESPACE/NAME`) that picks the one replica that sends."""
    import socket

    from whyjob.collector.live.kubernetes import api_client_from
    from whyjob.collector.live.lease import LeaseElector

    namespace, _, name = str(api["lease"]).partition("/")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    return LeaseElector(
        client or api_client_from(api),
        namespace,
        name,
        identity,
        duration_s=float(api["lease_duration"]),
    )
