"""GPU health from dcgm-exporter: through Prometheus's HTTP API, or by scraping exporters.

The series that matter (the last Xid and the per-code Xid counts, double-bit ECC, row remaps,
NVLink errors, clock-event reasons, temperature) are read over the range since the last poll,
so a blip between two polls is not missed, and go through the same parser as `whyjob ingest` of
a Prometheus answer. Only changes become evidence (an Xid, an ECC count going up, a thermal
slowdown), each mapped to its node and pod through the exporter's labels and carrying the query
that shows the raw series in Prometheus; the series themselves stay there.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import orjson

from whyjob.collector.ingest import dcgm
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.live.poller import Poll
from whyjob.core.evidence import Evidence

__all__ = ["DCGM_QUERY", "DcgmScrape", "PrometheusDcgm"]

_SERIES: Final = (
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_GPU_TEMP",
)
DCGM_QUERY: Final = '{__name__=~"' + "|".join(_SERIES) + '"}'
# Prometheus answers at most 11,000 points per series; after a long outage, catch up in pieces.
_MAX_POINTS: Final = 10_000


def _get(url: str, timeout_s: float) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json, text/plain"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body: bytes = response.read()
        return body


class PrometheusDcgm:
    """Polls `query_range` from the end of the last poll to now, every `interval`."""

    def __init__(
        self,
        url: str,
        options: IngestOptions | None = None,
        *,
        step_s: float = 15.0,
        query: str = DCGM_QUERY,
        timeout_s: float = 30.0,
        first_lookback_s: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.step_s = step_s
        self.query = query
        self.timeout_s = timeout_s
        self.first_lookback_s = first_lookback_s
        # One context for every poll: the parser keeps each series' last value in its memory.
        self.ctx = Context(
            f"prometheus:{self.url}",
            options or IngestOptions(),
            path_hints={"query": query},
            memory={dcgm.EVENTS_ONLY: True},
        )
        self._primed = False

    def _answer(self, path: str, **params: str) -> Any:
        body = _get(f"{self.url}{path}?{urllib.parse.urlencode(params)}", self.timeout_s)
        document = orjson.loads(body)
        document["query"] = self.query
        return document

    def __call__(self, checkpoint: str | None) -> Poll:
        now = time.time()
        if checkpoint and not self._primed:
            # After a restart: learn the values as they were at the last poll, so what was
            # already recorded is not recorded again as a change.
            answer = self._answer(
                "/api/v1/query", query=self.query, time=f"{int(checkpoint) / 1000:.3f}"
            )
            for _ in dcgm.parse_prometheus_api(self.ctx, answer, None):
                pass
        self._primed = True
        start = int(checkpoint) / 1000 + self.step_s if checkpoint else now - self.first_lookback_s
        if start > now:
            return Poll([], checkpoint)
        # After a long outage, catch up one query's worth at a time (the next polls go on).
        end = min(now, start + self.step_s * _MAX_POINTS)
        answer = self._answer(
            "/api/v1/query_range",
            query=self.query,
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step=f"{self.step_s:g}",
        )
        items = [
            _linked(item, self.url, self.query)
            for item in dcgm.parse_prometheus_api(self.ctx, answer, None)
        ]
        newest = max((i.ts for i in items if isinstance(i, Evidence)), default=None)
        return Poll(items, str(int(end * 1000)), newest)


def _linked(item: Item, url: str, query: str) -> Item:
    """A problem record with the Prometheus graph link that shows its series around the time."""
    if not isinstance(item, Evidence) or item.gpu_uuid is None:
        return item
    metric = item.attrs.get("metric")
    expr = f'{metric}{{UUID="{item.gpu_uuid}"}}' if isinstance(metric, str) else query
    link = f"{url}/graph?" + urllib.parse.urlencode(
        {
            "g0.expr": expr,
            "g0.moment_input": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(item.ts / 1000)),
            "g0.range_input": "1h",
            "g0.tab": "0",
        }
    )
    return replace(item, attrs={**item.attrs, "prometheus": link})


class DcgmScrape:
    """Scrapes dcgm-exporter endpoints directly (`http://NODE:9400/metrics`) where no
    Prometheus runs; each scrape is stamped with the time it was taken."""

    def __init__(
        self, targets: Sequence[str], options: IngestOptions | None = None, timeout_s: float = 10.0
    ) -> None:
        self.targets = tuple(targets)
        self.options = options or IngestOptions()
        self.timeout_s = timeout_s
        self.memory: dict[str, Any] = {dcgm.EVENTS_ONLY: True}

    def __call__(self, checkpoint: str | None) -> Poll:
        items: list[Item] = []
        for target in self.targets:
            at = int(time.time() * 1000)
            try:
                text = _get(target, self.timeout_s).decode("utf-8", "replace")
            except OSError as exc:
                items.append(Rejected(None, f"scrape of {target} failed: {exc}"))
                continue
            ctx = Context(f"scrape:{target}", replace(self.options, at=at), memory=self.memory)
            lines = enumerate(text.split("\n"), start=1)
            items += dcgm.parse_prometheus_text(ctx, lines)
        return Poll(items, None, None)
