"""Slack in `whyjob serve`: failure notifications, loop alerts, and the `/whyjob` command.

- After each check, every attempt that failed on its own (a first domino, not a collateral
  rank) and ended within the window is notified once, threaded per experiment, routed by
  namespace, label and owner (slack.py does the routing, threading, dedup and rate limits).
- Loop alerts go to the same threads ("restart loop", then "resolved").
- The slash command answers only about the namespaces `slack.command_namespaces` names: it is
  heard by a whole workspace, so it gets no more than the operator grants it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from whyjob.api.access import Principal
from whyjob.api.alerts import Alert, LoopAlert, named
from whyjob.api.risk import RiskAlert
from whyjob.api.service import Service
from whyjob.api.slack import (
    Destination,
    OwnerRoute,
    Route,
    SlackNotifier,
    ThreadStore,
    command_handler,
    escape,
    route,
)
from whyjob.core.errors import NotFound
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation

__all__ = ["SlackLoopSink", "notify_failures", "routes_from", "slash_command"]


def routes_from(settings: Mapping[str, Any]) -> list[Route | OwnerRoute]:
    """`slack.routes` (namespace glob -> channels) and the owner label, as slack.py routes."""
    routes: list[Route | OwnerRoute] = [
        Route(channel, namespace=glob)
        for glob, channels in settings["routes"].items()
        for channel in channels
    ]
    routes.append(OwnerRoute(settings["owner_label"]))
    return routes


def notify_failures(
    notifier: SlackNotifier,
    explanations: Iterable[Explanation],
    labels_of: Callable[[str], Mapping[str, str]],
    url_for: Callable[[str, str], str],
    routes: list[Route | OwnerRoute],
    default_channel: str | None,
    *,
    window_s: float,
    now_ms: int | None = None,
) -> int:
    """Notify each recent first-domino failure once; returns how many messages went out."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    posted = 0
    for explanation in explanations:
        document = explanation.to_json()
        experiment = explanation.experiment
        url = url_for(experiment.namespace, experiment.name)
        for attempt in explanation.attempts:
            if (
                not attempt.failed
                or attempt.category == "peer.failure"
                or attempt.ended_at is None
                or now - attempt.ended_at > window_s * 1000
            ):
                continue
            sent = notifier.notify(
                document, attempt.id, labels_of(attempt.pod_uid), url, routes, default_channel
            )
            posted += sum(1 for s in sent if s.status == "posted")
    notifier.flush()
    return posted


class _ThreadedSink:
    """Says an alert's start and end once per routed destination, in the experiment's thread
    there (the first word about an experiment starts it)."""

    renews = False

    def __init__(
        self,
        client: Any,
        store: ThreadStore,
        routes: list[Route | OwnerRoute],
        default_channel: str | None,
        labels_of: Callable[[str], Mapping[str, str]] = lambda uid: {},
    ) -> None:
        self.client, self.store, self.routes, self.default = client, store, routes, default_channel
        self.labels_of = labels_of  # a pod's labels, which may name an owner to tell

    def _say(self, alert: Alert, key: str, text: str, destinations: list[Destination]) -> None:
        experiment = named(alert)  # as slack.experiment_key: one thread per cluster's experiment
        for destination in destinations:
            if not self.store.claim(destination.key, experiment, key):
                continue  # said already (a firing alert is renewed every check)
            thread = self.store.thread(destination.key, experiment)
            try:
                answer = self.client.chat_postMessage(
                    channel=self._channel(destination),
                    text=text,
                    thread_ts=thread,
                    unfurl_links=False,
                )
            except Exception:
                self.store.release(destination.key, experiment, key)
                raise
            if thread is None:
                self.store.set_thread(destination.key, experiment, str(answer["ts"]))
            self.store.set_state(destination.key, experiment, key, "sent")

    def _channel(self, destination: Destination) -> str:
        """A channel as routed; a person's DM, looked up by email when that is what names them."""
        if destination.kind == "channel":
            return destination.target
        user = destination.target
        if destination.kind == "email":
            user = self.client.users_lookupByEmail(email=user)["user"]["id"]
        return str(self.client.conversations_open(users=user)["channel"]["id"])

    def _destinations(
        self, namespace: str, name: str, labels: Mapping[str, str] | None = None
    ) -> list[Destination]:
        document = {"experiment": {"namespace": namespace, "name": name}}
        return route(document, self.routes, self.default, labels)


