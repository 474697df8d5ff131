"""Slack: failure notifications, routing, and the `/whyjob` slash command.

Everything here renders the one Explanation document (docs/explanation.md) and computes no
diagnosis of its own. The pieces are plain functions and classes so the HTTP app can wire them
in without this module knowing about FastAPI:

- `notification()`: the Block Kit message for "an attempt of a tracked experiment ended badly".
- `route()`: which channels and people hear about it (namespace glob, pod label, owner DM).
- `SlackNotifier`: posts through a real `slack_sdk.WebClient`, one thread per experiment and
  channel, never the same attempt twice to one place, under a per-channel token bucket whose
  overflow is summarised in the next message rather than dropped; Slack's own HTTP 429 is
  waited out once.
- `verify_request()` and `slash_response()`: Slack's v0 request signing and the slash command.

All user-derived text goes into mrkdwn escaped (`&`, `<`, `>`), because Slack treats those three
as control characters: an unescaped `<!channel>` in a log line would ping a whole channel.
"""

from __future__ import annotations

import copy
import logging
import re
import sqlite3
import threading
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, Protocol

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.signature import Clock, SignatureVerifier
from slack_sdk.web import SlackResponse

from whyjob.core.errors import WhyjobError

__all__ = [
    "OWNER_LABEL",
    "BadSignature",
    "Destination",
    "MalformedRequest",
    "MemoryThreadStore",
    "OwnerRoute",
    "ReplayCache",
    "ReplayedRequest",
    "RequestRejected",
    "Route",
    "Sent",
    "SlackNotifier",
    "SqliteThreadStore",
    "StaleRequest",
    "ThreadStore",
    "command_handler",
    "escape",
    "experiment_key",
    "first_sentence",
    "notification",
    "parse_form",
    "route",
    "slash_response",
    "verify_request",
]

_log = logging.getLogger(__name__)

OWNER_LABEL = "whyjob.io/owner"

# Block Kit limits (docs.slack.dev/reference/block-kit): Slack rejects the whole message
# (`invalid_blocks`) when one is exceeded, so every text is fitted rather than trusted.
MAX_BLOCKS = 50
MAX_TEXT = 3000  # any text object, and what we allow the fallback `text`
MAX_FIELD = 2000  # one of a section's `fields`
MAX_FIELDS = 10
MAX_HEADER = 150  # header blocks: plain_text only
MAX_BUTTON_TEXT = 75
MAX_URL = 3000

# -- text ------------------------------------------------------------------------------------


def escape(text: str) -> str:
    """Slack's three control characters as entities (and nothing else: Slack decodes only these)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fit(escaped: str, limit: int) -> str:
    """Shorten already-escaped mrkdwn to `limit` characters without splitting an entity."""
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut.rstrip() + "…"


def _fit_plain(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _mrkdwn(text: str, limit: int = MAX_TEXT) -> str:
    return _fit(escape(text), limit)


_ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "etc", "vs", "cf", "approx", "incl", "no", "nr", "fig", "al", "dr", "mr", "ms"}
)


def _sentence_end(text: str, at: int) -> int | None:
    """Where a sentence ending with the terminator at `at` stops, or None when it does not."""
    stop = at + 1
    while stop < len(text) and text[stop] in "\"'":  # a closing quote belongs to the sentence
        stop += 1
    if stop + 1 >= len(text) or text[stop] != " ":
        return None  # "1.70", "ip-10-0-1-5.ec2.internal", "nvidia.com/gpu": no space after
    following = text[stop + 1]
    if not (following.isupper() or following in "\"'(["):
        return None  # "... nvidia.com/gpu. preemption: ..." is one log line, not two sentences
    if text[at] == ".":
        word = text[:at].rsplit(" ", 1)[-1].lstrip("\"'([").lower()
        if word in _ABBREVIATIONS:
            return None
        if word and all(len(part) == 1 and part.isalpha() for part in word.split(".")):
            return None  # an initial or "e.g", "U.S"
    return stop


def first_sentence(text: str) -> str:
    """The verdict's first sentence; summaries quote log lines, so split only where it is safe.

    A sentence ends at `.`, `!` or `?` outside brackets, followed by a space and a capital (or
    an opening quote or bracket), and not after an abbreviation or initial. Dots inside numbers,
    node names and paths are never followed by a space, so they never end a sentence.
    """
    flat = " ".join(text.split())
    depth = 0
    for at, char in enumerate(flat):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char in ".!?" and depth == 0:
            stop = _sentence_end(flat, at)
            if stop is not None:
                return flat[:stop]
    return flat


# -- the message -----------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def experiment_key(explanation: Mapping[str, Any]) -> str:
    """`namespace/name` (`@cluster` where it names one): what threads and deduplication are
    keyed by, so two clusters' experiments of one name never share a thread."""
    experiment = _mapping(explanation.get("experiment"))
    key = f"{experiment.get('namespace') or '-'}/{experiment.get('name') or '-'}"
    return key + (f"@{experiment['cluster']}" if experiment.get("cluster") else "")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


