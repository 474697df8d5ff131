"""Timestamps: every source's spelling in, milliseconds since the epoch (UTC) out."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache

__all__ = [
    "format_duration",
    "format_ts",
    "parse_ts",
    "to_ms",
]

# RFC 3339 with up to nanosecond fractions (CRI logs, MicroTime); fromisoformat takes at most
# microseconds, so longer fractions are cut before parsing.
_FRACTION = re.compile(r"(\.\d{6})\d+")


def to_ms(moment: datetime) -> int:
    """An aware or naive (taken as UTC) datetime as epoch milliseconds."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@lru_cache(maxsize=65536)
def _minute(prefix: str) -> int:
    """Epoch ms of 'YYYY-MM-DDTHH:MM' (UTC): records within a minute share one parse."""
    return to_ms(datetime.fromisoformat(prefix).replace(tzinfo=UTC))


_recent: dict[str, int] = {}


def parse_ts(text: str) -> int:
    """Parse RFC 3339 / ISO 8601 (Kubernetes, AWS CLI, GCE) or RFC 1123 (IMDS, Azure) text.

    Raises ValueError naming the text when it is none of those. Exports repeat the same stamps
    many times over, so answers are remembered (a bounded dict: cheaper than an LRU).
    """
    found = _recent.get(text)
    if found is None:
        if len(_recent) >= 100_000:
            _recent.clear()
        found = _recent[text] = _parse(text)
    return found


def _parse(text: str) -> int:
    """The common UTC form (`2026-03-04T10:11:12Z`, `...12.123456Z`) is a cached minute plus
    seconds; everything else goes through datetime and email.utils."""
    if (
        len(text) >= 20
        and text[-1] == "Z"
        and text[10] == "T"
        and text[16] == ":"
        and text[19] in "Z."
        and text[17:19].isdigit()
    ):
        try:
            millis = _minute(text[:16]) + int(text[17:19]) * 1000
        except ValueError:
            raise ValueError(f"not a timestamp: {text!r}") from None
        if text[19] == ".":
            fraction = text[20:-1]
            if not fraction.isdigit():
                raise ValueError(f"not a timestamp: {text!r}")
            millis += int(fraction[:3].ljust(3, "0"))
        return millis
    return _parse_slow(text)


@lru_cache(maxsize=4096)
def _parse_slow(text: str) -> int:
    value = text.strip()
    if not value:
        raise ValueError("empty timestamp")
    if value[0].isdigit():
        iso = _FRACTION.sub(r"\1", value.replace(",", ".", 1) if "," in value[:26] else value)
        try:
            return to_ms(datetime.fromisoformat(iso))
        except ValueError:
            pass
    from email.utils import (
        parsedate_to_datetime,  # RFC 1123 (IMDS, Azure): rare, and slow to import
    )

    try:
        return to_ms(parsedate_to_datetime(value))
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"not a timestamp: {text!r}") from None


def format_ts(ms: int | None, *, precise: bool = False) -> str:
    """Epoch milliseconds as ISO 8601 UTC with a Z (seconds unless `precise`)."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    if precise:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(ms: int) -> str:
    """A short human duration: 45s, 12m 03s, 3h 07m, 2d 4h."""
    seconds = max(0, ms) // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"
