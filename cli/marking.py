"""The node-marking loop of `whyjob collect` (the opt-in `mark_nodes:` section): every
`interval`, the nodes whose notices say the cloud is about to take them are labelled (and, with
`taint: true`, tainted NoSchedule) so schedulers start nothing new there; a node whose notice has
passed is unmarked. The decision is preflight's (explain/marking.py), the write the official
client's (collector/live/nodemarks.py); this module only joins the two."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whyjob.collector.live.nodemarks import NodeMarker
from whyjob.core.index import open_index
from whyjob.explain.marking import marks
from whyjob.explain.ruleset import RuleSet

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["MarkLoop"]

_RECENT_MS = 86_400_000  # the nodes considered: those that ran a pod in the last day


class MarkLoop:
    def __init__(
        self,
        index_path: Path | ElasticSettings,
        rules: RuleSet,
        marker: NodeMarker,
        settings: dict[str, Any],
        *,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        cluster: str | None = None,
    ) -> None:
        self.index_path, self.rules, self.marker = index_path, rules, marker
        self.cluster = cluster  # the one the marker's API client writes to
        self.window_ms = int(settings["window"] * 1000)
        self.interval_s = float(settings["interval"])
        self.say, self.clock = say, clock
        self._thread: threading.Thread | None = None

    def once(self) -> list[str]:
        """One round: decide from the index, then write the marks. Returns what changed."""
        now = int(self.clock() * 1000)
        with open_index(self.index_path, readonly=True) as index:
            nodes = set(index.node_spans(now - _RECENT_MS, now)) | self.marker.marked()
            wanted = marks(
                index, self.rules, nodes, now=now, window_ms=self.window_ms, cluster=self.cluster
            )
        return self.marker.apply({n: (m.value, m.reason) for n, m in wanted.items()})

    def start(self, stop: threading.Event) -> None:
        def run() -> None:
            while not stop.is_set():
                try:
                    for line in self.once():
                        self.say(f"mark_nodes: {line}")
                except Exception as exc:  # the API or the index is away: try again next round
                    self.say(f"mark_nodes: {type(exc).__name__}: {exc}")
                stop.wait(self.interval_s)

        self._thread = threading.Thread(target=run, name="whyjob-mark-nodes", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