_OUTCOME_EMOJI = {
    "failed": ":x:",
    "running": ":repeat:",
    "pending": ":hourglass_flowing_sand:",
    "completed": ":white_check_mark:",
}


def _outcome_text(outcome: str, category: str) -> str:
    if outcome == "failed":
        return "failed"
    if outcome == "running":
        return "a run failed; the job is running again"
    if outcome == "pending":
        return "a run failed; the job is waiting to start"
    if outcome == "completed":
        return "completed" if category == "job.completed" else "completed after a failed run"
    return "a run ended badly; where the job stands is unknown"


def _retry_text(retry: Mapping[str, Any]) -> str:
    value = retry.get("value")
    answer = "Yes" if value is True else "No" if value is False else "It depends"
    reason = str(retry.get("reason") or "")
    return f"{answer}: {reason}" if reason else answer


def notification(explanation: Mapping[str, Any], timeline_url: str) -> dict[str, Any]:
    """The Block Kit message about one Explanation: `{"text": fallback, "blocks": [...]}`.

    What a researcher needs in ten seconds: which job, what ended it and how sure whyjob is,
    what it cost, whether a retry helps, and a button to the full timeline. `text` is the
    fallback that notifications and screen readers show, so it carries the same facts.
    """
    experiment = _mapping(explanation.get("experiment"))
    verdict = _mapping(explanation.get("verdict"))
    gpu = _mapping(explanation.get("gpu_hours"))
    retry = _mapping(explanation.get("retry_helps"))
    loop = _mapping(explanation.get("loop"))

    name = str(experiment.get("name") or "unknown experiment")
    namespace = str(experiment.get("namespace") or "-")
    outcome = str(verdict.get("outcome") or "unknown")
    category = str(verdict.get("category") or "unknown")
    grade = str(verdict.get("grade") or "possible")
    owner = str(verdict.get("owner") or "-")
    sentence = first_sentence(str(verdict.get("summary") or ""))
    lost, used = _number(gpu.get("lost")), _number(gpu.get("used"))
    happened = _outcome_text(outcome, category)

    # Header blocks take plain_text only; Kubernetes names cannot hold & < >, and plain_text
    # is shown as it is, so it is fitted but not entity-escaped.
    emoji = _OUTCOME_EMOJI.get(outcome, ":warning:")
    suffix = f" ({namespace}): {happened}"
    room = MAX_HEADER - len(emoji) - 1 - len(suffix)
    header = f"{emoji} {_fit_plain(name, max(room, 20))}{suffix}"

    fields = [
        f"*Cause*\n`{escape(category)}` ({escape(grade)})",
        f"*GPU-hours lost*\n{lost:,.1f} of {used:,.1f} used",
        f"*Retry helps?*\n{escape(_retry_text(retry))}",
    ]
    if owner != "-":
        fields.append(f"*Who acts*\n{escape(owner)}")
    if loop.get("looping"):
        kind = str(loop.get("kind") or "mixed")
        restarts = int(_number(loop.get("restarts")))
        progress = "some progress" if loop.get("progress") else "no progress"
        fields.append(f"*Restart loop*\n{restarts} failed tries ({escape(kind)}), {progress}")

    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _fit_plain(header, MAX_HEADER)}},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": _mrkdwn(sentence) if sentence else "_no summary_"},
        },
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": _fit(text, MAX_FIELD)} for text in fields[:MAX_FIELDS]
            ],
        },
    ]
    if timeline_url and len(timeline_url) <= MAX_URL:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "whyjob_open_timeline",
                        "text": {"type": "plain_text", "text": "Open timeline"},
                        "url": timeline_url,
                    }
                ],
            }
        )
    context = f"`whyjob explain {name} -n {namespace}`"
    if verdict.get("root_attempt"):
        context += f" · first domino: `{verdict['root_attempt']}`"
    if explanation.get("generated_at"):
        context += f" · explained {explanation['generated_at']}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(context)}]})

    fallback = f"{name} ({namespace}): {happened}. Cause {category} ({grade}). {sentence}"
    return {"text": _mrkdwn(fallback.strip()), "blocks": blocks[:MAX_BLOCKS]}


