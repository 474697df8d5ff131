"""Simulated time, and every timestamp spelling the exports use.

The simulator keeps one true timeline in integer microseconds since the epoch (UTC). Each
*source* (the API server's events, the kubelet's pod status, a node's own clock for its kernel
and container logs, the cloud APIs, dcgm-exporter) reads that timeline through a fixed skew, as
real clocks do, and spells the result the way its tool prints it. Integers keep every run
byte-identical; floats would too, but are easy to round differently in two places.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

__all__ = [
    "HOUR",
    "MINUTE",
    "MS",
    "SECOND",
    "Clocks",
    "aws_cli",
    "cri",
    "gce",
    "glog",
    "imds_ec2",
    "journal",
    "py_logging",
    "rfc1123",
    "rfc3339",
    "rfc3339_micro",
    "torchrun_time",
    "unix_seconds",
]

MS = 1_000
SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _dt(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def rfc3339(us: int) -> str:
    """Kubernetes `metav1.Time`: whole seconds with a Z."""
    return _dt(us).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(us: int) -> str:
    """Kubernetes `metav1.MicroTime` (eventTime, series.lastObservedTime)."""
    return _dt(us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cri(us: int, salt: int) -> str:
    """containerd's CRI log stamp: nanoseconds, Z. The last three digits come from `salt`."""
    return _dt(us).strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{salt % 1000:03d}Z"


def aws_cli(us: int) -> str:
    """AWS CLI v2 JSON output: Python isoformat with +00:00, microseconds only when non-zero."""
    return _dt(us).isoformat()


def gce(us: int, utc_offset_hours: int) -> str:
    """gcloud operation times: RFC 3339 with milliseconds and the zone's local offset."""
    local = _dt(us).astimezone(timezone(timedelta(hours=utc_offset_hours)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S.") + f"{local.microsecond // 1000:03d}"
    sign = "-" if utc_offset_hours < 0 else "+"
    return f"{text}{sign}{abs(utc_offset_hours):02d}:00"


def rfc1123(us: int) -> str:
    """Azure IMDS and EC2 IMDS: `Mon, 19 Sep 2016 18:29:47 GMT`."""
    return _dt(us).strftime("%a, %d %b %Y %H:%M:%S GMT")


def imds_ec2(us: int) -> str:
    """EC2 IMDS scheduled-event times: `21 Jan 2019 09:00:43 GMT`."""
    return _dt(us).strftime("%d %b %Y %H:%M:%S GMT")


def journal(us: int) -> str:
    """`journalctl -o short-iso`: seconds and a +0000 offset."""
    return _dt(us).strftime("%Y-%m-%dT%H:%M:%S+0000")


def py_logging(us: int) -> str:
    """Python logging's default asctime: `2026-03-04 10:11:12,345`."""
    moment = _dt(us)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"


def glog(us: int, *, nanos: bool = False, salt: int = 0) -> str:
    """glog/c10 prefix after the level letter: `0304 10:11:12.345678` (or 9 digits)."""
    moment = _dt(us)
    text = moment.strftime("%m%d %H:%M:%S.%f")
    return text + f"{salt % 1000:03d}" if nanos else text


def torchrun_time(us: int) -> str:
    """The `time :` field of torchrun's failure summary: `2026-03-04_10:11:12`."""
    return _dt(us).strftime("%Y-%m-%d_%H:%M:%S")


def unix_seconds(us: int) -> int:
    return us // SECOND


@dataclass
class Clocks:
    """Fixed per-source offsets (microseconds), drawn once per bundle.

    Sources are named: `events`, `kubelet`, `cloud`, `dcgm`, and `node/<name>` for a node's own
    clock (its kernel log and its containers' CRI logs). Each offset is drawn from its own
    generator seeded by the source name, so it does not depend on which source is read first
    (turning noise off must not move the experiment's clocks).
    """

    seed: str
    max_skew: int = 5 * SECOND
    offsets: dict[str, int] = field(default_factory=dict)

    def offset(self, source: str) -> int:
        if source not in self.offsets:
            draw = random.Random(f"{self.seed}/clock/{source}")
            self.offsets[source] = draw.randint(-self.max_skew, self.max_skew)
        return self.offsets[source]

    def read(self, source: str, us: int) -> int:
        """What `source`'s clock showed at true time `us`."""
        return us + self.offset(source)

    def node(self, node_name: str, us: int) -> int:
        return self.read(f"node/{node_name}", us)
