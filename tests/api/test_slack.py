"""The Slack surface: messages from real Explanations, posted with the real slack_sdk WebClient
to a local Slack Web API stand-in (tests/standins/slack.py); request signing as Slack documents it.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from tests.standins.slack import SlackStandin
from whyjob.api.slack import (
    BadSignature,
    Destination,
    MalformedRequest,
    MemoryThreadStore,
    OwnerRoute,
    ReplayCache,
    ReplayedRequest,
    Route,
    SlackNotifier,
    SqliteThreadStore,
    StaleRequest,
    command_handler,
    escape,
    first_sentence,
    notification,
    parse_form,
    route,
    slash_response,
    verify_request,
)
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.errors import NotFound
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import RuleSet, load_rules
from whyjob.sim import simulate

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
URL = "https://whyjob.example.com/experiments/{namespace}/{name}"


# -- real Explanations, simulated and ingested once for the module ---------------------------


@dataclass(frozen=True)
class World:
    index: Path
    rules: RuleSet
    docs: dict[str, dict[str, Any]]  # scenario -> Explanation JSON

    def explain(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        with SqliteIndex(self.index) as index:
            try:
                return explain_experiment(index, self.rules, name, namespace).to_json()
            except NotFound:
                return None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("slack")
    rules = load_rules()
    docs = {}
    for seed, scenario in enumerate(("restart_loop", "cuda_oom", "xid79"), start=3):
        bundle = root / scenario
        truth = simulate(scenario, seed, bundle)
        with SqliteIndex(root / "index.sqlite") as index:
            Ingestor(index, IngestOptions()).ingest([str(bundle)])
            docs[scenario] = explain_experiment(
                index, rules, truth.experiment_name, truth.experiment_namespace
            ).to_json()
    return World(root / "index.sqlite", rules, docs)


def _texts(value: Any) -> Iterator[tuple[str, str]]:
    """Every (type, text) of every text object in a Block Kit structure."""
    if isinstance(value, dict):
        if value.get("type") in ("plain_text", "mrkdwn") and isinstance(value.get("text"), str):
            yield value["type"], value["text"]
        for child in value.values():
            yield from _texts(child)
    elif isinstance(value, list):
        for child in value:
            yield from _texts(child)


def _timeline(doc: Mapping[str, Any]) -> str:
    return URL.format(**doc["experiment"])


# -- the message -----------------------------------------------------------------------------


def test_notification_tells_the_story_of_a_real_explanation(world: World) -> None:
    doc = world.docs["restart_loop"]
    name, namespace = doc["experiment"]["name"], doc["experiment"]["namespace"]
    message = notification(doc, _timeline(doc))
    header, summary, facts, actions, context = message["blocks"]

    assert header["type"] == "header" and header["text"]["type"] == "plain_text"
    assert name in header["text"]["text"] and namespace in header["text"]["text"]
    assert header["text"]["text"].endswith(": failed")
    assert summary["text"]["text"] == escape(first_sentence(doc["verdict"]["summary"]))
    facts_text = "\n".join(f["text"] for f in facts["fields"])
    assert f"`{doc['verdict']['category']}` ({doc['verdict']['grade']})" in facts_text
    assert f"{doc['gpu_hours']['lost']:,.1f} of" in facts_text
    assert doc["retry_helps"]["value"] is False
    assert "*Retry helps?*\nNo: " + escape(doc["retry_helps"]["reason"]) in facts_text
    assert "*Restart loop*" in facts_text  # this scenario loops
    (button,) = actions["elements"]
    assert button["type"] == "button" and button["url"] == _timeline(doc)
    assert doc["verdict"]["root_attempt"] in context["elements"][0]["text"]
    assert name in message["text"] and doc["verdict"]["category"] in message["text"]


def test_only_the_first_sentence_of_a_summary_that_quotes_a_log(world: World) -> None:
    doc = world.docs["cuda_oom"]
    summary = doc["verdict"]["summary"]
    assert "Tried to allocate" in summary  # the log line has sentences of its own
    sentence = notification(doc, _timeline(doc))["blocks"][1]["text"]["text"]
    assert sentence.endswith("CUDA out of memory.")
    assert "Tried to allocate" not in sentence


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Loss hit 1.5e-3 at step 2.5k. Then it diverged.", "Loss hit 1.5e-3 at step 2.5k."),
        (
            "Node ip-10-0-1-5.ec2.internal failed (e.g. Xid 79). Retry elsewhere.",
            "Node ip-10-0-1-5.ec2.internal failed (e.g. Xid 79).",
        ),
        ("Use a bigger GPU, e.g. H100s. Or shard.", "Use a bigger GPU, e.g. H100s."),
        ("Loss vs. Baseline diverged. Stop.", "Loss vs. Baseline diverged."),
        (
            "It died on gke-a3-pool-1.us-central1.internal. The job restarted.",
            "It died on gke-a3-pool-1.us-central1.internal.",
        ),
        (
            "0/13 nodes: 13 Insufficient nvidia.com/gpu. preemption: none. The job waits.",
            "0/13 nodes: 13 Insufficient nvidia.com/gpu. preemption: none.",
        ),
        (
            "Killed (exit 137; no OOM line. Not proven.) Next.",
            "Killed (exit 137; no OOM line. Not proven.) Next.",
        ),
        ("no terminator at all", "no terminator at all"),
        ("Spread\nover   lines. Second.", "Spread over lines."),
    ],
)
def test_first_sentence(text: str, first: str) -> None:
    assert first_sentence(text) == first


def test_user_text_is_escaped_everywhere(world: World) -> None:
    doc = copy.deepcopy(world.docs["restart_loop"])
    doc["verdict"]["summary"] = "Rank 0 said <!channel> & <https://evil.example|click> > 3. Then."
    doc["retry_helps"]["reason"] = "ask <@U0BOSS01> & friends"
    message = notification(doc, _timeline(doc))
    mrkdwn = [text for kind, text in _texts(message["blocks"]) if kind == "mrkdwn"]
    for text in [*mrkdwn, message["text"]]:
        assert "<" not in text and ">" not in text, text
        assert re.search(r"&(?!amp;|lt;|gt;)", text) is None, text
    assert (
        mrkdwn[0] == "Rank 0 said &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt; &gt; 3."
    )
    assert any("ask &lt;@U0BOSS01&gt; &amp; friends" in t for t in mrkdwn)


def test_block_kit_limits_hold_for_oversized_input(world: World) -> None:
    doc = copy.deepcopy(world.docs["restart_loop"])
    doc["experiment"]["name"] = "n" * 300
    doc["verdict"]["summary"] = "&" * 5000  # one "sentence", 25000 characters once escaped
    doc["retry_helps"]["reason"] = "<" * 4000
    message = notification(doc, "https://x.example/" + "a" * 3000)
    assert len(message["blocks"]) <= 50
    assert len(message["text"]) <= 3000
    assert len(message["blocks"][0]["text"]["text"]) <= 150
    assert all(len(text) <= 3000 for _, text in _texts(message["blocks"]))
    assert all(len(f["text"]) <= 2000 for f in message["blocks"][2]["fields"])
    assert not any(b["type"] == "actions" for b in message["blocks"])  # URL over 3000: no button
    for _, text in _texts(message["blocks"]):
        assert re.search(r"&(?!amp;|lt;|gt;)", text) is None  # never cut inside an entity


# -- routing ---------------------------------------------------------------------------------

ROUTES: list[Route | OwnerRoute] = [
    Route(channel="#ml-alerts", namespace="ml-*"),
    Route(channel="C0VISION1", label="team=vision"),
    OwnerRoute(),
]


def _in_namespace(doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    return {**doc, "experiment": {**doc["experiment"], "namespace": namespace}}


def test_routes_by_namespace_label_and_owner(world: World) -> None:
    doc = _in_namespace(world.docs["xid79"], "ml-research")
    labels = {"team": "vision", "whyjob.io/owner": "Alice@Example.com"}
    found = route(doc, ROUTES, "#whyjob", labels)
    assert found == [
        Destination("channel", "#ml-alerts"),
        Destination("channel", "C0VISION1"),
        Destination("email", "alice@example.com"),
    ]
    assert found[0].why == "namespace ml-*" and found[1].why == "label team=vision"


def test_default_channel_when_no_channel_route_matches(world: World) -> None:
    doc = _in_namespace(world.docs["restart_loop"], "nlp-team")  # no namespace route
    found = route(doc, ROUTES, "#whyjob", {"whyjob.io/owner": "U0123ABC"})
    assert found == [Destination("user", "U0123ABC"), Destination("channel", "#whyjob")]
    assert route(doc, ROUTES, None, {"team": "nlp"}) == []
    # a labels mapping alone routes by label; the owner key is configurable
    assert route({"team": "vision", "lead": "W0LEAD01"}, [*ROUTES, OwnerRoute("lead")], None) == [
        Destination("channel", "C0VISION1"),
        Destination("user", "W0LEAD01"),
    ]


def test_a_route_needs_a_namespace_or_a_label() -> None:
    with pytest.raises(ValueError, match="namespace glob or a label"):
        Route(channel="#x")
    with pytest.raises(ValueError, match="key=value"):
        Route(channel="#x", label="team")


# -- posting through the real WebClient ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def slack() -> Iterator[SlackStandin]:
    with SlackStandin(users={"alice@example.com": "U0ALICE01"}) as standin:
        yield standin


@pytest.fixture
def client(slack: SlackStandin) -> WebClient:
    return WebClient(token=slack.token, base_url=slack.url + "/api/")


def _notifier(
    client: WebClient, store: Any = None, **options: Any
) -> tuple[SlackNotifier, list[float]]:
    sleeps: list[float] = []
    notifier = SlackNotifier(client, store or MemoryThreadStore(), sleep=sleeps.append, **options)
    return notifier, sleeps


def _notify(
    notifier: SlackNotifier,
    doc: Mapping[str, Any],
    attempt: str,
    routes: list[Route | OwnerRoute] | None = None,
    default: str | None = "#whyjob",
    labels: Mapping[str, str] | None = None,
) -> list[Any]:
    return notifier.notify(doc, attempt, labels, _timeline(doc), routes or [], default)


def test_the_standin_speaks_slack(slack: SlackStandin, client: WebClient) -> None:
    assert client.auth_test()["team_id"].startswith("T")
    posted = client.chat_postMessage(channel="#general", text="hi")
    assert posted["ok"] and posted["channel"].startswith("C") and posted["message"]["text"] == "hi"
    later = client.chat_postMessage(channel="#general", text="again")
    assert float(later["ts"]) > float(posted["ts"]) and re.fullmatch(r"\d{10}\.\d{6}", later["ts"])
    assert slack.calls[-1].token == slack.token
    wrong = WebClient(token="xoxb-wrong", base_url=slack.url + "/api/")
    with pytest.raises(Exception, match="invalid_auth"):
        wrong.auth_test()


def test_second_attempt_replies_in_the_experiments_thread(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    notifier, _ = _notifier(client)
    doc, other = world.docs["restart_loop"], world.docs["xid79"]
    (first,) = _notify(notifier, doc, "attempt-0")
    (second,) = _notify(notifier, doc, "attempt-1")
    (elsewhere,) = _notify(notifier, other, "attempt-0")
    assert first.status == second.status == elsewhere.status == "posted"
    assert first.thread_ts is None and second.thread_ts == first.ts
    assert elsewhere.thread_ts is None  # another experiment starts its own thread
    top, reply, own = slack.posts("#whyjob")
    assert top["thread_ts"] is None and reply["thread_ts"] == top["ts"] and own["thread_ts"] is None
    assert not reply["reply_broadcast"]
    assert reply["blocks"] == notification(doc, _timeline(doc))["blocks"]


def test_threads_and_dedup_survive_a_restart(
    tmp_path: Path, slack: SlackStandin, client: WebClient, world: World
) -> None:
    doc = world.docs["restart_loop"]
    with SqliteThreadStore(tmp_path / "slack.sqlite") as store:
        notifier, _ = _notifier(client, store)
        (first,) = _notify(notifier, doc, "attempt-0")
    restarted = WebClient(token=slack.token, base_url=slack.url + "/api/")
    with SqliteThreadStore(tmp_path / "slack.sqlite") as store:
        notifier, _ = _notifier(restarted, store)
        (again,) = _notify(notifier, doc, "attempt-0")
        (second,) = _notify(notifier, doc, "attempt-1")
        key = f"{doc['experiment']['namespace']}/{doc['experiment']['name']}"
        assert store.state("channel:#whyjob", key, "attempt-1") == "sent"
    assert again.status == "duplicate"
    assert second.status == "posted" and second.thread_ts == first.ts
    assert [m["thread_ts"] for m in slack.posts()] == [None, first.ts]


def test_an_attempt_is_notified_once_per_destination(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    notifier, _ = _notifier(client)
    doc = _in_namespace(world.docs["xid79"], "ml-research")
    routes: list[Route | OwnerRoute] = [Route(channel="#ml-alerts", namespace="ml-*")]
    first = _notify(notifier, doc, "a-0", routes, default=None)
    assert [s.status for s in first] == ["posted"]
    assert [s.status for s in _notify(notifier, doc, "a-0", routes, default=None)] == ["duplicate"]
    # a new destination for the same attempt still hears about it, once
    wider = [*routes, Route(channel="#gpu-infra", namespace="ml-research")]
    assert [s.status for s in _notify(notifier, doc, "a-0", wider, default=None)] == [
        "duplicate",
        "posted",
    ]
    assert len(slack.posts("#ml-alerts")) == 1 and len(slack.posts("#gpu-infra")) == 1


def test_owner_email_is_looked_up_and_messaged_directly(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    notifier, _ = _notifier(client)
    doc = world.docs["restart_loop"]
    owner = {"whyjob.io/owner": "alice@example.com"}
    (sent,) = _notify(notifier, doc, "a-0", [OwnerRoute()], default=None, labels=owner)
    assert sent.status == "posted" and sent.channel and sent.channel.startswith("D")
    (lookup,) = slack.calls_to("users.lookupByEmail")
    (opened,) = slack.calls_to("conversations.open")
    assert lookup.args["email"] == "alice@example.com" and opened.args["users"] == "U0ALICE01"
    assert slack.posts(sent.channel)[0]["text"] == notification(doc, _timeline(doc))["text"]
    _notify(notifier, doc, "a-1", [OwnerRoute()], default=None, labels=owner)
    assert len(slack.calls_to("users.lookupByEmail")) == 1  # resolved once
    assert slack.posts(sent.channel)[1]["thread_ts"] == sent.ts


def test_unknown_owner_is_reported_and_can_be_retried(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    notifier, _ = _notifier(client)
    doc = world.docs["restart_loop"]
    owner = {"whyjob.io/owner": "bob@example.com"}
    (sent,) = _notify(notifier, doc, "a-0", [OwnerRoute()], default=None, labels=owner)
    assert (sent.status, sent.error) == ("failed", "users_not_found")
    assert slack.posts() == []
    slack.users["bob@example.com"] = "U0BOB0001"
    (retry,) = _notify(notifier, doc, "a-0", [OwnerRoute()], default=None, labels=owner)
    assert retry.status == "posted"  # a failure is not remembered as delivered


def test_over_the_rate_limit_failures_are_coalesced_not_dropped(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    clock = Clock()
    notifier, _ = _notifier(client, per_channel_per_minute=2, clock=clock)
    doc, other = world.docs["restart_loop"], world.docs["cuda_oom"]
    statuses = [_notify(notifier, doc, f"a-{n}")[0].status for n in range(4)]
    statuses.append(_notify(notifier, other, "b-0")[0].status)
    assert statuses == ["posted", "posted", "held", "held", "held"]
    assert len(slack.posts("#whyjob")) == 2
    # another channel has its own bucket
    assert _notify(notifier, doc, "a-0", default="#other")[0].status == "posted"

    clock.now += 30  # one token back at 2 per minute
    (sent,) = _notify(notifier, doc, "a-9")
    assert sent.status == "posted" and sent.held_back == 3
    last = slack.posts("#whyjob")[-1]
    assert "and 3 more failures" in last["text"]
    summary = last["blocks"][-1]["elements"][0]["text"]
    assert "3 more failures" in summary
    assert f"`{doc['experiment']['namespace']}/{doc['experiment']['name']}` (2)" in summary
    assert other["experiment"]["name"] in summary
    assert _notify(notifier, doc, "a-2")[0].status == "duplicate"  # summarised counts as told

    # nothing new arrives after a held failure: flush() summarises it on its own
    clock.now += 30
    assert _notify(notifier, doc, "a-10")[0].status == "posted"
    clock.now += 1
    assert _notify(notifier, doc, "a-11")[0].status == "held"
    assert notifier.flush() == []  # no token yet
    clock.now += 30
    (flushed,) = notifier.flush()
    assert flushed.status == "posted" and flushed.held_back == 1
    assert slack.posts("#whyjob")[-1]["text"].startswith("1 failure here was held back")
    assert notifier.flush() == []


def test_slacks_429_is_waited_out_once(
    slack: SlackStandin, client: WebClient, world: World
) -> None:
    notifier, sleeps = _notifier(client)
    doc = world.docs["restart_loop"]
    slack.rate_limit(1, retry_after=7)
    (sent,) = _notify(notifier, doc, "a-0")
    assert sent.status == "posted" and sleeps == [7.0]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]

    slack.rate_limit(2, retry_after=3)
    (failed,) = _notify(notifier, doc, "a-1")
    assert failed.status == "failed" and "429" in (failed.error or "")
    assert sleeps == [7.0, 3.0]
    (later,) = _notify(notifier, doc, "a-1")  # not remembered as sent: a later call delivers it
    assert later.status == "posted" and later.thread_ts == sent.ts

    slack.rate_limit(1, retry_after=120)  # longer than max_retry_wait: report, do not block
    (refused,) = _notify(notifier, doc, "a-2")
    assert refused.status == "failed" and "Retry-After 120" in (refused.error or "")
    assert sleeps == [7.0, 3.0]


def test_slack_errors_are_reported_per_destination(slack: SlackStandin, world: World) -> None:
    wrong = WebClient(token="xoxb-revoked", base_url=slack.url + "/api/")
    notifier, _ = _notifier(wrong)
    (sent,) = _notify(notifier, world.docs["restart_loop"], "a-0")
    assert (sent.status, sent.error) == ("failed", "invalid_auth")
    assert slack.posts() == []


# -- request signing -------------------------------------------------------------------------


def _signed(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    base = b"v0:" + str(timestamp).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


SLACK_DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow"
    b"&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner"
    b"&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands"
    b"%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)


def test_slacks_documented_example_verifies() -> None:
    headers = {
        "x-slack-request-timestamp": "1531420618",  # lower-case, as ASGI servers hand them over
        "x-slack-signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
    }
    assert headers == {k.lower(): v for k, v in _signed(SLACK_DOC_BODY, 1531420618).items()}
    verify_request(SECRET, headers, SLACK_DOC_BODY, now=1531420618 + 60, seen=ReplayCache())
    verifier = SignatureVerifier(SECRET, clock=type("C", (), {"now": lambda self: 1531420678})())
    assert verifier.is_valid_request(SLACK_DOC_BODY, headers)  # slack_sdk agrees


def test_a_bad_signature_is_rejected() -> None:
    now = 1_700_000_000
    headers = _signed(b"text=a", now)
    with pytest.raises(BadSignature) as tampered:
        verify_request(SECRET, headers, b"text=b", now=now, seen=ReplayCache())
    assert tampered.value.reason == "bad_signature"
    with pytest.raises(BadSignature):
        verify_request("another-secret", headers, b"text=a", now=now, seen=ReplayCache())
    with pytest.raises(MalformedRequest) as missing:
        verify_request(SECRET, {}, b"text=a", now=now, seen=ReplayCache())
    assert missing.value.reason == "malformed"
    with pytest.raises(MalformedRequest):
        bad_ts = {**headers, "X-Slack-Request-Timestamp": "soon"}
        verify_request(SECRET, bad_ts, b"text=a", now=now, seen=ReplayCache())


@pytest.mark.parametrize("skew", [-301, 301, 3600])
def test_a_stale_timestamp_is_rejected(skew: int) -> None:
    now = 1_700_000_000
    headers = _signed(b"text=a", now - skew)  # correctly signed, but too far from now
    with pytest.raises(StaleRequest) as stale:
        verify_request(SECRET, headers, b"text=a", now=now, seen=ReplayCache())
    assert stale.value.reason == "stale" and "five minutes" in str(stale.value)
    verify_request(SECRET, _signed(b"text=a", now - 299), b"text=a", now=now, seen=ReplayCache())


def test_a_replay_within_the_window_is_rejected() -> None:
    now, seen = 1_700_000_000, ReplayCache(max_entries=3)
    headers = _signed(b"text=a", now)
    verify_request(SECRET, headers, b"text=a", now=now, seen=seen)
    with pytest.raises(ReplayedRequest) as replay:
        verify_request(SECRET, headers, b"text=a", now=now + 10, seen=seen)
    assert replay.value.reason == "replay"
    for n in range(5):  # bounded: old entries make room
        verify_request(SECRET, _signed(b"n=%d" % n, now), b"n=%d" % n, now=now, seen=seen)
    assert len(seen) == 3
    # a forged request never reaches the cache
    with pytest.raises(BadSignature):
        verify_request(SECRET, _signed(b"x", now, "forger"), b"x", now=now, seen=seen)
    assert len(seen) == 3


# -- the slash command -----------------------------------------------------------------------


def _url_for(calls: list[tuple[str, str]]) -> Callable[[str, str], str]:
    def timeline_url_for(name: str, namespace: str) -> str:
        calls.append((name, namespace))
        return URL.format(name=name, namespace=namespace)

    return timeline_url_for


def test_slash_command_for_a_known_experiment(world: World) -> None:
    doc = world.docs["xid79"]
    name, namespace = doc["experiment"]["name"], doc["experiment"]["namespace"]
    asked: list[tuple[str, str]] = []
    for text in (f"{name} {namespace}", f"  {name}  ", f"{namespace}/{name}"):
        answer = slash_response(text, world.explain, _url_for(asked))
        assert answer["response_type"] == "ephemeral"
        assert (
            answer["blocks"][0]["text"]["text"]
            == notification(doc, "")["blocks"][0]["text"]["text"]
        )
        assert answer["blocks"][1:3] == notification(doc, _timeline(doc))["blocks"][1:3]
        button = answer["blocks"][3]["elements"][0]
        assert button["url"] == _timeline(doc)
    assert asked == [(name, namespace)] * 3


def test_slash_command_for_an_unknown_experiment(world: World) -> None:
    answer = slash_response("no-such-job <b> ml-research", world.explain, _url_for([]))
    assert answer["response_type"] == "ephemeral" and "Too many words" in answer["text"]
    answer = slash_response("no-such-job ml-research", world.explain, _url_for([]))
    assert answer["response_type"] == "ephemeral"
    assert "No experiment `no-such-job` in namespace `ml-research`" in answer["text"]
    assert "blocks" in answer and "<" not in answer["blocks"][0]["text"]["text"]


def test_slash_command_help_and_empty_text(world: World) -> None:
    for text in ("help", "", "   "):
        answer = slash_response(text, world.explain, _url_for([]))
        assert answer["response_type"] == "ephemeral"
        assert "/whyjob EXPERIMENT [NAMESPACE]" in answer["text"]
    assert slash_response("", world.explain, _url_for([]))["text"].startswith("Which experiment?")


def test_signed_slash_command_end_to_end(world: World) -> None:
    doc = world.docs["restart_loop"]
    name = doc["experiment"]["name"]
    now = 1_700_000_000.0
    handle = command_handler(SECRET, world.explain, _url_for([]), clock=lambda: now)
    body = urllib.parse.urlencode(
        {"command": "/whyjob", "text": f"{name}", "user_id": "U2CERLKJA", "team_id": "T1"}
    ).encode()
    assert parse_form(body)["text"] == name
    headers = {k.lower(): v for k, v in _signed(body, int(now)).items()}
    answer = handle(headers, body)
    assert "_status" not in answer and answer["response_type"] == "ephemeral"
    assert name in answer["blocks"][0]["text"]["text"]
    assert handle(headers, body) == {
        "_status": 401,
        "error": "replay",
        "detail": "this signed request was already received",
    }
    assert handle({**headers, "x-slack-signature": "v0=00"}, body)["error"] == "bad_signature"
