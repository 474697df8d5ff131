"""The collector's HTTP receiver: OTLP/HTTP logs (protobuf as an OpenTelemetry Collector sends
them, and JSON) and items from node agents, into a real index."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention
from whyjob.collector.live.receiver import Receiver
from whyjob.collector.live.sink import Writer
from whyjob.collector.live.wire import decode_items, encode_items
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex

T0 = 1_795_000_000_000_000_000  # ns
POD_UID = "7c1b2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[Receiver, SqliteIndex]]:
    index = SqliteIndex(tmp_path / "index.sqlite")
    health = Health()
    writer = Writer(index, health).start()
    server = Receiver(
        writer,
        health,
        IngestOptions(),
        LogRetention(context_lines=2, progress_every_s=30),
        port=0,
        token="s3cret",
    ).start()
    yield server, index
    server.stop()
    writer.stop()
    index.close()


def _post(
    server: Receiver, path: str, body: bytes, kind: str, token: str | None = "s3cret"
) -> tuple[int, bytes]:
    headers = {"Content-Type": kind}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.address[1]}{path}", body, headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _lines(index: SqliteIndex) -> list[tuple[str, str]]:
    rows = index._db.execute(
        "SELECT kind, message FROM evidence WHERE kind LIKE 'log.%' ORDER BY ts, seq"
    )
    return [(str(k), str(m)) for k, m in rows]


def _otlp(bodies: list[str]) -> ExportLogsServiceRequest:
    def attribute(key: str, value: str | int) -> KeyValue:
        any_value = (
            AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
        )
        return KeyValue(key=key, value=any_value)

    resource = Resource(attributes=[
        attribute("k8s.namespace.name", "ml"), attribute("k8s.pod.name", "gpt-w-worker-3"),
        attribute("k8s.pod.uid", POD_UID), attribute("k8s.container.name", "pytorch"),
        attribute("k8s.container.restart_count", 2), attribute("k8s.node.name", "gpu-node-7"),
    ])  # fmt: skip
    records = [
        LogRecord(time_unix_nano=T0 + i * 1_000_000_000, body=AnyValue(string_value=text))
        for i, text in enumerate(bodies)
    ]
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource, scope_logs=[ScopeLogs(log_records=records)])]
    )


def test_otlp_protobuf_logs_are_kept_by_what_they_say(
    receiver: tuple[Receiver, SqliteIndex],
) -> None:
    server, index = receiver
    bodies = [
        "step 100 | loss 2.40",
        "step 101 | loss 2.39",  # progress within 30 s of the last kept one: dropped
        "loading shard 17 of 64",
        "prefetching batch 4512",
        "moving optimizer state",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789 in the environment",
    ]
    status, answer = _post(
        server, "/v1/logs", _otlp(bodies).SerializeToString(), "application/x-protobuf"
    )
    assert status == 200 and answer == b""  # an empty ExportLogsServiceResponse
    kept = _lines(index)
    assert kept[0] == ("log.progress", "step 100 | loss 2.40")
    # The two lines before the error are kept as its context; the one before them is not.
    assert [m for _, m in kept[1:4]] == [
        "prefetching batch 4512",
        "moving optimizer state",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    assert "loading shard 17 of 64" not in [m for _, m in kept]
    row = index._db.execute(
        "SELECT pod_uid, container, attrs FROM evidence WHERE kind = 'log.error'"
    ).fetchone()
    assert row[0] == POD_UID and row[1] == "pytorch" and orjson.loads(row[2])["restart"] == 2
    assert not any("ghp_abcdef" in m for _, m in kept), "secrets are redacted before storing"


def test_otlp_json_and_the_same_request_twice(receiver: tuple[Receiver, SqliteIndex]) -> None:
    from google.protobuf.json_format import MessageToJson

    server, index = receiver
    body = MessageToJson(
        _otlp(["Traceback (most recent call last):", "ValueError: bad batch"])
    ).encode()
    assert _post(server, "/v1/logs", body, "application/json") == (200, b"{}")
    first = _lines(index)
    assert ("log.traceback", "ValueError: bad batch") in first
    assert _post(server, "/v1/logs", body, "application/json") == (200, b"{}")  # a retry
    assert _lines(index) == first


def test_agent_items_need_the_token_and_arrive_whole(
    receiver: tuple[Receiver, SqliteIndex],
) -> None:
    server, index = receiver
    record = Evidence(
        evidence_id("kernel", "gpu-node-7", "1"), 1_795_000_000_000, "kernel", "gpu.xid",
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", node="gpu-node-7",
        attrs={"xid": 79}, raw=b"\x00raw bytes\xff",
    )  # fmt: skip
    items = [
        record,
        PodRecord(POD_UID, "ml", "gpt-w-worker-3", 1),
        Binding("gpu.node", "GPU-1", "gpu-node-7", 1, 2),
    ]
    body = encode_items(items)
    assert list(decode_items(body)) == items
    assert _post(server, "/whyjob/v1/items", body, "application/x-ndjson", token=None)[0] == 401
    assert _post(server, "/whyjob/v1/items", body, "application/x-ndjson", token="wrong")[0] == 401
    status, answer = _post(server, "/whyjob/v1/items", body, "application/x-ndjson")
    assert status == 200 and orjson.loads(answer) == {"received": 3}
    assert index.raw(record.id) == record.raw
    assert _post(server, "/whyjob/v1/items", b"{not json\n", "application/x-ndjson")[0] == 200
    (row,) = index.quarantined()
    assert row[2] == "receiver:agent:1" and "not an item" in row[4]


def test_what_a_sender_gets_wrong_never_reaches_or_stops_the_writer(
    receiver: tuple[Receiver, SqliteIndex],
) -> None:
    server, index = receiver
    bad = [
        b'{"evidence": null}',
        b'{"evidence": {"id": 1, "ts": 1, "source": "s", "kind": "k", "message": "m", "severity": "x"}}',
        b'{"evidence": {"id": 18446744073709551615, "ts": 1, "source": "s", "kind": "k", "message": "m", "severity": 1}}',
        b"[1, 2]",
    ]
    status, answer = _post(server, "/whyjob/v1/items", b"\n".join(bad), "application/x-ndjson")
    assert status == 200 and orjson.loads(answer) == {"received": 4}
    assert len(index.quarantined()) == 4
    # The writer is still there: a good record after them is stored.
    good = Evidence(
        evidence_id("kernel", "n", "9"), 1, "kernel", "kernel.io", "still writing", node="n"
    )
    assert _post(server, "/whyjob/v1/items", encode_items([good]), "application/x-ndjson")[0] == 200
    assert index.get([good.id])


def test_gzip_bodies_and_lengths_the_receiver_cannot_take(
    receiver: tuple[Receiver, SqliteIndex],
) -> None:
    import gzip
    import http.client

    server, index = receiver
    body = gzip.compress(_otlp(["ValueError: bad batch"]).SerializeToString())
    connection = http.client.HTTPConnection("127.0.0.1", server.address[1], timeout=10)
    connection.request("POST", "/v1/logs", body, {
        "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip", "Authorization": "Bearer s3cret",
    })  # fmt: skip
    assert connection.getresponse().status == 200  # the otlphttp exporter's default encoding
    connection.close()
    assert ("log.error", "ValueError: bad batch") in _lines(index)

    def status_for(length: str | None) -> int:
        """The answer to headers alone: the body is refused before any of it is sent."""
        connection = http.client.HTTPConnection("127.0.0.1", server.address[1], timeout=10)
        connection.putrequest("POST", "/v1/logs")
        connection.putheader("Authorization", "Bearer s3cret")
        if length is not None:
            connection.putheader("Content-Length", length)
        connection.endheaders()
        status = connection.getresponse().status
        connection.close()
        return status

    assert status_for(str(64 * 1024 * 1024 + 1)) == 413
    assert status_for(None) == 411
    assert status_for("-1") == 400  # not a length at all: the HTTP parser refuses it
