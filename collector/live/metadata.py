"""Maintenance and capacity notices read on the node from the cloud's metadata service.

- AWS IMDS (IMDSv2: a session token first): `spot/instance-action`, the rebalance
  recommendation and `events/maintenance/scheduled`.
- GCE metadata server: `instance/maintenance-event`, `instance/upcoming-maintenance` and
  `instance/preempted`.
- Azure Instance Metadata Service: Scheduled Events.

Each poll returns what the service says now; the records' ids are built from the notice
itself, so the same notice read on every poll is stored once. They run in `whyjob agent`, on
the node they describe, which names the records' node.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any, Final

import orjson

from whyjob.collector.ingest import aws, azure, gce
from whyjob.collector.ingest.base import Context, IngestOptions, Item
from whyjob.collector.live.poller import Poll
from whyjob.core.evidence import Severity

__all__ = ["AwsImds", "AzureScheduledEvents", "GceMetadata"]

AWS_IMDS: Final = "http://169.254.169.254"
GCE_METADATA: Final = "http://metadata.google.internal"
AZURE_IMDS: Final = "http://169.254.169.254"
_TOKEN_TTL_S: Final = 21600


class _NotFound(Exception):
    """The path has nothing to say (404): no notice."""


def _request(url: str, headers: dict[str, str], timeout_s: float, method: str = "GET") -> bytes:
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _NotFound(url) from None
        raise


class AwsImds:
    """IMDSv2: a session token (renewed before it expires, or when refused), then the paths."""

    def __init__(
        self,
        node: str,
        options: IngestOptions | None = None,
        base: str = AWS_IMDS,
        timeout_s: float = 2.0,
    ) -> None:
        self.base = base.rstrip("/")
        self.node = node
        self.options = options or IngestOptions()
        self.timeout_s = timeout_s
        self._token: tuple[str, float] | None = None
        self._instance: str | None = None

    def _session(self) -> str:
        if self._token is None or self._token[1] < time.monotonic():
            token = _request(
                f"{self.base}/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL_S)},
                self.timeout_s,
                method="PUT",
            ).decode()
            self._token = (token, time.monotonic() + _TOKEN_TTL_S - 60)
        return self._token[0]

    def _get(self, path: str) -> bytes:
        try:
            return _request(
                f"{self.base}{path}", {"X-aws-ec2-metadata-token": self._session()}, self.timeout_s
            )
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
            self._token = None  # expired or revoked: one new token, one retry
            return _request(
                f"{self.base}{path}", {"X-aws-ec2-metadata-token": self._session()}, self.timeout_s
            )

    def __call__(self, checkpoint: str | None) -> Poll:
        if self._instance is None:
            self._instance = self._get("/latest/meta-data/instance-id").decode().strip()
        ctx = Context(
            f"imds:{self.node}", replace(self.options, node=self.node, instance=self._instance)
        )
        items: list[Item] = []
        for path in (
            "/latest/meta-data/spot/instance-action",
            "/latest/meta-data/events/recommendations/rebalance",
        ):
            try:
                document = orjson.loads(self._get(path))
            except _NotFound:
                continue
            items += aws.parse_imds_spot(ctx, document, None)
        try:
            scheduled = orjson.loads(self._get("/latest/meta-data/events/maintenance/scheduled"))
        except _NotFound:
            scheduled = []
        if scheduled:
            items += aws.parse_imds_scheduled(ctx, scheduled, None)
        return Poll(items)


class GceMetadata:
    """The metadata server's maintenance-event, upcoming-maintenance and preempted values."""

    def __init__(
        self,
        node: str,
        options: IngestOptions | None = None,
        base: str = GCE_METADATA,
        timeout_s: float = 2.0,
    ) -> None:
        self.base = base.rstrip("/")
        self.node = node
        self.options = options or IngestOptions()
        self.timeout_s = timeout_s
        # When a value that carries no time of its own was first read (kept in the checkpoint,
        # so a restarted agent dates it the same and stores nothing new).
        self._first_seen: dict[str, int] = {}

    def _first(self, key: str, now: int) -> int:
        return self._first_seen.setdefault(key, now)

    def _get(self, path: str) -> bytes:
        return _request(
            f"{self.base}/computeMetadata/v1/instance/{path}",
            {"Metadata-Flavor": "Google"},
            self.timeout_s,
        )

    def __call__(self, checkpoint: str | None) -> Poll:
        now = int(time.time() * 1000)
        if checkpoint and not self._first_seen:
            self._first_seen = {str(k): int(v) for k, v in orjson.loads(checkpoint).items()}
        ctx = Context(f"gce-metadata:{self.node}", replace(self.options, node=self.node, at=now))
        items: list[Item] = []
        event = self._get("maintenance-event").decode().strip()
        if event in ("", "NONE"):
            # Over: the next event, even of the same kind, is a new one with its own time.
            for key in [k for k in self._first_seen if k != "preempted"]:
                del self._first_seen[key]
        else:
            # The value holds while the event lasts; one record per event seen, dated when first
            # read (the service gives no time), kept by id on later polls.
            items.append(
                ctx.evidence(
                    source="gce.metadata",
                    native_id=f"{self.node}/maintenance-event/{event}",
                    version=str(self._first(event, now)),
                    ts=self._first(event, now),
                    kind="maintenance.scheduled",
                    message=f"GCE maintenance-event {event} on {self.node}",
                    severity=Severity.WARNING,
                    node=self.node,
                    instance_id=self.node,
                    attrs={"provider": "gce", "event": event, "state": "active"},
                )
            )
        try:
            upcoming = orjson.loads(self._get("upcoming-maintenance"))
        except _NotFound:
            upcoming = None
        if isinstance(upcoming, dict) and gce.looks_like_upcoming_maintenance(upcoming):
            items += gce.parse_upcoming_maintenance(ctx, upcoming, None)
        if self._get("preempted").decode().strip().upper() == "TRUE":
            first = self._first("preempted", now)
            items.append(
                ctx.evidence(
                    source="gce.metadata",
                    native_id=f"{self.node}/preempted",
                    version=str(first),
                    ts=first,
                    kind="spot.interruption",
                    message=f"GCE preempted {self.node} (metadata server)",
                    severity=Severity.WARNING,
                    node=self.node,
                    instance_id=self.node,
                    attrs={"provider": "gce", "action": "preempt"},
                )
            )
        return Poll(items, orjson.dumps(self._first_seen).decode())


class AzureScheduledEvents:
    """Azure IMDS Scheduled Events (Freeze, Reboot, Redeploy, Preempt, Terminate)."""

    def __init__(
        self,
        node: str,
        options: IngestOptions | None = None,
        base: str = AZURE_IMDS,
        timeout_s: float = 2.0,
    ) -> None:
        self.base = base.rstrip("/")
        self.node = node
        self.options = options or IngestOptions()
        self.timeout_s = timeout_s

    def __call__(self, checkpoint: str | None) -> Poll:
        body = _request(
            f"{self.base}/metadata/scheduledevents?api-version=2020-07-01",
            {"Metadata": "true"},
            self.timeout_s,
        )
        document: Any = orjson.loads(body)
        ctx = Context(f"azure-imds:{self.node}", replace(self.options, node=self.node))
        return Poll(list(azure.parse_scheduled_events(ctx, document, None)))