def _held_text(held: Sequence[tuple[str, str]], *, standalone: bool = False) -> str:
    """`…and 3 more failures held back by the rate limit: ns/a (2), ns/b`, escaped."""
    counts = Counter(experiment for experiment, _ in held)
    named = [
        f"`{escape(experiment)}`" + (f" ({count})" if count > 1 else "")
        for experiment, count in counts.most_common(10)
    ]
    if len(counts) > 10:
        named.append(f"and {len(counts) - 10} other experiments")
    noun = "failure" if len(held) == 1 else "failures"
    lead = (
        f"{len(held)} {noun} here {'was' if len(held) == 1 else 'were'} held back"
        if standalone
        else f"…and {len(held)} more {noun} here held back"
    )
    return _fit(f"{lead} by the rate limit: {', '.join(named)}", MAX_TEXT)


def _with_held(message: Mapping[str, Any], held: Sequence[tuple[str, str]]) -> dict[str, Any]:
    if not held:
        return dict(message)
    text = _held_text(held)
    blocks = list(message["blocks"])[: MAX_BLOCKS - 1]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    noun = "failure" if len(held) == 1 else "failures"
    return {
        "text": _fit(f"{message['text']} (and {len(held)} more {noun})", MAX_TEXT),
        "blocks": blocks,
    }


