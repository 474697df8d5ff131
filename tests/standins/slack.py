"""The Slack Web API as slack_sdk's WebClient sees it, on a loopback port.

`WebClient(token=standin.token, base_url=standin.url + "/api/")` talks to it unchanged: every
method is a POST to `/api/<method>` (WebClient posts even the GET-documented ones), with a form
body, or JSON for chat.postMessage, and `Authorization: Bearer <token>`. Answers have Slack's
shape: HTTP 200 with `{"ok": true, ...}`, or `{"ok": false, "error": "<code>"}`; HTTP 429 with
`Retry-After` when rate limited. Stdlib only.

Implemented: auth.test, chat.postMessage (light Block Kit limit checks, `invalid_blocks`),
conversations.open, users.lookupByEmail. Anything else answers `unknown_method`.

Controls:
- `users`: email -> user id, what users.lookupByEmail and conversations.open know.
- `rate_limit(n, retry_after=1)`: the next n calls answer HTTP 429.
- `errors[method] = code`: that method answers `{"ok": false, "error": code}` until removed.
- `calls`: every call received (method, args, token, status), for assertions.
- `posts(channel=None)`: the messages chat.postMessage accepted.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Call", "SlackStandin"]

TEAM_ID = "T0WHYJOB01"
BOT_USER = "U0WHYJOBBOT"
BOT_ID = "B0WHYJOB01"
APP_ID = "A0WHYJOB01"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)


def _block_errors(blocks: Any) -> list[str]:
    """The Block Kit limits whyjob must respect, checked the way Slack reports them."""
    if not isinstance(blocks, list):
        return ["blocks must be an array"]
    errors = []
    if len(blocks) > 50:
        errors.append("no more than 50 items allowed [json-pointer:/blocks]")
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"[json-pointer:/blocks/{n}"
        if kind == "header":
            text = block.get("text") or {}
            if text.get("type") != "plain_text":
                errors.append(f"must be plain_text {where}/text]")
            if len(text.get("text", "")) > 150:
                errors.append(f"must be less than 151 characters {where}/text/text]")
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                errors.append(f"must provide text or fields {where}]")
            if len(block.get("text", {}).get("text", "")) > 3000:
                errors.append(f"must be less than 3001 characters {where}/text/text]")
            fields = block.get("fields", [])
            if len(fields) > 10:
                errors.append(f"no more than 10 items allowed {where}/fields]")
            for i, item in enumerate(fields):
                if len(item.get("text", "")) > 2000:
                    errors.append(f"must be less than 2001 characters {where}/fields/{i}/text]")
        elif kind == "context":
            elements = block.get("elements", [])
            if not 1 <= len(elements) <= 10:
                errors.append(f"must have 1 to 10 elements {where}/elements]")
        elif kind == "actions":
            for i, element in enumerate(block.get("elements", [])):
                if len(element.get("text", {}).get("text", "")) > 75:
                    errors.append(f"must be less than 76 characters {where}/elements/{i}/text]")
                if len(element.get("url", "")) > 3000:
                    errors.append(f"must be less than 3001 characters {where}/elements/{i}/url]")
        elif kind not in ("divider", "image", "rich_text", "markdown", "input", "file", "video"):
            errors.append(f"unsupported type {kind!r} {where}/type]")
    return errors


class SlackStandin:
    def __init__(self, token: str = "xoxb-whyjob-test", users: dict[str, str] | None = None):
        self.token = token
        self.users: dict[str, str] = dict(users or {})
        self.errors: dict[str, str] = {}
        self.calls: list[Call] = []
        self.messages: list[dict[str, Any]] = []
        self._throttle = 0
        self._retry_after = 1
        self._channels: dict[str, str] = {}  # name -> id
        self._dms: dict[str, str] = {}  # user id -> D channel id
        self._ts = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner._handle(self)

            def do_GET(self) -> None:
                owner._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- controls --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def rate_limit(self, calls: int, retry_after: int = 1) -> None:
        """Answer the next `calls` requests with HTTP 429 and `Retry-After: retry_after`."""
        with self._lock:
            self._throttle = calls
            self._retry_after = retry_after

    def posts(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Accepted chat.postMessage messages (in `channel`, an id or a name, if given)."""
        if channel is None:
            return list(self.messages)
        wanted = self._channels.get(channel.lstrip("#"), channel)
        return [m for m in self.messages if m["channel"] == wanted]

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def __enter__(self) -> SlackStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the protocol ----------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(request.path)
        if not parsed.path.startswith("/api/"):
            self._answer(request, 404, {"ok": False, "error": "not_found"}, {})
            return
        method = parsed.path[len("/api/") :]
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        args: dict[str, Any] = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if raw and content_type == "application/json":
            try:
                body = json.loads(raw)
            except ValueError:
                self._answer(request, 200, {"ok": False, "error": "invalid_json"}, {})
                return
            if isinstance(body, dict):
                args.update(body)
        elif raw:
            args.update(urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True))
        auth = request.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else args.pop("token", None)

        with self._lock:
            call = Call(method, args, token)
            self.calls.append(call)
            if self._throttle > 0:
                self._throttle -= 1
                call.status, call.answer = 429, {"ok": False, "error": "ratelimited"}
                headers = {"Retry-After": str(self._retry_after)}
                self._answer(request, 429, call.answer, headers)
                return
            if not token:
                call.answer = {"ok": False, "error": "not_authed"}
            elif token != self.token:
                call.answer = {"ok": False, "error": "invalid_auth"}
            elif method in self.errors:
                call.answer = {"ok": False, "error": self.errors[method]}
            else:
                call.answer = self._dispatch(method, args)
        self._answer(request, 200, call.answer, {})

    def _answer(
        self,
        request: BaseHTTPRequestHandler,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str],
    ) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            request.send_header(key, value)
        request.end_headers()
        request.wfile.write(data)

    def _dispatch(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://whyjob-test.slack.com/",
                "team": "whyjob test",
                "user": "whyjob",
                "team_id": TEAM_ID,
                "user_id": BOT_USER,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        if method == "chat.postMessage":
            return self._post_message(args)
        if method == "conversations.open":
            return self._open(args)
        if method == "users.lookupByEmail":
            return self._lookup(args)
        return {"ok": False, "error": "unknown_method"}

    def _channel_id(self, channel: str) -> str | None:
        if channel[:1] in ("C", "G", "D") and channel[1:].isalnum() and channel.isupper():
            return channel
        name = channel.lstrip("#")
        if not name:
            return None
        if name not in self._channels:
            self._channels[name] = f"C{len(self._channels) + 1:08d}"
        return self._channels[name]

    def _next_ts(self) -> str:
        self._ts += 1
        seconds, micros = divmod(self._ts * 100, 1_000_000)
        return f"{1_700_000_000 + seconds}.{micros:06d}"

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_id(str(args.get("channel") or ""))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        blocks = args.get("blocks")
        if isinstance(blocks, str):
            try:
                blocks = json.loads(blocks)
            except ValueError:
                return {"ok": False, "error": "invalid_blocks_format"}
        text = args.get("text")
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        if blocks is not None:
            errors = _block_errors(blocks)
            if errors:
                return {
                    "ok": False,
                    "error": "invalid_blocks",
                    "errors": errors,
                    "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]},
                }
        ts = self._next_ts()
        message: dict[str, Any] = {
            "user": BOT_USER,
            "type": "message",
            "ts": ts,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": text or "",
            "team": TEAM_ID,
        }
        if blocks is not None:
            message["blocks"] = blocks
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
            message["parent_user_id"] = BOT_USER
        self.messages.append(
            {
                "channel": channel,
                "ts": ts,
                "thread_ts": message.get("thread_ts"),
                "reply_broadcast": args.get("reply_broadcast") in (True, "true", "1", "True"),
                "text": message["text"],
                "blocks": blocks,
            }
        )
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _open(self, args: dict[str, Any]) -> dict[str, Any]:
        users = [u for u in str(args.get("users") or "").split(",") if u]
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        if len(users) > 1:
            return {"ok": False, "error": "not_supported_in_standin"}
        (user,) = users
        if user not in self.users.values():
            return {"ok": False, "error": "user_not_found"}
        if user in self._dms:
            return {
                "ok": True,
                "no_op": True,
                "already_open": True,
                "channel": {"id": self._dms[user]},
            }
        self._dms[user] = f"D{len(self._dms) + 1:08d}"
        return {"ok": True, "channel": {"id": self._dms[user]}}

    def _lookup(self, args: dict[str, Any]) -> dict[str, Any]:
        email = str(args.get("email") or "").lower()
        user = next((uid for mail, uid in self.users.items() if mail.lower() == email), None)
        if user is None:
            return {"ok": False, "error": "users_not_found"}
        name = email.split("@", 1)[0]
        return {
            "ok": True,
            "user": {
                "id": user,
                "team_id": TEAM_ID,
                "name": name,
                "deleted": False,
                "real_name": name.title(),
                "tz": "UTC",
                "is_bot": False,
                "profile": {"email": email, "real_name": name.title(), "display_name": name},
            },
        }