class SlackLoopSink(_ThreadedSink):
    """Loop alerts into each routed channel's thread of the experiment: once when a loop
    starts, once when it ends. Owners hear about each failure; the loop is the team's."""

    def _post(self, alert: LoopAlert, what: str, text: str) -> None:
        channels = [
            d for d in self._destinations(alert.namespace, alert.experiment) if d.kind == "channel"
        ]
        self._say(alert, f"loop:{alert.since_ms}:{what}", text, channels)

    def fire(self, alert: LoopAlert) -> None:
        retry = {
            True: "retrying can help",
            False: "retrying will not help",
            None: "retry: unknown",
        }[alert.retry_helps]
        self._post(
            alert,
            "fired",
            f":repeat: *Restart loop*: {escape(alert.experiment)} ({escape(alert.namespace)}) failed "
            f"{alert.restarts} times without progress ({escape(alert.kind)}); {retry}: {escape(alert.reason)}. "
            f"<{alert.url}|Timeline>",
        )

    def resolve(self, alert: LoopAlert) -> None:
        self._post(
            alert,
            "resolved",
            f":white_check_mark: Restart loop of {escape(alert.experiment)} resolved: progress resumed.",
        )


class SlackRiskSink(_ThreadedSink):
    """Warnings before the fall, in each routed destination's thread of the experiment: the
    team channel, and the owner's DM (a pod label names them). Once when a warning starts,
    once when it clears."""

    def _post(self, alert: RiskAlert, what: str, text: str) -> None:
        labels = self.labels_of(alert.pod_uid) if alert.pod_uid else {}
        destinations = self._destinations(alert.namespace, alert.experiment, labels)
        key = f"risk:{alert.node}:{alert.notice}:{what}"
        self._say(alert, key, text, destinations)

    def fire(self, alert: RiskAlert) -> None:
        checkpoint = (
            f"last checkpoint {format_ts(alert.last_checkpoint_ms)}"
            if alert.last_checkpoint_ms is not None
            else "no checkpoint saved yet"
        )
        self._post(
            alert,
            "fired",
            f":warning: *At risk*: {escape(alert.experiment)} ({escape(alert.namespace)}): "
            f"{escape(alert.what)} on {escape(alert.node)} {escape(alert.until)} "
            f"(ranks {escape(', '.join(alert.ranks))}); {alert.gpu_hours_at_risk:g} GPU-hours "
            f"since the {checkpoint}. To do: {escape(alert.advice)}. <{alert.url}|Timeline>",
        )

    def resolve(self, alert: RiskAlert) -> None:
        self._post(
            alert,
            "cleared",
            f":white_check_mark: {escape(alert.experiment)} is no longer at risk on "
            f"{escape(alert.node)}.",
        )


def slash_command(
    settings: Mapping[str, Any], service: Service, url_for: Callable[[str, str], str]
) -> Callable[[Mapping[str, str], bytes], dict[str, Any]]:
    reader = Principal("slack", frozenset(settings["command_namespaces"]), via="slack")

    def explain(name: str, namespace: str | None) -> Mapping[str, Any] | None:
        cluster = None
        if namespace is None:
            found = [e for e in service.experiments(reader, name) if e["name"] == name]
            if not found:
                return None
            namespace, cluster = found[0]["namespace"], found[0]["cluster"] or ""
        try:
            return service.explanation(reader, namespace, name, cluster=cluster).to_json()
        except NotFound:
            return None

    return command_handler(settings["signing_secret"], explain, lambda name, ns: url_for(ns, name))