# -- routing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    """Send to `channel` when the namespace matches the glob and/or a label has the value.

    `label` is `key=value` (the value may be a glob). Give `namespace`, `label` or both; with
    both, both must match. `channel` is a channel ID (`C0123ABC`, preferred: it survives
    renames) or a name (`#ml-alerts`).
    """

    channel: str
    namespace: str | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if not self.channel:
            raise ValueError("a route needs a channel")
        if self.namespace is None and self.label is None:
            raise ValueError(f"route to {self.channel}: give a namespace glob or a label")
        if self.label is not None and "=" not in self.label:
            raise ValueError(f"route to {self.channel}: label must be key=value: {self.label!r}")

    def matches(self, namespace: str | None, labels: Mapping[str, str]) -> bool:
        if self.namespace is not None and (
            namespace is None or not fnmatchcase(namespace, self.namespace)
        ):
            return False
        if self.label is not None:
            key, _, value = self.label.partition("=")
            if key not in labels or not fnmatchcase(labels[key], value):
                return False
        return True


@dataclass(frozen=True, slots=True)
class OwnerRoute:
    """Direct-message the owner a label (or annotation) names: a Slack user id or an email.

    Kubernetes label values cannot hold `@`, so an email has to come from an annotation:
    pass annotations in the same `labels` mapping.
    """

    label_key: str = OWNER_LABEL


_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a message goes: a channel, a user (DM), or an email to resolve to a user (DM)."""

    kind: Literal["channel", "user", "email"]
    target: str
    why: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Stable identity for threads, dedup and rate limits: `channel:#ml-alerts`."""
        return f"{self.kind}:{self.target}"

    @classmethod
    def from_key(cls, key: str) -> Destination:
        kind, _, target = key.partition(":")
        if kind == "user":
            return cls("user", target)
        if kind == "email":
            return cls("email", target)
        return cls("channel", target)


def route(
    explanation_or_labels: Mapping[str, Any],
    routes: Sequence[Route | OwnerRoute],
    default_channel: str | None,
    labels: Mapping[str, str] | None = None,
) -> list[Destination]:
    """Every destination a failure goes to, in route order, each once.

    The first argument is an Explanation (its namespace is used; v1 carries no labels, so pass
    the pod's labels separately) or a bare labels mapping. Every matching route applies, not
    just the first. `default_channel` is used when no channel route matched; an owner DM does
    not count, so the team channel still hears about it.
    """
    experiment = explanation_or_labels.get("experiment")
    if isinstance(experiment, Mapping):
        namespace = experiment.get("namespace")
        merged: dict[str, str] = {}
        own = explanation_or_labels.get("labels")
        if isinstance(own, Mapping):
            merged.update({str(k): str(v) for k, v in own.items()})
    else:
        namespace = None
        merged = {str(k): str(v) for k, v in explanation_or_labels.items()}
    merged.update(labels or {})
    ns = str(namespace) if namespace is not None else None

    found: list[Destination] = []
    for rule in routes:
        if isinstance(rule, OwnerRoute):
            owner = merged.get(rule.label_key, "").strip()
            if _USER_ID.match(owner):
                found.append(Destination("user", owner, f"owner {rule.label_key}"))
            elif _EMAIL.match(owner):
                found.append(Destination("email", owner.lower(), f"owner {rule.label_key}"))
            elif owner:
                _log.warning("%s=%r is neither a Slack user id nor an email", rule.label_key, owner)
        elif rule.matches(ns, merged):
            why = " and ".join(
                part
                for part in (
                    f"namespace {rule.namespace}" if rule.namespace else "",
                    f"label {rule.label}" if rule.label else "",
                )
                if part
            )
            found.append(Destination("channel", rule.channel, why))
    if default_channel and not any(d.kind == "channel" for d in found):
        found.append(Destination("channel", default_channel, "default channel"))
    unique: dict[str, Destination] = {}
    for destination in found:
        unique.setdefault(destination.key, destination)
    return list(unique.values())


# -- where threads and deliveries are remembered ---------------------------------------------

State = Literal["sending", "sent", "held", "summarised"]


class ThreadStore(Protocol):
    """Thread parents per (destination, experiment) and deliveries per attempt.

    `claim` must be atomic (insert-if-absent): it is what keeps two notifiers, or two calls
    racing, from posting the same attempt twice to one destination.
    """

    def thread(self, destination: str, experiment: str) -> str | None: ...

    def set_thread(self, destination: str, experiment: str, ts: str) -> None:
        """Remember the first thread parent; a later call for the same pair keeps the first."""
        ...

    def claim(self, destination: str, experiment: str, attempt_id: str) -> bool:
        """True when this attempt was never claimed for this destination (now `sending`)."""
        ...

    def release(self, destination: str, experiment: str, attempt_id: str) -> None: ...

    def set_state(
        self, destination: str, experiment: str, attempt_id: str, state: State
    ) -> None: ...

    def state(self, destination: str, experiment: str, attempt_id: str) -> State | None: ...

    def held(self, destination: str) -> list[tuple[str, str]]:
        """(experiment, attempt_id) held back by the rate limit and not yet summarised."""
        ...

    def held_destinations(self) -> list[str]: ...


class MemoryThreadStore:
    """For tests and single-shot use: forgets everything when the process ends."""

    def __init__(self) -> None:
        self._threads: dict[tuple[str, str], str] = {}
        self._states: dict[tuple[str, str, str], State] = {}
        self._lock = threading.Lock()

    def thread(self, destination: str, experiment: str) -> str | None:
        return self._threads.get((destination, experiment))

    def set_thread(self, destination: str, experiment: str, ts: str) -> None:
        with self._lock:
            self._threads.setdefault((destination, experiment), ts)

    def claim(self, destination: str, experiment: str, attempt_id: str) -> bool:
        with self._lock:
            key = (destination, experiment, attempt_id)
            if key in self._states:
                return False
            self._states[key] = "sending"
            return True

    def release(self, destination: str, experiment: str, attempt_id: str) -> None:
        with self._lock:
            self._states.pop((destination, experiment, attempt_id), None)

    def set_state(self, destination: str, experiment: str, attempt_id: str, state: State) -> None:
        with self._lock:
            self._states[(destination, experiment, attempt_id)] = state

    def state(self, destination: str, experiment: str, attempt_id: str) -> State | None:
        return self._states.get((destination, experiment, attempt_id))

    def held(self, destination: str) -> list[tuple[str, str]]:
        with self._lock:
            return [
                (e, a) for (d, e, a), s in self._states.items() if d == destination and s == "held"
            ]

    def held_destinations(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(d for (d, _, _), s in self._states.items() if s == "held"))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS slack_threads (
    destination TEXT NOT NULL,
    experiment  TEXT NOT NULL,
    ts          TEXT NOT NULL,
    created     REAL NOT NULL,
    PRIMARY KEY (destination, experiment)
);
CREATE TABLE IF NOT EXISTS slack_deliveries (
    destination TEXT NOT NULL,
    experiment  TEXT NOT NULL,
    attempt_id  TEXT NOT NULL,
    state       TEXT NOT NULL,
    updated     REAL NOT NULL,
    PRIMARY KEY (destination, experiment, attempt_id)
);
CREATE INDEX IF NOT EXISTS slack_deliveries_held ON slack_deliveries (state, destination);
"""


class SqliteThreadStore:
    """Threads and deliveries in a SQLite file, so a restart neither re-posts nor re-threads.

    Its tables are prefixed `slack_` and created if missing, so the file may be shared with
    other state. Each operation is one statement in autocommit mode, and `claim` is an
    `INSERT OR IGNORE`, so several processes may share the file.
    """

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(
            str(path), timeout=10.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.Lock()
        with self._lock:
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteThreadStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            row = self._db.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def _run(self, sql: str, args: tuple[Any, ...]) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def thread(self, destination: str, experiment: str) -> str | None:
        found = self._one(
            "SELECT ts FROM slack_threads WHERE destination = ? AND experiment = ?",
            (destination, experiment),
        )
        return None if found is None else str(found)

    def set_thread(self, destination: str, experiment: str, ts: str) -> None:
        self._run(
            "INSERT OR IGNORE INTO slack_threads VALUES (?, ?, ?, ?)",
            (destination, experiment, ts, time.time()),
        )

    def claim(self, destination: str, experiment: str, attempt_id: str) -> bool:
        return (
            self._run(
                "INSERT OR IGNORE INTO slack_deliveries VALUES (?, ?, ?, 'sending', ?)",
                (destination, experiment, attempt_id, time.time()),
            )
            == 1
        )

    def release(self, destination: str, experiment: str, attempt_id: str) -> None:
        self._run(
            "DELETE FROM slack_deliveries WHERE destination = ? AND experiment = ?"
            " AND attempt_id = ?",
            (destination, experiment, attempt_id),
        )

    def set_state(self, destination: str, experiment: str, attempt_id: str, state: State) -> None:
        self._run(
            "INSERT OR REPLACE INTO slack_deliveries VALUES (?, ?, ?, ?, ?)",
            (destination, experiment, attempt_id, state, time.time()),
        )

    def state(self, destination: str, experiment: str, attempt_id: str) -> State | None:
        found = self._one(
            "SELECT state FROM slack_deliveries WHERE destination = ? AND experiment = ?"
            " AND attempt_id = ?",
            (destination, experiment, attempt_id),
        )
        if found in ("sending", "sent", "held", "summarised"):
            return found  # type: ignore[no-any-return]
        return None

    def held(self, destination: str) -> list[tuple[str, str]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT experiment, attempt_id FROM slack_deliveries"
                " WHERE state = 'held' AND destination = ? ORDER BY updated, rowid",
                (destination,),
            ).fetchall()
        return [(str(e), str(a)) for e, a in rows]

    def held_destinations(self) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT destination FROM slack_deliveries WHERE state = 'held'"
            ).fetchall()
        return [str(d) for (d,) in rows]


# -- posting ---------------------------------------------------------------------------------


class _Bucket:
    """Token bucket: `capacity` messages at once, refilled at capacity per minute."""

    def __init__(self, capacity: int, clock: Callable[[], float]) -> None:
        self.capacity = float(capacity)
        self.tokens = float(capacity)
        self.rate = capacity / 60.0
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def refund(self) -> None:
        self.tokens = min(self.capacity, self.tokens + 1.0)


@dataclass(frozen=True, slots=True)
class Sent:
    """What happened for one destination.

    `posted`: the message went out (`ts`; `thread_ts` when it replied in the experiment's
    thread; `held_back` earlier failures it summarised). `duplicate`: this attempt was already
    notified there. `held`: over the channel's rate limit; counted, and summarised in the next
    message there (or by `flush()`). `failed`: Slack refused or could not be reached (`error`);
    nothing is remembered, so a later call may try again.
    """

    destination: Destination
    status: Literal["posted", "duplicate", "held", "failed"]
    experiment: str
    attempt_id: str | None = None
    channel: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    held_back: int = 0
    error: str | None = None


def _wait_asked(status: int | None, headers: Mapping[str, Any] | None) -> float | None:
    """Seconds Slack asked us to wait, when it answered HTTP 429; else None."""
    if status != 429:
        return None
    for key, value in dict(headers or {}).items():
        if str(key).lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) and value else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return 1.0
    return 1.0


