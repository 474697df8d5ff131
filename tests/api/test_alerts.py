"""Stuck restart loops: seen firing and then resolved in a real Alertmanager, and on a webhook."""

from __future__ import annotations

import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.api.conftest import World
from tests.standins.services import alertmanager
from whyjob.api.access import Principal
from whyjob.api.alerts import AlertmanagerSink, LoopDetector, WebhookSink, loop_alert
from whyjob.api.alertstate import MemoryAlertState

OPS = Principal("ops", frozenset({"*"}))


class Webhook:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.received.append(
                    orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def _active(url: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"active": "true", "silenced": "false", "inhibited": "false"})
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}") as response:
        alerts: list[dict[str, Any]] = orjson.loads(response.read())
    return [a for a in alerts if a["labels"].get("alertname") == "WhyjobRestartLoop"]


def test_a_restart_loop_fires_then_resolves_in_alertmanager(world: World, tmp_path: Path) -> None:
    looping = world.service.explanation(OPS, *world.b)  # the same user exception on every retry
    healthy = world.service.explanation(OPS, *world.a)  # one Xid: a failure, not a loop
    now = max(a.ended_at or 0 for a in looping.attempts) + 60_000
    hook = Webhook()
    with alertmanager(tmp_path) as am:
        detector = LoopDetector(
            [AlertmanagerSink(am), WebhookSink(hook.url)],
            min_restarts=3,
            window_s=24 * 3600,
            url_for=lambda ns, name: f"http://whyjob.example/experiments/{ns}/{name}",
        )
        assert detector.check([looping, healthy], now) == [f"fired {world.b[0]}/{world.b[1]}"]
        (alert,) = _active(am)
        assert (
            alert["labels"]["experiment"] == world.b[1]
            and alert["labels"]["loop_kind"] == "same_error"
        )
        assert alert["annotations"]["retry_helps"] == "no"
        assert alert["generatorURL"].endswith(f"/experiments/{world.b[0]}/{world.b[1]}")
        assert alert["status"]["state"] == "active"
        assert detector.check([looping, healthy], now + 60_000) == []  # renewed, still firing
        assert len(_active(am)) == 1
        # A new run gets past where the others died: progress has resumed.
        last = max(looping.attempts, key=lambda a: a.started_at or 0)
        further = replace(
            last,
            id=last.id + "-next",
            started_at=(last.ended_at or 0) + 1,
            ended_at=None,
            state="running",
            category=None,
            last_step=(last.last_step or 0) + 500,
        )
        moving = replace(looping, attempts=[*looping.attempts, further])
        assert detector.check([moving, healthy], now + 120_000) == [
            f"resolved {world.b[0]}/{world.b[1]}"
        ]
        assert _active(am) == []
    # The webhook hears the start and the end; only Alertmanager is told again while it lasts.
    assert [(m["status"], m["alert"]["experiment"]) for m in hook.received] == [
        ("firing", world.b[1]),
        ("resolved", world.b[1]),
    ]


def test_a_loop_needs_enough_failures_inside_the_window(world: World) -> None:
    looping = world.service.explanation(OPS, *world.b)
    end = max(a.ended_at or 0 for a in looping.attempts)
    assert loop_alert(looping, min_restarts=3, window_s=86_400, now_ms=end, url="") is not None
    assert loop_alert(looping, min_restarts=50, window_s=86_400, now_ms=end, url="") is None
    assert loop_alert(looping, min_restarts=3, window_s=60, now_ms=end + 86_400_000, url="") is None


def test_a_sink_that_is_down_does_not_silence_the_others(world: World) -> None:
    looping = world.service.explanation(OPS, *world.b)
    now = max(a.ended_at or 0 for a in looping.attempts) + 60_000
    hook, errors = Webhook(), []
    detector = LoopDetector(
        [AlertmanagerSink("http://127.0.0.1:9"), WebhookSink(hook.url)],
        window_s=86_400,
        on_error=errors.append,
    )
    detector.check([looping], now)
    assert len(hook.received) == 1 and errors and errors[0].startswith("AlertmanagerSink fire")


class _FlakyState(MemoryAlertState):
    """State whose next save fails (the index locked, Elasticsearch away)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = False

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("index unavailable")
        super().save(kind, firing)


def test_a_failed_save_sends_nothing_and_fires_nothing_twice(world: World) -> None:
    looping = world.service.explanation(OPS, *world.b)
    now = max(a.ended_at or 0 for a in looping.attempts) + 60_000
    hook, state = Webhook(), _FlakyState()
    detector = LoopDetector([WebhookSink(hook.url)], window_s=86_400, state=state)
    state.fail_next = True
    with pytest.raises(OSError):
        detector.check([looping], now)
    assert hook.received == []  # saved first: nothing went out for a state that was not kept
    assert detector.check([looping], now) == [f"fired {world.b[0]}/{world.b[1]}"]
    state.fail_next = True
    with pytest.raises(OSError):
        detector.check([looping], now)
    assert detector.check([looping], now) == []  # still firing: not fired again as new
    assert [m["status"] for m in hook.received] == ["firing"]


def test_stored_alerts_from_another_version_are_read_or_skipped(world: World) -> None:
    looping = world.service.explanation(OPS, *world.b)
    now = max(a.ended_at or 0 for a in looping.attempts) + 60_000
    state, errors = MemoryAlertState(), []
    LoopDetector([], window_s=86_400, state=state).check([looping], now)
    (body,) = state.load("loop").values()
    state.save(
        "loop",
        {
            "newer": {**body, "field_of_a_newer_whyjob": 1},
            "broken": {"namespace": "ml"},
        },
    )
    detector = LoopDetector([], window_s=86_400, state=state, on_error=errors.append)
    assert list(detector.firing) == [(world.b[0], world.b[1])]
    assert errors and "could not be read" in errors[0]
    assert detector.check([looping], now) == []  # the one it read is still firing


def test_two_clusters_experiments_of_one_name_are_two_alerts(world: World) -> None:
    looping = world.service.explanation(OPS, *world.b)
    now = max(a.ended_at or 0 for a in looping.attempts) + 60_000
    twins = [
        replace(looping, experiment=replace(looping.experiment, cluster=c)) for c in ("a", "b")
    ]
    hook = Webhook()
    detector = LoopDetector([WebhookSink(hook.url)], window_s=86_400)
    name = f"{world.b[0]}/{world.b[1]}"
    assert sorted(detector.check(twins, now)) == [f"fired {name}@a", f"fired {name}@b"]
    assert sorted(m["alert"]["cluster"] for m in hook.received) == ["a", "b"]
    assert all(
        m["alert"]["url"].endswith(f"?cluster={m['alert']['cluster']}") for m in hook.received
    )
    assert detector.check(twins[:1], now) == [f"resolved {name}@b"]
