"""The unmodified official ``kubernetes`` client against the KubeAPI stand-in.

Each test asserts what the real client (v37) does against the real wire protocol, so a
collector built on these behaviours can be tested without a cluster.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.standins.kubeapi import (
    KubeAPI,
    aws_node_name,
    make_core_event,
    make_events_v1_event,
    make_node,
    make_pod,
)

REPO = Path(__file__).resolve().parents[2]
READ_TIMEOUT = (5, 5)  # a broken stream fails the test instead of hanging it


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def api_client(api: KubeAPI, tmp_path: Path) -> Iterator[client.ApiClient]:
    """A client built from the stand-in's kubeconfig, as a collector would load it."""
    cfg = client.Configuration()
    config.load_kube_config(
        config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=cfg
    )
    with client.ApiClient(cfg) as opened:
        yield opened


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def later(action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` in a thread (e.g. changes made while a watch is open)."""
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def pod_names(n: int, namespace: str) -> list[str]:
    return [f"{namespace}-run-worker-{i}" for i in range(n)]


def test_kubeconfig_points_the_client_at_the_server(api: KubeAPI, core: client.CoreV1Api) -> None:
    api.create("nodes", make_node("ip-10-0-1-5.ec2.internal"))
    (node,) = core.list_node().items
    assert node.metadata.name == "ip-10-0-1-5.ec2.internal"
    assert node.spec.provider_id.startswith("aws:///us-east-1a/i-")
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert api.requests[-1].path == "/api/v1/nodes"


def test_wrong_token_is_401(api: KubeAPI) -> None:
    cfg = api.client_configuration()
    cfg.api_key = {"BearerToken": "Bearer not-the-token"}
    with client.ApiClient(cfg) as bad, pytest.raises(ApiException) as caught:
        client.CoreV1Api(bad).list_node()
    assert caught.value.status == 401
    assert json.loads(caught.value.body)["reason"] == "Unauthorized"


def test_list_pods_with_pagination_returns_each_pod_once(
    api: KubeAPI, core: client.CoreV1Api
) -> None:
    names = pod_names(13, "ml") + pod_names(10, "research")
    for name in names:
        api.create("pods", make_pod(name.split("-")[0], name, "ip-10-0-1-5.ec2.internal"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_pod_for_all_namespaces(limit=5, _continue=token)
        pages += 1
        seen += [p.metadata.name for p in page.items]
        if pages == 2:  # changes mid-list do not leak into the paginated snapshot
            api.create("pods", make_pod("ml", "late-worker-0", "n1"))
            api.delete("pods", "research", "research-run-worker-9")
        token = page.metadata._continue
        if not token:
            break
    assert pages == 5
    assert sorted(seen) == sorted(names)
    assert len(seen) == len(set(seen))
    limits = [r.query.get("limit") for r in api.requests]
    assert limits == ["5"] * 5


def test_list_wire_format(api: KubeAPI, core: client.CoreV1Api) -> None:
    for i in range(3):
        api.create("pods", make_pod("ml", f"run-worker-{i}", "n1"))
    raw = core.list_namespaced_pod("ml", limit=2, _preload_content=False)
    body = json.loads(raw.data)
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(api.resource_version)
    assert body["metadata"]["remainingItemCount"] == 1
    assert all("kind" not in item and "apiVersion" not in item for item in body["items"])
    item = body["items"][0]
    assert item["metadata"]["resourceVersion"].isdigit()
    assert re.fullmatch(r"[0-9a-f-]{36}", item["metadata"]["uid"])
    assert item["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"


def test_field_and_label_selectors(api: KubeAPI, core: client.CoreV1Api) -> None:
    api.create("pods", make_pod("ml", "a-master-0", "n1"))
    api.create("pods", make_pod("ml", "a-worker-0", "n1"))
    api.create("pods", make_pod("ml", "a-worker-1", "n2"))
    on_n1 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items
    assert {p.metadata.name for p in on_n1} == {"a-master-0", "a-worker-0"}
    masters = core.list_namespaced_pod(
        "ml", label_selector="training.kubeflow.org/replica-type=master"
    ).items
    assert [p.metadata.name for p in masters] == ["a-master-0"]
    api.create("events", make_core_event("ml", "a-worker-1", "Killing", "Stopping container"))
    api.create("events", make_core_event("ml", "a-worker-0", "Started", "Started container"))
    about = core.list_event_for_all_namespaces(field_selector="involvedObject.name=a-worker-1")
    assert [e.reason for e in about.items] == ["Killing"]
    pod = core.read_namespaced_pod("a-worker-1", "ml")
    assert about.items[0].involved_object.uid == pod.metadata.uid  # events join pods by uid


def test_missing_pod_and_node_are_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("ghost", "ml")
    assert caught.value.status == 404
    status = json.loads(caught.value.body)
    assert status["reason"] == "NotFound" and status["message"] == 'pods "ghost" not found'
    with pytest.raises(ApiException) as caught:
        core.read_node("ghost")
    assert caught.value.status == 404


def test_watch_yields_changes_after_rv_in_order_and_bookmarks(
    api: KubeAPI, core: client.CoreV1Api
) -> None:
    api.create("events", make_core_event("ml", "old-worker-0", "Pulled", "before the list"))
    rv = core.list_event_for_all_namespaces().metadata.resource_version

    def changes() -> None:
        api.wait_for_watchers(1)
        first = api.create("events", make_core_event("ml", "w-0", "BackOff", "Back-off 1"))
        api.create("events", make_core_event("ml", "w-1", "Killing", "Stopping container"))
        api.update("events", first | {"count": 2})

    worker = later(changes)
    w = watch.Watch()
    seen: list[dict[str, Any]] = []
    for event in w.stream(
        core.list_event_for_all_namespaces,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _request_timeout=READ_TIMEOUT,
    ):
        seen.append(event)
        kinds = [e["type"] for e in seen]
        if "MODIFIED" in kinds and kinds[-1] == "BOOKMARK":
            w.stop()
    worker.join()
    changes_seen = [e for e in seen if e["type"] != "BOOKMARK"]
    assert [(e["type"], e["object"].reason) for e in changes_seen] == [
        ("ADDED", "BackOff"),
        ("ADDED", "Killing"),
        ("MODIFIED", "BackOff"),
    ]
    assert all(isinstance(e["object"], client.CoreV1Event) for e in changes_seen)
    assert changes_seen[2]["object"].count == 2
    rvs = [int(e["object"].metadata.resource_version) for e in changes_seen]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert changes_seen[0]["raw_object"]["kind"] == "Event"  # watch objects carry kind
    bookmark = seen[-1]
    assert bookmark["object"] == bookmark["raw_object"]  # the client leaves bookmarks raw
    assert bookmark["raw_object"]["kind"] == "Event"
    assert bookmark["raw_object"]["apiVersion"] == "v1"
    assert bookmark["raw_object"]["metadata"]["resourceVersion"] == str(rvs[-1])
    assert w.resource_version == str(rvs[-1])


def test_watch_without_resource_version_starts_with_current_objects(
    api: KubeAPI, core: client.CoreV1Api
) -> None:
    for i in range(3):
        api.create("pods", make_pod("ml", f"run-worker-{i}", "n1"))
    w = watch.Watch()
    names = []
    for event in w.stream(
        core.list_namespaced_pod, "ml", timeout_seconds=5, _request_timeout=READ_TIMEOUT
    ):
        assert event["type"] == "ADDED"
        names.append(event["object"].metadata.name)
        if len(names) == 3:
            w.stop()
    assert names == ["run-worker-0", "run-worker-1", "run-worker-2"]


def test_watch_from_compacted_rv_raises_410(api: KubeAPI, core: client.CoreV1Api) -> None:
    rv = core.list_event_for_all_namespaces().metadata.resource_version
    api.create("events", make_core_event("ml", "w-0", "Started", "Started container pytorch"))
    floor = api.compact()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(
            core.list_event_for_all_namespaces,
            resource_version=rv,
            timeout_seconds=5,
            _request_timeout=READ_TIMEOUT,
        ):
            pytest.fail("no event is expected from an expired resourceVersion")
    assert caught.value.status == 410
    assert caught.value.reason == f"Expired: too old resource version: {rv} ({floor})"
    assert caught.value.body is None
    # Without timeout_seconds the client silently retries once from the same rv, then raises.
    api.clear_requests()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(
            core.list_event_for_all_namespaces, resource_version=rv, _request_timeout=READ_TIMEOUT
        ):
            pytest.fail("no event is expected from an expired resourceVersion")
    assert caught.value.status == 410
    assert [r.query["resourceVersion"] for r in api.requests] == [rv, rv]


def test_expired_continue_token_is_410_with_a_fresh_token(
    api: KubeAPI, core: client.CoreV1Api
) -> None:
    for i in range(4):
        api.create("pods", make_pod("ml", f"run-worker-{i}", "n1"))
    first = core.list_namespaced_pod("ml", limit=2)
    api.create("pods", make_pod("ml", "run-worker-9", "n1"))
    api.compact()
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("ml", limit=2, _continue=first.metadata._continue)
    assert caught.value.status == 410
    status = json.loads(caught.value.body)
    assert status["reason"] == "Expired"
    rest = core.list_namespaced_pod("ml", limit=10, _continue=status["metadata"]["continue"])
    assert [p.metadata.name for p in rest.items] == ["run-worker-2", "run-worker-3", "run-worker-9"]


@pytest.mark.parametrize(
    ("reset", "message"),
    [(True, "Connection reset by peer"), (False, "Response ended prematurely")],
)
def test_dropped_watch_raises_protocol_error(
    api: KubeAPI, core: client.CoreV1Api, reset: bool, message: str
) -> None:
    rv = str(api.resource_version)

    def cut() -> None:
        api.wait_for_watchers(1)
        api.create("events", make_core_event("ml", "w-0", "Started", "Started container"))
        time.sleep(0.1)  # let the event reach the client first
        assert api.drop_watches(reset=reset) == 1

    worker = later(cut)
    seen = []
    with pytest.raises(urllib3.exceptions.ProtocolError, match=message):
        for event in watch.Watch().stream(
            core.list_event_for_all_namespaces,
            resource_version=rv,
            timeout_seconds=5,
            _request_timeout=READ_TIMEOUT,
        ):
            seen.append(event["type"])  # noqa: PERF401 - the events before the error count
    worker.join()
    assert seen == ["ADDED"]
    assert api.watch_count == 0


def test_429_is_raised_as_api_exception_with_retry_after(api: KubeAPI) -> None:
    cfg = api.client_configuration()
    cfg.retries = 0  # urllib3 would otherwise retry 429s that carry Retry-After (see below)
    with client.ApiClient(cfg) as no_retries, pytest.raises(ApiException) as caught:
        api.throttle(1, retry_after=1)
        client.CoreV1Api(no_retries).list_node()
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "1"
    status = json.loads(caught.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["details"] == {"retryAfterSeconds": 1}


def test_default_client_retries_429_three_times(api: KubeAPI, core: client.CoreV1Api) -> None:
    api.throttle(3, retry_after=0)
    assert core.list_node().items == []
    assert len(api.requests) == 4
    api.clear_requests()
    api.throttle(4, retry_after=0)
    with pytest.raises(ApiException) as caught:
        core.list_node()
    assert caught.value.status == 429
    assert len(api.requests) == 4


def test_read_previous_container_log_tail(api: KubeAPI, core: client.CoreV1Api) -> None:
    oom = {"exitCode": 137, "reason": "OOMKilled"}
    pod = make_pod("ml", "run-worker-1", "n1", restart_count=1, last_terminated=oom)
    api.create("pods", pod)
    crashed = "step 100 loss 2.31\nstep 101 loss 2.29\nKilled\n"
    api.set_log("ml", "run-worker-1", "pytorch", crashed, previous=True)
    api.set_log("ml", "run-worker-1", "pytorch", "resuming from checkpoint 100\n")
    tail = core.read_namespaced_pod_log(
        "run-worker-1", "ml", container="pytorch", previous=True, tail_lines=2
    )
    assert tail == "step 101 loss 2.29\nKilled\n"
    stamped = core.read_namespaced_pod_log("run-worker-1", "ml", previous=True, timestamps=True)
    assert re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z .+\n){3}", stamped)
    assert core.read_namespaced_pod_log("run-worker-1", "ml") == "resuming from checkpoint 100\n"
    assert api.requests[0].query == {
        "container": "pytorch",
        "previous": "true",
        "tailLines": "2",
    }
    api.create("pods", make_pod("ml", "run-worker-2", "n1"))
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log("run-worker-2", "ml", previous=True)
    assert caught.value.status == 400
    last = core.read_namespaced_pod("run-worker-1", "ml").status.container_statuses[0]
    assert last.last_state.terminated.reason == "OOMKilled"


def test_events_k8s_io_list_and_watch(api: KubeAPI, api_client: client.ApiClient) -> None:
    events = client.EventsV1Api(api_client)
    api.create(
        "events.k8s.io",
        make_events_v1_event(
            "ml", "run-worker-3", "FailedScheduling", "0/12 nodes are available", type="Warning"
        ),
    )
    listed = events.list_namespaced_event("ml")
    (event,) = listed.items
    assert isinstance(event, client.EventsV1Event)
    assert (event.reason, event.regarding.name, event.note) == (
        "FailedScheduling",
        "run-worker-3",
        "0/12 nodes are available",
    )
    assert event.event_time is not None and event.reporting_controller == "default-scheduler"
    # The same stored object, seen through core/v1, as the real server converts it.
    (as_core,) = client.CoreV1Api(api_client).list_namespaced_event("ml").items
    assert (as_core.involved_object.name, as_core.message) == ("run-worker-3", event.note)

    def changes() -> None:
        api.wait_for_watchers(1)
        api.create("events.k8s.io", make_events_v1_event("ml", "run-worker-4", "Scheduled", "ok"))

    worker = later(changes)
    w = watch.Watch()
    seen = []
    for item in w.stream(
        events.list_namespaced_event,
        "ml",
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _request_timeout=READ_TIMEOUT,
    ):
        seen.append(item)
        if item["type"] == "BOOKMARK":
            w.stop()
    worker.join()
    assert seen[0]["type"] == "ADDED"
    assert isinstance(seen[0]["object"], client.EventsV1Event)
    assert seen[0]["object"].regarding.name == "run-worker-4"
    assert seen[-1]["raw_object"]["apiVersion"] == "events.k8s.io/v1"
    assert seen[-1]["raw_object"]["kind"] == "Event"


def test_typed_events_k8s_io_rejects_kubelet_events(
    api: KubeAPI, api_client: client.ApiClient
) -> None:
    """Kubelet events have ``eventTime: null``; the typed v37 model refuses them."""
    api.create("events", make_core_event("ml", "run-worker-0", "Killing", "Stopping container"))
    events = client.EventsV1Api(api_client)
    raw = json.loads(events.list_namespaced_event("ml", _preload_content=False).data)
    assert raw["items"][0]["eventTime"] is None
    assert raw["items"][0]["deprecatedCount"] == 1
    with pytest.raises(ValueError, match="eventTime"):
        events.list_namespaced_event("ml")


def test_raw_call_api_streams_chunked_watch(api: KubeAPI, api_client: client.ApiClient) -> None:
    for i in range(3):
        api.create("events", make_core_event("ml", f"run-worker-{i}", "Pulled", "image present"))
    request = api_client.param_serialize(
        "GET",
        "/api/v1/events",
        query_params=[("watch", "true"), ("resourceVersion", "1"), ("timeoutSeconds", "1")],
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*request, _request_timeout=READ_TIMEOUT).response
    assert response.headers["Transfer-Encoding"] == "chunked"
    lines = b"".join(response.stream(1 << 16)).splitlines()
    response.release_conn()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["ADDED"] * 3
    assert [e["object"]["involvedObject"]["name"] for e in events] == [
        "run-worker-0",
        "run-worker-1",
        "run-worker-2",
    ]


def test_firehose_streams_realistic_events_and_compacts(
    api: KubeAPI, api_client: client.ApiClient
) -> None:
    rv = str(api.resource_version)
    request = api_client.param_serialize(
        "GET",
        "/api/v1/events",
        # The server's end of the watch ends the read: long enough for a loaded runner to read
        # the whole burst (2 s was not, once), shorter than the client's 5 s read timeout.
        query_params=[("watch", "true"), ("resourceVersion", rv), ("timeoutSeconds", "4")],
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*request, _request_timeout=READ_TIMEOUT).response
    # History ample for this burst: under CI load a lagging reader must not be compacted away.
    hose = api.firehose(20_000, 0.25, nodes=64, history=50_000)
    lines: list[bytes] = []
    buffer = b""
    for data in response.stream(1 << 16):
        buffer += data
        *done, buffer = buffer.split(b"\n")
        lines += done
        if not hose.running and len(lines) >= hose.emitted:
            break
    response.release_conn()
    assert hose.emitted > 1000
    assert len(lines) == hose.emitted
    # Pre-rendered lines are canonical JSON, byte for byte what the generic encoder writes.
    decoded = [json.loads(line) for line in lines]
    assert all(
        json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() == line
        for e, line in zip(decoded, lines, strict=True)
    )
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in decoded]
    assert rvs == list(range(int(rv) + 1, int(rv) + 1 + len(rvs)))
    reasons = {e["object"]["reason"] for e in decoded}
    assert {"Pulled", "Started", "Scheduled"} <= reasons
    assert {e["type"] for e in decoded} == {"ADDED", "MODIFIED"}
    nodes = {aws_node_name(i + 256) for i in range(64)}
    hosts = {e["object"]["source"].get("host") for e in decoded} - {None}
    assert hosts <= nodes
    # History stays bounded: a burst with small history compacts the early resourceVersions away.
    api.firehose(20_000, 0.25, nodes=64, history=500).join(timeout=30)
    assert len(api._history) <= 1000 + 2000  # 2 x history, plus at most one batch
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(
            client.CoreV1Api(api_client).list_event_for_all_namespaces,
            resource_version=rv,
            timeout_seconds=1,
            _request_timeout=READ_TIMEOUT,
        ):
            pass
    assert caught.value.status == 410


def test_command_line_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    command = [sys.executable, "-m", "tests.standins.kubeapi", "--port", "0"]
    command += ["--kubeconfig", str(kubeconfig), "--firehose", "2000", "--nodes", "50"]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            ready = json.loads(proc.stdout.readline())
            with config.new_client_from_config(config_file=str(kubeconfig)) as cli:
                assert cli.configuration.host == ready["url"]
                time.sleep(0.2)
                listed = client.CoreV1Api(cli).list_event_for_all_namespaces(limit=10)
            assert len(listed.items) == 10
            assert listed.metadata._continue
        finally:
            proc.terminate()
        assert proc.wait(5) == 0