def _retry_after(error: SlackApiError) -> float | None:
    response = error.response
    return _wait_asked(getattr(response, "status_code", None), getattr(response, "headers", None))


class _WaitOutRateLimit(RateLimitErrorRetryHandler):
    """slack_sdk's 429 retry, once, waiting exactly Retry-After, and only when that is at most
    `max_wait`: a longer wait is reported instead, since the notifier's lock is held meanwhile.
    (The stock handler sleeps any Retry-After, plus up to a second of jitter.)"""

    def __init__(self, max_wait: float, sleep: Callable[[float], None]) -> None:
        super().__init__(max_retry_count=1)
        self.max_wait = max_wait
        self.sleep = sleep

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        wait = _wait_asked(response.status_code, response.headers) if response else None
        return wait is not None and wait <= self.max_wait

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        assert response is not None  # _can_retry said yes to a 429 answer
        wait = _wait_asked(response.status_code, response.headers) or 0.0
        _log.info("Slack rate limited us; retrying in %gs", wait)
        self.sleep(wait)
        state.next_attempt_requested = True
        state.increment_current_attempt()


def _describe(error: Exception) -> str:
    if isinstance(error, SlackApiError):
        wait = _retry_after(error)
        if wait is not None:
            return f"ratelimited: Slack answered HTTP 429 (Retry-After {wait:g}s)"
        code = error.response.get("error") if hasattr(error.response, "get") else None
        return str(code or f"HTTP {getattr(error.response, 'status_code', '?')}")
    return f"{type(error).__name__}: {error}"


