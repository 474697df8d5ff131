"""`whyjob serve` assembled from a config file: failures and loops into Slack (the real slack_sdk
against the Slack stand-in), once each, threaded; and the signed `/whyjob` slash command."""

from __future__ import annotations

import hashlib
import hmac
import io
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from slack_sdk import WebClient

from tests.api.conftest import World
from tests.standins.slack import SlackStandin
from whyjob.api.config import load_surface_config
from whyjob.api.serve import build
from whyjob.explain.ruleset import load_rules

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def _own(world: World, tmp_path: Path) -> Path:
    """A copy of the shared index: `serve` keeps what it fired and posted in its index."""
    copy = tmp_path / "index.sqlite"
    shutil.copyfile(world.index, copy)
    return copy


def _config(tmp_path: Path, world: World) -> Path:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - {name: ops, token: ops-token, namespaces: ['*']}\n")
    path = tmp_path / "config.yaml"
    path.write_text(
        f"api:\n  tokens: {tokens}\n  public_url: https://whyjob.example.com\n"
        "alerts:\n  min_restarts: 3\n  window: 9000h\n"
        f"slack:\n  token: xoxb-whyjob-test\n  signing_secret: {SECRET}\n  default_channel: '#ml-alerts'\n"
        f"  routes: {{'{world.b[0]}': ['#foundation']}}\n  command_namespaces: ['{world.a[0]}']\n"
    )
    return path


def _signed(body: str, at: float | None = None) -> dict[str, str]:
    stamp = str(int(at if at is not None else time.time()))
    signature = hmac.new(SECRET.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={signature}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def test_failures_and_loops_reach_slack_once_each_threaded(tmp_path: Path, world: World) -> None:
    with SlackStandin() as slack:
        client = WebClient(token=slack.token, base_url=slack.url + "/api/")
        served = build(
            load_surface_config(_config(tmp_path, world)),
            _own(world, tmp_path),
            load_rules(),
            slack_client=client,
        )
        ends = [
            a.ended_at or 0
            for experiment in (world.a, world.b)
            for a in served.service.explanation(_ops(), *experiment).attempts
        ]
        now = max(ends) + 60_000
        log = io.StringIO()
        served.check(9000 * 3600, log, now_ms=now)
        first = list(slack.messages)
        served.check(9000 * 3600, log, now_ms=now + 60_000)  # the same failures, the loop still on
        assert slack.messages == first, "nothing is said twice"
    routed = slack.posts("#foundation")  # team B's namespace routes to its own channel
    assert routed and not [m for m in slack.posts("#ml-alerts") if world.b[1] in m["text"]]
    parent, *replies = routed
    assert parent["thread_ts"] is None and replies
    assert all(m["thread_ts"] == parent["ts"] for m in replies)  # one thread per experiment
    assert any(":repeat: *Restart loop*" in m["text"] for m in replies)
    xid = [m for m in slack.posts("#ml-alerts") if world.a[1] in m["text"]]
    assert len(xid) == 1, "only the first domino is notified, not the collateral rank"
    assert "https://whyjob.example.com/experiments/" in str(xid[0]["blocks"])
    assert "loop fired" in log.getvalue()


def _ops():  # type: ignore[no-untyped-def]
    from whyjob.api.access import Principal

    return Principal("ops", frozenset({"*"}))


def test_the_slash_command_is_signed_and_reads_only_what_it_is_granted(
    tmp_path: Path, world: World
) -> None:
    served = build(
        load_surface_config(_config(tmp_path, world)), _own(world, tmp_path), load_rules()
    )
    client = TestClient(served.app)
    body = urllib.parse.urlencode(
        {"command": "/whyjob", "text": world.a[1], "user_id": "U012ABCDEF"}
    )
    headers = _signed(body)
    answer = client.post("/slack/command", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["response_type"] == "ephemeral"
    assert world.a[1] in str(answer.json()["blocks"])
    # The same request again (the same signed headers, whatever second it is now) is a replay;
    # an old one is stale; a forged one fails its signature.
    assert client.post("/slack/command", content=body, headers=headers).status_code == 401
    stale = client.post("/slack/command", content=body, headers=_signed(body, time.time() - 600))
    assert stale.status_code == 401 and stale.json()["error"] == "stale"
    forged = _signed(body) | {"X-Slack-Signature": "v0=" + "0" * 64}
    assert (
        client.post("/slack/command", content=body, headers=forged).json()["error"]
        == "bad_signature"
    )
    # Hostile timestamps are a clean 401, never a 500: 400 digits, another script's digits.
    for hostile in (b"9" * 400, "\u0663".encode() * 10, b"-5", b"1e9"):
        odd: dict[str, str | bytes] = {**_signed(body), "X-Slack-Request-Timestamp": hostile}
        refusal = client.post("/slack/command", content=body, headers=odd)
        assert refusal.status_code == 401 and refusal.json()["error"] == "malformed", hostile
    # A body that is not UTF-8 cannot be Slack's: a clean 401, not a 500.
    garbled = b"text=\xff\xfe"
    refusal = client.post("/slack/command", content=garbled, headers=_signed("text=x"))
    assert refusal.status_code == 401 and refusal.json()["error"] == "bad_signature"
    # A body over the cap is refused before it is read whole or its signature checked.
    huge = b"text=" + b"x" * (1 << 20)
    assert client.post("/slack/command", content=huge, headers=_signed(huge)).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds while streaming
        for _ in range(64):
            yield b"x" * 4096

    streamed = client.post("/slack/command", content=chunks(), headers=_signed(b""))
    assert streamed.status_code == 413
    # Team B's namespace was not granted to the command: it reads like an unknown experiment.
    other = urllib.parse.urlencode({"command": "/whyjob", "text": f"{world.b[1]} {world.b[0]}"})
    refused = client.post("/slack/command", content=other, headers=_signed(other))
    absent = urllib.parse.urlencode(
        {"command": "/whyjob", "text": f"nope-{world.b[1]} {world.b[0]}"}
    )
    missing = client.post("/slack/command", content=absent, headers=_signed(absent))
    assert refused.status_code == missing.status_code == 200
    # Refused reads exactly like absent: the answer only repeats what was asked.
    assert str(refused.json()).replace(world.b[1], "X") == str(missing.json()).replace(
        f"nope-{world.b[1]}", "X"
    )
    assert "app.exception" not in str(refused.json())


def test_the_watch_asks_for_current_explanations(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notifications and loop alerts must not be one round late: never an expired answer."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - {name: ops, token: ops-token, namespaces: ['*']}\n")
    config = tmp_path / "config.yaml"
    hook = "http://127.0.0.1:9/hook"  # a loop alert sink, so the watch runs; never reached
    config.write_text(f"api:\n  tokens: {tokens}\nalerts:\n  window: 9000h\n  webhook: {hook}\n")
    served = build(load_surface_config(config), _own(world, tmp_path), load_rules())
    asked: list[dict[str, object]] = []
    real = served.service.explanation

    def spy(*args: object, **kwargs: object) -> object:
        asked.append(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(served.service, "explanation", spy)
    served.check(9000 * 3600, io.StringIO())
    assert asked and all(kwargs.get("current") is True for kwargs in asked)
