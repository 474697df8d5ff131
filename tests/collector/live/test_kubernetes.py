"""The Kubernetes collector: the official client against a local API server stand-in that speaks
the real list/watch protocol (tests/standins/kubeapi.py), writing into a real SQLite index."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.standins.kubeapi import KubeAPI, make_core_event, make_node, make_pod
from whyjob.collector.live.health import Health
from whyjob.collector.live.kubernetes import (
    KubernetesCollector,
    KubernetesOptions,
    api_client_from,
)
from whyjob.collector.live.sink import Writer
from whyjob.core.index import SqliteIndex

NODE = "ip-10-0-1-17.ec2.internal"


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI(bookmark_interval=0.2) as server:
        yield server


@dataclass
class Run:
    collector: KubernetesCollector
    writer: Writer
    health: Health
    index: SqliteIndex
    stop: threading.Event

    def halt(self) -> None:
        self.stop.set()
        self.collector.join(10)
        self.writer.stop()


Start = Callable[..., Run]


def _launch(kubeconfig: Path, index_path: Path, options: KubernetesOptions) -> Run:
    """A collector writing into the index file, started, with what a test needs to stop it."""
    index = SqliteIndex(index_path)
    health = Health()
    writer = Writer(index, health).start()
    collector = KubernetesCollector(
        api_client_from({"kubeconfig": kubeconfig}), writer, health, index.checkpoints(), options
    )
    run = Run(collector, writer, health, index, threading.Event())
    collector.start(run.stop)
    return run


@pytest.fixture
def start(api: KubeAPI, tmp_path: Path) -> Iterator[Start]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    runs: list[Run] = []

    def begin(**options: object) -> Run:
        settings = KubernetesOptions(watch_timeout_s=30, batch_wait_s=0.05, **options)  # type: ignore[arg-type]
        run = _launch(kubeconfig, tmp_path / "index.sqlite", settings)
        runs.append(run)
        return run

    yield begin
    for run in runs:
        if not run.stop.is_set():
            run.halt()
        run.index.close()


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def _count(index: SqliteIndex, kind: str) -> int:
    return int(
        index._db.execute("SELECT count(*) FROM evidence WHERE kind = ?", (kind,)).fetchone()[0]
    )


def _event_names(index: SqliteIndex) -> list[str]:
    rows = index._db.execute(
        "SELECT raw.body FROM evidence JOIN raw USING (seq) WHERE evidence.kind = 'k8s.event'"
    )
    import orjson

    return sorted(orjson.loads(body)["metadata"]["name"] for (body,) in rows)


def _events(api: KubeAPI, n: int, prefix: str) -> list[str]:
    names = []
    for i in range(n):
        event = make_core_event(
            "ml",
            f"gpt-{prefix}-worker-0",
            "BackOff",
            f"Back-off restarting failed container ({prefix} {i})",
            type="Warning",
            host=NODE,
            name=f"gpt-{prefix}-worker-0.{prefix}{i:05d}",
        )
        api.create("events", event)
        names.append(event["metadata"]["name"])
    return names


def test_list_then_watch_stores_every_object_once(api: KubeAPI, start: Start) -> None:
    api.create("nodes", make_node(NODE))
    api.create("pods", make_pod("ml", "gpt-a-worker-0", NODE))
    before = _events(api, 30, "a")
    # Both Event APIs: the same objects, so the same records, each stored once.
    run = start(page_size=7, resources=("events", "events.k8s.io", "pods", "nodes"))
    api.wait_for_watchers(4)
    after = _events(api, 20, "b")
    run.writer.flush()
    _wait(lambda: len(_event_names(run.index)) == 50)
    run.halt()
    assert _event_names(run.index) == sorted(before + after)
    assert _count(run.index, "pod.snapshot") == 1 and _count(run.index, "node.snapshot") == 1
    # Every resource resumes from where its last committed batch ended.
    assert set(run.index.checkpoints("kubernetes/")) == {
        "kubernetes/events",
        "kubernetes/events.k8s.io",
        "kubernetes/pods",
        "kubernetes/nodes",
    }
    assert int(run.index.checkpoint("kubernetes/events") or 0) >= int(api.resource_version) - 5


def test_a_dropped_watch_resumes_from_its_resource_version(api: KubeAPI, start: Start) -> None:
    run = start(resources=("events",))
    api.wait_for_watchers(1)
    first = _events(api, 25, "c")
    _wait(lambda: len(_event_names(run.index)) == 25 or not run.writer.flush())
    assert api.drop_watches() == 1  # a load balancer cuts the stream mid-chunk
    second = _events(api, 25, "d")
    api.wait_for_watchers(1)
    _wait(lambda: (run.writer.flush() or True) and len(_event_names(run.index)) == 50)
    run.halt()
    assert _event_names(run.index) == sorted(first + second)
    lists = [r for r in api.requests if r.path == "/api/v1/events" and "watch" not in r.query]
    assert len(lists) == 1, "a dropped connection resumes the watch; it does not relist"
    assert run.health.counters[("kubernetes/events", "reconnects")] >= 1


def test_410_gone_relists_without_duplicates(api: KubeAPI, start: Start) -> None:
    run = start(resources=("events",))
    api.wait_for_watchers(1)
    first = _events(api, 10, "e")
    _wait(lambda: (run.writer.flush() or True) and len(_event_names(run.index)) == 10)
    run.halt()
    resume = run.index.checkpoint("kubernetes/events")
    # While the collector is down, more happens and the server compacts its history.
    second = _events(api, 10, "f")
    api.compact()
    run.index.close()
    again = start(resources=("events",))
    api.wait_for_watchers(1)
    third = _events(api, 5, "g")
    _wait(lambda: (again.writer.flush() or True) and len(_event_names(again.index)) == 25)
    again.halt()
    assert _event_names(again.index) == sorted(first + second + third)  # each exactly once
    assert again.health.counters[("kubernetes/events", "expired")] == 1
    watches = [r for r in api.requests if r.path == "/api/v1/events" and "watch" in r.query]
    assert any(r.query.get("resourceVersion") == resume for r in watches)


def test_throttling_is_waited_out(api: KubeAPI, start: Start) -> None:
    _events(api, 3, "h")
    # urllib3 under the client retries a 429 three times by itself, honouring Retry-After; the
    # fourth reaches the collector as ApiException(status=429), which waits and tries again.
    api.throttle(6, retry_after=0)
    run = start(resources=("events",))
    _wait(lambda: (run.writer.flush() or True) and len(_event_names(run.index)) == 3)
    run.halt()
    assert run.health.counters[("kubernetes/events", "throttled")] == 1
    lists = [r for r in api.requests if r.path == "/api/v1/events" and "watch" not in r.query]
    assert len(lists) == 7  # six answered 429, then the one that worked


def test_capture_at_failure_time_keeps_the_log_and_the_node(api: KubeAPI, start: Start) -> None:
    api.create("nodes", make_node(NODE, ready="False"))
    running = make_pod("ml", "gpt-z-worker-1", NODE, job="gpt-z")
    api.create("pods", running)
    run = start(resources=("pods",))
    api.wait_for_watchers(1)
    now = datetime.now(UTC)
    api.set_log(
        "ml",
        "gpt-z-worker-1",
        "pytorch",
        "step 1200 | loss 2.31\n[rank9]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
        previous=True,
        start=now - timedelta(seconds=5),
    )
    restarted = make_pod(
        "ml",
        "gpt-z-worker-1",
        NODE,
        job="gpt-z",
        uid=running["metadata"]["uid"],
        restart_count=1,
        last_terminated={
            "exitCode": 1,
            "reason": "Error",
            "finishedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    api.update("pods", restarted)
    _wait(lambda: (run.writer.flush() or True) and _count(run.index, "log.error") == 1)
    run.halt()
    (row,) = run.index._db.execute(
        "SELECT pod_uid, container, attrs FROM evidence WHERE kind = 'log.error'"
    ).fetchall()
    assert row[0] == running["metadata"]["uid"] and row[1] == "pytorch"
    assert '"restart":0' in row[2]  # the ended run's log, not the new one's
    logs = [r for r in api.requests if r.path.endswith("/pods/gpt-z-worker-1/log")]
    assert logs and logs[0].query.get("previous") == "true"
    assert _count(run.index, "node.condition") >= 1  # the node, fetched at that moment


def test_kill_9_mid_stream_then_restart_loses_and_duplicates_nothing(
    api: KubeAPI, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys

    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    index_path = tmp_path / "index.sqlite"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"index: {index_path}\nmetrics: {{listen: 'off'}}\n"
        f"collectors:\n  kubernetes:\n    kubeconfig: {kubeconfig}\n    resources: [events]\n"
    )
    whyjob = [str(Path(sys.executable).parent / "whyjob"), "--config", str(config), "collect"]
    created: list[str] = []
    producing = threading.Event()

    def produce() -> None:
        for i in range(2400):
            created.extend(_events(api, 1, f"k{i:04d}"))
            time.sleep(0.001)
        producing.set()

    def stored() -> int:
        if not index_path.exists():
            return 0
        with SqliteIndex(index_path, readonly=True) as reader:
            return _count(reader, "k8s.event")

    log = (tmp_path / "collect.log").open("w")
    first = subprocess.Popen(whyjob, stderr=log)
    try:
        api.wait_for_watchers(1, timeout=20)
        threading.Thread(target=produce, daemon=True).start()
        _wait(lambda: stored() >= 300, timeout=30)
        os.kill(first.pid, signal.SIGKILL)  # mid-stream: no clean shutdown, no final commit
        first.wait(10)
    finally:
        first.kill()
    at_kill = stored()
    with SqliteIndex(index_path, readonly=True) as reader:
        resume = reader.checkpoint("kubernetes/events")
    second = subprocess.Popen(whyjob, stderr=log)
    try:
        producing.wait(30)
        _wait(lambda: stored() == len(created), timeout=30)
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0, (tmp_path / "collect.log").read_text()
    finally:
        second.kill()
        log.close()
    assert at_kill < len(created), "the kill came mid-stream"
    with SqliteIndex(index_path, readonly=True) as reader:
        assert _event_names(reader) == sorted(created)  # every event, each exactly once
        assert reader._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    lists = [r for r in api.requests if r.path == "/api/v1/events" and "watch" not in r.query]
    watches = [r for r in api.requests if r.path == "/api/v1/events" and "watch" in r.query]
    assert len(lists) == 1, "the restart resumed the watch from the committed resourceVersion"
    assert any(r.query.get("resourceVersion") == resume for r in watches[1:])


def _watches(api: KubeAPI, path: str = "/api/v1/events") -> list[dict[str, str]]:
    return [r.query for r in api.requests if r.path == path and "watch" in r.query]


def test_a_cut_watch_resumes_after_the_last_event_it_received(api: KubeAPI, start: Start) -> None:
    run = start(resources=("events",))
    api.wait_for_watchers(1)
    started_at = _watches(api)[-1]["resourceVersion"]
    _events(api, 10, "r")
    _wait(lambda: (run.writer.flush() or True) and len(_event_names(run.index)) == 10)
    received = str(api.resource_version)
    assert api.drop_watches() == 1
    _wait(lambda: len(_watches(api)) == 2)
    run.halt()
    resumed = _watches(api)[-1]["resourceVersion"]
    # Not from where the cut watch started: that would replay ten events, and, after a
    # compaction, end in 410 and a relist.
    assert int(resumed) > int(started_at) and int(resumed) >= int(received) - 1


def test_cuts_of_a_healthy_watch_do_not_escalate_the_back_off(api: KubeAPI, start: Start) -> None:
    run = start(resources=("events",))
    api.wait_for_watchers(1)
    for n in range(8):  # without a reset the eighth wait would be up to a minute
        _events(api, 1, f"s{n}")
        _wait(lambda n=n: (run.writer.flush() or True) and len(_event_names(run.index)) == n + 1)
        assert api.drop_watches() == 1
        api.wait_for_watchers(1, timeout=5)
    run.halt()
    assert run.health.counters[("kubernetes/events", "reconnects")] >= 8


def test_a_silent_watch_is_taken_as_hung_and_reopened(tmp_path: Path) -> None:
    """No bookmark for longer than watch_silence: the watch is reopened from where it was,
    and what happens next is still collected."""
    with KubeAPI(bookmark_interval=3600) as server:
        index = SqliteIndex(tmp_path / "index.sqlite")
        health = Health()
        writer = Writer(index, health).start()
        options = KubernetesOptions(
            watch_timeout_s=300, watch_silence_s=0.5, batch_wait_s=0.05, resources=("events",)
        )
        collector = KubernetesCollector(
            api_client_from({"kubeconfig": server.write_kubeconfig(tmp_path / "kubeconfig")}),
            writer,
            health,
            {},
            options,
        )
        stop = threading.Event()
        collector.start(stop)
        try:
            _wait(lambda: len(_watches(server)) >= 3)  # reopened twice in silence
            names = _events(server, 3, "t")
            _wait(lambda: (writer.flush() or True) and _event_names(index) == sorted(names))
        finally:
            stop.set()
            collector.join(10)
            writer.stop()
            index.close()
        lists = [
            r for r in server.requests if r.path == "/api/v1/events" and "watch" not in r.query
        ]
        assert len(lists) == 1  # reopened from its resourceVersion, never relisted


def test_a_poisoned_pod_is_quarantined_and_the_stream_goes_on(api: KubeAPI, start: Start) -> None:
    run = start(resources=("pods",))
    api.wait_for_watchers(1)
    poisoned = make_pod("ml", "gpt-p-worker-0", NODE)
    poisoned["status"]["containerStatuses"] = ["not an object"]
    api.create("pods", poisoned)
    api.create("pods", make_pod("ml", "gpt-p-worker-1", NODE))
    _wait(lambda: (run.writer.flush() or True) and _count(run.index, "pod.snapshot") == 1)
    run.halt()
    (row,) = run.index.quarantined()
    assert "could not read this record" in row[4] and b"gpt-p-worker-0" in (row[5] or b"")
    assert run.health.counters[("kubernetes/pods", "reconnects")] == 0


def _failed_again(api: KubeAPI, running: dict[str, Any], restarts: int, **state: Any) -> None:
    api.update(
        "pods",
        make_pod(
            "ml",
            running["metadata"]["name"],
            NODE,
            job="gpt-z",
            uid=running["metadata"]["uid"],
            restart_count=restarts,
            last_terminated={
                "exitCode": 1,
                "reason": "Error",
                "finishedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            **state,
        ),
    )


def _captured_runs(index: SqliteIndex) -> list[int]:
    import orjson

    rows = index._db.execute("SELECT attrs FROM evidence WHERE kind = 'log.error'").fetchall()
    return sorted(orjson.loads(attrs)["restart"] for (attrs,) in rows)


def test_in_back_off_the_log_is_filed_to_the_dead_containers_index(
    api: KubeAPI, start: Start
) -> None:
    """CrashLoopBackOff: no new container yet, so restartCount (2) is still the index of the
    run that died, as the kubelet numbers its log file (2.log) and the pod reader numbers it."""
    running = make_pod("ml", "gpt-z-worker-2", NODE, job="gpt-z")
    api.create("pods", running)
    run = start(resources=("pods",))
    api.wait_for_watchers(1)
    api.set_log("ml", "gpt-z-worker-2", "pytorch", "KeyError: 'input_ids'", previous=True)
    _failed_again(api, running, 2, waiting=("CrashLoopBackOff", "back-off 40s restarting"))
    _wait(lambda: (run.writer.flush() or True) and _captured_runs(run.index) == [2])
    run.halt()


def test_a_503_on_the_log_is_retried_not_lost(api: KubeAPI, start: Start) -> None:
    running = make_pod("ml", "gpt-z-worker-3", NODE, job="gpt-z")
    api.create("pods", running)
    run = start(resources=("pods",))
    api.wait_for_watchers(1)
    api.set_log("ml", "gpt-z-worker-3", "pytorch", "KeyError: 'input_ids'", previous=True)
    api.fail("/pods/gpt-z-worker-3/log", [503, 503])
    _failed_again(api, running, 1)
    _wait(lambda: (run.writer.flush() or True) and _captured_runs(run.index) == [0])
    run.halt()
    assert run.health.counters[("kubernetes/capture", "retries")] == 2


def test_a_500_on_the_list_costs_a_retry_not_the_events(api: KubeAPI, start: Start) -> None:
    before = _events(api, 5, "u")
    api.fail("/api/v1/events", [500])  # the first LIST fails; the next one is served
    run = start(resources=("events",))
    api.wait_for_watchers(1, timeout=5)
    after = _events(api, 5, "v")
    _wait(lambda: (run.writer.flush() or True) and len(_event_names(run.index)) == 10)
    run.halt()
    assert _event_names(run.index) == sorted(before + after)
    lists = [r for r in api.requests if r.path == "/api/v1/events" and "watch" not in r.query]
    assert len(lists) == 2 and run.health.counters[("kubernetes/events", "reconnects")] == 1


def test_a_capture_owed_when_the_collector_stops_is_fetched_after_restart(
    api: KubeAPI, start: Start
) -> None:
    """The pod batch that saw the failure is committed (its resourceVersion with it), but the
    log could not be fetched before the collector went away: the capture is owed in the
    index and fetched by the next start, which resumes the watch and does not relist."""
    running = make_pod("ml", "gpt-z-worker-4", NODE, job="gpt-z")
    api.create("pods", running)
    first = start(resources=("pods",))
    api.wait_for_watchers(1)
    api.set_log("ml", "gpt-z-worker-4", "pytorch", "KeyError: 'input_ids'", previous=True)
    api.fail("/pods/gpt-z-worker-4/log", [503] * 4)  # every try of this run fails
    _failed_again(api, running, 1)
    _wait(lambda: first.health.counters[("kubernetes/capture", "retries")] == 3, timeout=20)
    first.writer.flush()
    first.halt()
    assert len(first.index.checkpoints("capture/")) == 1
    assert first.index.checkpoints("capture-done/") == {}
    assert _captured_runs(first.index) == []
    first.index.close()

    again = start(resources=("pods",))
    _wait(lambda: (again.writer.flush() or True) and _captured_runs(again.index) == [0])
    _wait(
        lambda: (
            (again.writer.flush() or True) and len(again.index.checkpoints("capture-done/")) == 1
        )
    )
    again.halt()
    assert again.health.counters[("kubernetes/capture", "resumed")] == 1
    lists = [r for r in api.requests if r.path == "/api/v1/pods" and "watch" not in r.query]
    assert len(lists) == 1  # the second start resumed its watch: the capture came from the index


def _event_versions(index: SqliteIndex) -> list[tuple[str, int]]:
    import orjson

    rows = index._db.execute(
        "SELECT raw.body FROM evidence JOIN raw USING (seq) WHERE evidence.kind = 'k8s.event'"
    )
    found = [orjson.loads(body) for (body,) in rows]
    return sorted((e["metadata"]["name"], int(e.get("count") or 1)) for e in found)


def test_every_fault_at_once_loses_and_misfiles_nothing(tmp_path: Path) -> None:
    """A first LIST answered 500; watches cut every few tenths of a second; no bookmarks, so
    silent watches are reopened; a poisoned pod; a log endpoint failing through the first run;
    the collector stopped mid-stream, the history compacted while it is down, then started
    again. At the end every event version and every termination's log is in the index exactly
    once, each log filed to the run that wrote it."""
    with KubeAPI(bookmark_interval=3600) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        index_path = tmp_path / "index.sqlite"

        def begin() -> Run:
            options = KubernetesOptions(
                watch_timeout_s=30,
                watch_silence_s=0.7,
                batch_wait_s=0.05,
                resources=("events", "pods"),
            )
            return _launch(kubeconfig, index_path, options)

        versions: list[tuple[str, int]] = []
        pods = [make_pod("ml", f"gpt-f-worker-{n}", NODE, job="gpt-f") for n in range(6)]
        for pod in pods:
            api.create("pods", pod)

        def produce(prefix: str, n: int, updates: bool) -> None:
            for i in range(n):
                event = make_core_event("ml", "gpt-f-worker-0", "BackOff", f"{prefix} {i}",
                                        type="Warning", host=NODE, name=f"gpt-f-worker-0.{prefix}{i:04d}")  # fmt: skip
                api.create("events", event)
                versions.append((event["metadata"]["name"], int(event.get("count") or 1)))
                if updates and i % 5 == 0:  # a repeated event: each count is its own version
                    for count in (2, 3):
                        api.update("events", {**event, "count": count})
                        versions.append((event["metadata"]["name"], count))
                if i % 40 == 39:
                    api.drop_watches()  # a load balancer cuts the streams
                time.sleep(0.002)

        def fail_pod(n: int) -> None:
            name = pods[n]["metadata"]["name"]
            api.set_log("ml", name, "pytorch", f"KeyError: 'run-0-of-{name}'", previous=True)
            _failed_again(api, pods[n], 1)

        api.fail("/api/v1/events", [500])  # the first LIST
        first = begin()
        api.wait_for_watchers(2, timeout=10)
        poisoned = make_pod("ml", "gpt-f-poison", NODE, job="gpt-f")
        poisoned["status"]["containerStatuses"] = ["not an object"]
        api.create("pods", poisoned)
        api.fail("/pods/gpt-f-worker-5/log", [503] * 4)  # owed across the stop
        for n in range(3):
            fail_pod(n)
        fail_pod(5)
        produce("a", 200, updates=True)
        _wait(
            lambda: (
                (first.writer.flush() or True) and _event_versions(first.index) == sorted(versions)
            ),
            timeout=30,
        )
        _wait(lambda: first.health.counters[("kubernetes/capture", "retries")] >= 3, timeout=20)
        first.halt()
        first.index.close()

        produce("b", 60, updates=False)  # while it is down; then the history is compacted
        api.compact()
        second = begin()
        api.wait_for_watchers(2, timeout=10)  # updates before its relist are only its result
        for n in (3, 4):
            fail_pod(n)
        produce("c", 100, updates=True)
        try:
            _wait(
                lambda: (
                    (second.writer.flush() or True)
                    and _event_versions(second.index) == sorted(versions)
                ),
                timeout=30,
            )
        except TimeoutError:
            got = _event_versions(second.index)
            missing = sorted(set(versions) - set(got))
            extra = sorted(set(got) - set(versions))
            raise AssertionError(
                f"missing {len(missing)} {missing[:10]} extra {extra[:5]} counters {dict(second.health.counters)}"
            ) from None
        expected = sorted((pod["metadata"]["uid"], 0) for pod in pods)

        def logs() -> list[tuple[str, int]]:
            import orjson

            rows = second.index._db.execute(
                "SELECT pod_uid, attrs FROM evidence WHERE kind = 'log.error'"
            ).fetchall()
            return sorted((uid, orjson.loads(attrs)["restart"]) for uid, attrs in rows)

        _wait(lambda: (second.writer.flush() or True) and logs() == expected, timeout=30)
        second.halt()
        assert _event_versions(second.index) == sorted(versions)  # each exactly once
        assert second.health.counters[("kubernetes/capture", "resumed")] == 1
        assert second.health.counters[("kubernetes/events", "expired")] == 1
        # The poisoned pod, each time it was read (its watch event, and the relist after 410).
        rows = second.index.quarantined()
        assert rows and all(b"gpt-f-poison" in (row[5] or b"") for row in rows)
        second.index.close()