class SlackNotifier:
    """Posts failure notifications: threaded per experiment, deduplicated, rate limited.

    `per_channel_per_minute` is the token bucket of each destination (burst and refill per
    minute); Slack itself allows about one message per second per channel. When Slack answers
    429 the call waits `Retry-After` (at most `max_retry_wait` seconds) and retries once: a
    slack_sdk retry handler on the notifier's copy of the client.
    Calls are serialised by a lock: the bucket, the thread map and the claims stay consistent;
    run it off the request path, since a 429 wait holds the lock. Delivery is at most once: an
    attempt is claimed in the store before it is posted, so a crash in between loses that one
    message rather than ever sending it twice.
    """

    def __init__(
        self,
        client: WebClient,
        store: ThreadStore,
        *,
        per_channel_per_minute: int = 20,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_retry_wait: float = 30.0,
        reply_broadcast: bool = False,
    ) -> None:
        if per_channel_per_minute < 1:
            raise ValueError("per_channel_per_minute must be at least 1")
        # A copy that also waits out a 429: the caller's client (shared with the loop alerts'
        # sinks) keeps its own retry handlers.
        self._client = copy.copy(client)
        self._client.retry_handlers = [
            *client.retry_handlers,
            _WaitOutRateLimit(max_retry_wait, sleep),
        ]
        self._store = store
        self._per_minute = per_channel_per_minute
        self._clock = clock
        self._broadcast = reply_broadcast
        self._buckets: dict[str, _Bucket] = {}
        self._channels: dict[str, str] = {}  # destination key -> channel id (DMs resolved once)
        self._lock = threading.Lock()

    # -- public ------------------------------------------------------------------------------

    def notify(
        self,
        explanation: Mapping[str, Any],
        attempt_id: str,
        labels: Mapping[str, str] | None,
        timeline_url: str,
        routes: Sequence[Route | OwnerRoute],
        default_channel: str | None,
    ) -> list[Sent]:
        """Tell every routed destination that `attempt_id` of this experiment ended badly."""
        experiment = experiment_key(explanation)
        message = notification(explanation, timeline_url)
        with self._lock:
            return [
                self._deliver(destination, experiment, attempt_id, message)
                for destination in route(explanation, routes, default_channel, labels)
            ]

    def flush(self) -> list[Sent]:
        """Post the summary of held-back failures where no later message has carried it yet.

        Call it now and then (a minute is plenty): without it, failures held back in a channel
        that then goes quiet would be summarised only by the next failure there.
        """
        results: list[Sent] = []
        with self._lock:
            for key in self._store.held_destinations():
                held = self._store.held(key)
                if not held or not self._bucket(key).take():
                    continue
                destination = Destination.from_key(key)
                text = _held_text(held, standalone=True)
                blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
                try:
                    channel = self._resolve(destination)
                    response = self._post(channel, text=text, blocks=blocks)
                except (SlackClientError, OSError) as error:
                    self._bucket(key).refund()
                    _log.warning("Slack summary to %s failed: %s", key, _describe(error))
                    results.append(Sent(destination, "failed", "", error=_describe(error)))
                    continue
                for experiment, attempt in held:
                    self._store.set_state(key, experiment, attempt, "summarised")
                results.append(
                    Sent(
                        destination,
                        "posted",
                        "",
                        channel=str(response.get("channel") or channel),
                        ts=str(response.get("ts")),
                        held_back=len(held),
                    )
                )
        return results

    # -- internals ---------------------------------------------------------------------------

    def _bucket(self, key: str) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self._per_minute, self._clock)
        return bucket

    def _post(self, channel: str, **message: Any) -> SlackResponse:
        """chat.postMessage without link previews: the timeline link would unfurl a login page."""
        return self._client.chat_postMessage(
            channel=channel, unfurl_links=False, unfurl_media=False, **message
        )

    def _resolve(self, destination: Destination) -> str:
        """The channel to post to; a person is looked up (by email) and their DM opened."""
        if destination.kind == "channel":
            return destination.target
        cached = self._channels.get(destination.key)
        if cached is not None:
            return cached
        user = destination.target
        if destination.kind == "email":
            found = self._client.users_lookupByEmail(email=destination.target)
            user = str(found["user"]["id"])
        opened = self._client.conversations_open(users=user)
        channel = str(opened["channel"]["id"])
        self._channels[destination.key] = channel
        return channel

    def _deliver(
        self,
        destination: Destination,
        experiment: str,
        attempt_id: str,
        message: Mapping[str, Any],
    ) -> Sent:
        key = destination.key
        if not self._store.claim(key, experiment, attempt_id):
            return Sent(destination, "duplicate", experiment, attempt_id)
        bucket = self._bucket(key)
        if not bucket.take():
            self._store.set_state(key, experiment, attempt_id, "held")
            _log.info("Slack: %s over its rate limit; %s %s held back", key, experiment, attempt_id)
            return Sent(destination, "held", experiment, attempt_id)
        held = self._store.held(key)
        payload = _with_held(message, held)
        thread_ts = self._store.thread(key, experiment)
        try:
            channel = self._resolve(destination)
            extra: dict[str, Any] = {}
            if thread_ts is not None:
                extra["thread_ts"] = thread_ts
                if self._broadcast:
                    extra["reply_broadcast"] = True
            response = self._post(channel, text=payload["text"], blocks=payload["blocks"], **extra)
        except (SlackClientError, OSError) as error:
            self._store.release(key, experiment, attempt_id)
            bucket.refund()
            _log.warning("Slack notification to %s failed: %s", key, _describe(error))
            return Sent(destination, "failed", experiment, attempt_id, error=_describe(error))
        ts = str(response["ts"])
        if thread_ts is None:
            self._store.set_thread(key, experiment, ts)
        self._store.set_state(key, experiment, attempt_id, "sent")
        for other, attempt in held:
            self._store.set_state(key, other, attempt, "summarised")
        return Sent(
            destination,
            "posted",
            experiment,
            attempt_id,
            channel=str(response.get("channel") or channel),
            ts=ts,
            thread_ts=thread_ts,
            held_back=len(held),
        )


