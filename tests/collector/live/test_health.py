"""whyjob's own endpoint: Prometheus metrics through prometheus_client, liveness, and readiness
that asks the index."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from whyjob.collector.live.health import Health, MetricsServer
from whyjob.core.index import SqliteIndex
from whyjob.core.index.probe import IndexProbe, check_index


def _health() -> Health:
    health = Health()
    health.ok("k8s/pods", lag_s=1.5)
    health.error("asg", "throttled")
    health.count("k8s/pods", "records", 41)
    health.count("k8s/pods", "records")
    health.gauge("writer_queue", 3)
    return health


def test_metrics_are_the_health_counters_in_the_prometheus_text_format() -> None:
    server = MetricsServer(_health()).start()
    try:
        host, port = server.address
        answer = httpx.get(f"http://{host}:{port}/metrics")
    finally:
        server.stop()
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }
    assert samples[("whyjob_collector_up", (("collector", "k8s/pods"),))] == 1
    assert samples[("whyjob_collector_up", (("collector", "asg"),))] == 0
    assert samples[("whyjob_collector_lag_seconds", (("collector", "k8s/pods"),))] == 1.5
    events = ("whyjob_collector_events_total", (("collector", "k8s/pods"), ("what", "records")))
    assert samples[events] == 42
    assert (
        samples[("whyjob_collector_events_total", (("collector", "asg"), ("what", "errors")))] == 1
    )
    assert samples[("whyjob_writer_queue", ())] == 3
    assert 'whyjob_collector_up{collector="k8s/pods"} 1' in answer.text


def test_openmetrics_is_answered_to_a_scraper_that_asks_for_it() -> None:
    server = MetricsServer(_health()).start()
    try:
        host, port = server.address
        answer = httpx.get(
            f"http://{host}:{port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
    finally:
        server.stop()
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.endswith("# EOF\n")


def test_liveness_and_readiness() -> None:
    health = _health()
    reasons: list[str | None] = [None]
    server = MetricsServer(health, probe=lambda: reasons[-1]).start()
    base = "http://{}:{}".format(*server.address)
    try:
        assert httpx.get(f"{base}/livez").status_code == 200
        assert httpx.get(f"{base}/healthz").json()["collectors"]["asg"]["up"] is False
        ready = httpx.get(f"{base}/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True  # one source is up

        reasons.append("the index does not answer: IndexProblem: no index at /x")
        ready = httpx.get(f"{base}/readyz")
        assert ready.status_code == 503 and "no index at /x" in ready.json()["reason"]
        assert httpx.get(f"{base}/livez").status_code == 200  # not ready is not dead

        reasons.append(None)
        health.error("k8s/pods", "connection refused")  # now no source is up
        health.error("receiver", "400: not OTLP", down=False)
        ready = httpx.get(f"{base}/readyz")
        # Still ready: the agents' records go on arriving whatever the sources are doing.
        assert ready.status_code == 200 and ready.json() == {"ready": True, "reason": None}
        detail = httpx.get(f"{base}/healthz").json()["collectors"]
        assert detail["k8s/pods"]["last_error"] == "connection refused"
        assert "collectors" not in httpx.get(f"{base}/livez").json()  # the probes' verdict only

        health.fatal = "the index writer stopped: OSError: disk full"
        assert httpx.get(f"{base}/livez").status_code == 503
        assert httpx.get(f"{base}/readyz").json()["reason"] == health.fatal
        assert httpx.get(f"{base}/nothing").status_code == 404
    finally:
        server.stop()


def test_readiness_is_not_about_sources() -> None:
    """A receiver-only collector whose first post was bad must stay in its Service, or no good
    post could ever arrive to clear it."""
    assert Health().not_ready() is None  # a receiver no agent has sent to yet
    health = Health()
    health.error("receiver", "400: not OTLP", down=False)
    health.error("writer", "index busy, retrying in 1 s", down=False)
    health.error("kubernetes", "connection refused")
    assert health.not_ready() is None
    health.fatal = "the index writer stopped"
    assert health.not_ready() == "the index writer stopped"


def test_check_index_opens_the_index_and_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    missing = check_index(path)
    assert missing is not None and "no index at" in missing
    with SqliteIndex(path):
        pass
    assert check_index(path) is None
    path.write_bytes(b"not a database, just sixteen+ bytes of junk")
    broken = check_index(path)
    assert broken is not None and "not a usable whyjob index" in broken


def test_the_index_probe_does_not_hang_on_an_index_that_does_not_answer(tmp_path: Path) -> None:
    release = threading.Event()
    calls: list[float] = []

    def hanging(location: object) -> str | None:
        calls.append(time.monotonic())
        release.wait(10)
        return None

    probe = IndexProbe(tmp_path / "index.sqlite", every_s=60, timeout_s=0.2, check=hanging)
    started = time.monotonic()
    assert probe() == "the index did not answer within 0.2 s"
    assert probe() == "the index did not answer within 0.2 s"
    assert time.monotonic() - started < 2 and len(calls) == 1  # one check in flight, not two
    release.set()
    deadline = time.monotonic() + 5
    while probe() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert probe() is None and len(calls) == 1  # answered from the last check for every_s


def test_a_taken_port_fails_in_the_caller() -> None:
    first = MetricsServer(Health()).start()
    try:
        host, port = first.address
        try:
            MetricsServer(Health(), host, port)
        except OSError:
            pass
        else:
            raise AssertionError("a second endpoint bound the same port")
    finally:
        first.stop()


def test_the_index_probe_keeps_good_news_and_asks_again_after_bad(tmp_path: Path) -> None:
    answers = ["down", None, "down"]
    calls: list[str | None] = []

    def check(location: object) -> str | None:
        calls.append(answers[len(calls)])
        return calls[-1]

    probe = IndexProbe(tmp_path / "index.sqlite", every_s=60, check=check)
    assert probe() == "down"
    assert probe() is None  # not ready is checked again at once: back as soon as the index is
    assert probe() is None and len(calls) == 2  # ready is kept for every_s
