"""Cloud metadata services as a node sees them, on a loopback port: AWS IMDS (IMDSv2 session
tokens required, as on instances that enforce them), the GCE metadata server (the
`Metadata-Flavor: Google` header required) and Azure IMDS Scheduled Events (`Metadata: true`
required). Tests set `documents[path] = bytes` (absent: 404) and read `requests`."""

from __future__ import annotations

import secrets
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.standins.services import LoopbackServer

__all__ = ["MetadataService"]


class MetadataService(LoopbackServer):
    def __init__(self, cloud: str) -> None:
        assert cloud in ("aws", "gce", "azure")
        self.cloud = cloud
        self.documents: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.tokens: set[str] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                owner.requests.append(("PUT", self.path, dict(self.headers)))
                if owner.cloud == "aws" and self.path == "/latest/api/token":
                    if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                        self._answer(400, b"missing TTL")
                        return
                    token = secrets.token_urlsafe(32)
                    owner.tokens.add(token)
                    self._answer(200, token.encode())
                    return
                self._answer(405, b"")

            def do_GET(self) -> None:
                owner.requests.append(("GET", self.path, dict(self.headers)))
                if (
                    owner.cloud == "aws"
                    and self.headers.get("X-aws-ec2-metadata-token") not in owner.tokens
                ):
                    self._answer(401, b"")
                    return
                if owner.cloud == "gce" and self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, b"Missing Metadata-Flavor:Google header.")
                    return
                if owner.cloud == "azure" and self.headers.get("Metadata") != "true":
                    self._answer(
                        400, b'{"error": "Bad request. Required metadata header not specified"}'
                    )
                    return
                body = owner.documents.get(self.path)
                if body is None:
                    self._answer(404, b"Not Found")
                else:
                    self._answer(200, body)

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._serve(Handler)