# -- request signing -------------------------------------------------------------------------

SIGNATURE_WINDOW_S = 300  # Slack's documented tolerance: five minutes either way


class RequestRejected(WhyjobError):
    """A request that does not provably come from Slack; `reason` is a short code."""

    reason = "rejected"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedRequest(RequestRejected):
    """A signing header is missing or not in Slack's format."""

    reason = "malformed"


class StaleRequest(RequestRejected):
    """The timestamp is more than five minutes from now (a captured request replayed late)."""

    reason = "stale"


class BadSignature(RequestRejected):
    """The HMAC does not match: wrong signing secret, or the body was altered."""

    reason = "bad_signature"


class ReplayedRequest(RequestRejected):
    """This exact signed request was already accepted within the window."""

    reason = "replay"


class ReplayCache:
    """Signatures accepted in the last five minutes, bounded in size.

    Only requests younger than the window can pass the timestamp check, so an entry is needed
    only until its timestamp leaves the window. When full, the oldest entry goes (a replay of
    that one request would then pass): the default holds more than 30 requests a second.
    """

    def __init__(self, max_entries: int = 10_000, window_s: float = SIGNATURE_WINDOW_S) -> None:
        self._entries: OrderedDict[str, float] = OrderedDict()
        self._max = max_entries
        self._window = window_s
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, signature: str, timestamp: float, now: float) -> bool:
        """True when `signature` is new (and now remembered); False when it is a replay."""
        with self._lock:
            while self._entries:
                oldest, expires = next(iter(self._entries.items()))
                if expires >= now:
                    break
                del self._entries[oldest]
            if signature in self._entries:
                return False
            self._entries[signature] = timestamp + self._window
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
            return True


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        wanted = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    return value


_UNIX_TIME = re.compile(r"[0-9]{1,12}")


def verify_request(
    signing_secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    seen: ReplayCache,
) -> None:
    """Check Slack's v0 signature of a request; raise a `RequestRejected` subclass if wrong.

    Slack signs `v0:{X-Slack-Request-Timestamp}:{raw body}` with HMAC-SHA256 under the app's
    signing secret and sends `v0={hex}` as X-Slack-Signature. `body` must be the raw bytes as
    received, before any form parsing. The signature is checked before the replay cache is
    touched, so forged requests cannot fill it.
    """
    timestamp = (_header(headers, "X-Slack-Request-Timestamp") or "").strip()
    signature = (_header(headers, "X-Slack-Signature") or "").strip()
    if not timestamp or not signature:
        raise MalformedRequest("missing X-Slack-Request-Timestamp or X-Slack-Signature header")
    # ASCII digits only (str.isdigit takes other scripts' digits too), and a length a Unix time
    # has: a 400-digit number must not reach float arithmetic.
    if not _UNIX_TIME.fullmatch(timestamp):
        raise MalformedRequest(f"X-Slack-Request-Timestamp is not a Unix time: {timestamp[:40]!r}")
    sent_at = int(timestamp)
    if abs(now - sent_at) > SIGNATURE_WINDOW_S:
        raise StaleRequest(
            f"request timestamp is {abs(now - sent_at):.0f}s from now (more than five minutes)"
        )
    if not signature.startswith("v0="):
        raise MalformedRequest("X-Slack-Signature is not a v0 signature")
    if not signature.isascii():  # hmac.compare_digest refuses non-ASCII str with a TypeError
        raise BadSignature("X-Slack-Signature does not match the body and signing secret")
    # slack_sdk's verifier checks it (Slack's base string, a constant-time comparison, the same
    # five minutes); the checks above only say which of its refusals this is.
    verifier = SignatureVerifier(signing_secret, clock=_At(now))
    try:
        valid = verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except UnicodeDecodeError:  # slack_sdk decodes the body; Slack only ever sends UTF-8
        raise BadSignature("the body is not UTF-8, so Slack did not sign it") from None
    if not valid:
        raise BadSignature("X-Slack-Signature does not match the body and signing secret")
    if not seen.remember(signature, sent_at, now):
        raise ReplayedRequest("this signed request was already received")


