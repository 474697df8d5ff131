"""One collector failing (at start, or on every poll for a while) never stops the others."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.standins.services import free_port
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.live.config import CollectConfig
from whyjob.collector.live.health import Health
from whyjob.collector.live.poller import Poll, Poller
from whyjob.collector.live.runner import Collector, start_collectors
from whyjob.collector.live.sink import Writer
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex

T = 1_795_000_000_000


def _record(source: str, n: int) -> Evidence:
    return Evidence(
        evidence_id(source, str(n)), T + n, source, "kernel.io", f"{source} {n}", node="gpu-node-7"
    )


def test_a_broken_collector_is_reported_and_the_others_carry_on(tmp_path: Path) -> None:
    calls = {"flaky": 0}

    def broken(*_: Any) -> Collector:
        raise RuntimeError("kubeconfig not found")

    def flaky_poll(checkpoint: str | None) -> Poll:
        calls["flaky"] += 1
        if calls["flaky"] <= 2:
            raise ConnectionError("connection refused")
        return Poll([_record("flaky", calls["flaky"])], str(calls["flaky"]))

    def poller(name: str, poll: Any) -> Any:
        def build(
            settings: Mapping[str, Any],
            writer: Writer,
            health: Health,
            checkpoints: Mapping[str, str],
            ingest: IngestOptions,
        ) -> Collector:
            return Poller(name, poll, 0.05, writer, health)

        return build

    port = free_port()
    config = CollectConfig(
        tmp_path / "config.yaml",
        metrics_listen=("127.0.0.1", port),
        collectors={"broken": {}, "flaky": {}, "steady": {}},
    )
    log = io.StringIO()
    running = start_collectors(
        config,
        tmp_path / "index.sqlite",
        IngestOptions(),
        log=log,
        builders={
            "broken": broken,
            "flaky": poller("flaky", flaky_poll),
            "steady": poller("steady", lambda checkpoint: Poll([_record("steady", 1)], "1")),
        },
    )
    try:
        deadline = time.monotonic() + 20
        while calls["flaky"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        running.writer.flush()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            metrics = response.read().decode()
        # Ready: the index (a real SQLite file) answers; /healthz details each collector.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz") as response:
            ready = json.loads(response.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as response:
            ready["collectors"] = json.loads(response.read())["collectors"]
    finally:
        running.stop()
    assert (
        "whyjob collect: broken: cannot start: RuntimeError: kubeconfig not found" in log.getvalue()
    )
    assert "whyjob collect: flaky: ConnectionError: connection refused" in log.getvalue()
    assert 'whyjob_collector_up{collector="broken"} 0' in metrics
    assert 'whyjob_collector_up{collector="flaky"} 1' in metrics  # recovered after two failures
    assert 'whyjob_collector_events_total{collector="flaky",what="errors"} 2' in metrics
    assert 'whyjob_collector_up{collector="steady"} 1' in metrics
    assert ready["ready"] is True and ready["collectors"]["broken"]["up"] is False
    with SqliteIndex(tmp_path / "index.sqlite", readonly=True) as index:
        sources = {row[0] for row in index._db.execute("SELECT source FROM evidence")}
        assert sources == {"flaky", "steady"}
        assert index.checkpoint("steady") == "1"


def test_a_cluster_named_later_goes_on_from_the_resume_points_kept_without_it(
    tmp_path: Path,
) -> None:
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        index.set_checkpoint("k8s/pods", "rv-7")  # kept before `cluster:` was set
        index.set_checkpoint("k8s/events", "rv-1")
        index.set_checkpoint("us-east|k8s/events", "rv-9")  # its own wins where it has one
        index.set_checkpoint("eu-west|k8s/pods", "rv-500")  # another cluster's, never read
    seen: dict[str, str] = {}

    def build(
        settings: Mapping[str, Any],
        writer: Writer,
        health: Health,
        checkpoints: Mapping[str, str],
        ingest: IngestOptions,
    ) -> Collector:
        seen.update(checkpoints)
        return Poller("probe", lambda checkpoint: Poll([], checkpoint), 0.05, writer, health)

    config = CollectConfig(tmp_path / "config.yaml", collectors={"probe": {}})
    running = start_collectors(
        config,
        tmp_path / "index.sqlite",
        IngestOptions(cluster="us-east"),
        builders={"probe": build},
    )
    running.stop()
    assert seen["k8s/pods"] == "rv-7" and seen["k8s/events"] == "rv-9"
    assert "rv-500" not in seen.values()