class _At(Clock):
    """slack_sdk's clock, read at the caller's `now` (tests and the handler pass their own)."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


# -- the slash command -----------------------------------------------------------------------


def parse_form(body: bytes) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (what Slack posts) as a flat dict."""
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return dict(pairs)


_USAGE = (
    "*Usage:* `/whyjob EXPERIMENT [NAMESPACE]` explains why a training job failed"
    " (also `/whyjob NAMESPACE/EXPERIMENT`). `/whyjob help` shows this."
)


def _ephemeral(text: str) -> dict[str, Any]:
    return {
        "response_type": "ephemeral",
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": _fit(text, MAX_TEXT)}}],
    }


def slash_response(
    text: str,
    explain: Callable[[str, str | None], Mapping[str, Any] | None],
    timeline_url_for: Callable[[str, str], str],
) -> dict[str, Any]:
    """The answer to `/whyjob <experiment> [namespace]`: only the asker sees it (ephemeral).

    `text` is the command's `text` form field. `explain(name, namespace)` returns the
    Explanation or None when there is no such experiment; a `WhyjobError` it raises (a name in
    several namespaces, say) is shown to the asker. `timeline_url_for(name, namespace)` gives the
    button's link (the namespace the explanation names, never None).
    """
    words = text.split()
    if words and words[0] == "/whyjob":
        words = words[1:]
    if not words:
        return _ephemeral("Which experiment? " + _USAGE)
    if len(words) == 1 and words[0].lower() in ("help", "-h", "--help"):
        return _ephemeral(_USAGE)
    if len(words) > 2:
        return _ephemeral(f"Too many words: `{escape(' '.join(words))}`. " + _USAGE)
    name, namespace = words[0], (words[1] if len(words) == 2 else None)
    if namespace is None and "/" in name:
        namespace, _, name = name.partition("/")
    try:
        explanation = explain(name, namespace)
    except WhyjobError as error:
        return _ephemeral(escape(str(error)))
    if explanation is None:
        where = f" in namespace `{escape(namespace)}`" if namespace else ""
        return _ephemeral(
            f"No experiment `{escape(name)}`{where} is known to whyjob. Check the name"
            " (it is the job's name, e.g. the PyTorchJob) or whether its cluster is collected."
        )
    experiment = _mapping(explanation.get("experiment"))
    real_name = str(experiment.get("name") or name)
    real_namespace = str(experiment.get("namespace") or namespace or "")
    message = notification(explanation, timeline_url_for(real_name, real_namespace))
    return {"response_type": "ephemeral", **message}


def command_handler(
    signing_secret: str,
    explain: Callable[[str, str | None], Mapping[str, Any] | None],
    timeline_url_for: Callable[[str, str], str],
    *,
    seen: ReplayCache | None = None,
    clock: Callable[[], float] = time.time,
) -> Callable[[Mapping[str, str], bytes], dict[str, Any]]:
    """`(headers, raw body) -> JSON answer` for `POST /slack/command`: verify, parse, answer.

    A rejected request answers `{"_status": 401, "error": reason}`; the caller turns `_status`
    into the HTTP status. Slack waits three seconds for the answer.
    """
    cache = seen if seen is not None else ReplayCache()

    def handle(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        try:
            verify_request(signing_secret, headers, body, now=clock(), seen=cache)
        except RequestRejected as rejected:
            _log.warning("Slack command rejected: %s", rejected.message)
            return {"_status": 401, "error": rejected.reason, "detail": rejected.message}
        form = parse_form(body)
        return slash_response(form.get("text", ""), explain, timeline_url_for)

    return handle
