"""`whyjob agent`'s sources (kernel log, kubelet log files) and its spool-and-forward path to a
real receiver of `whyjob collect`, into a real index."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.standins.services import free_port
from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.live.config import CollectConfig
from whyjob.collector.live.forward import Forwarder
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention
from whyjob.collector.live.node import KernelLog, PodLogs
from whyjob.collector.live.runner import start_collectors
from whyjob.collector.live.sink import Batch
from whyjob.core.evidence import Evidence
from whyjob.core.index import SqliteIndex

BOOT_MS = 1_795_300_000_000
POD_DIR = "ml_gpt-a-worker-3_7c1b2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


class Collected:
    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def put(self, batch: Batch) -> None:
        self.batches.append(batch)

    def records(self) -> list[Evidence]:
        return [i for b in self.batches for i in b.items if isinstance(i, Evidence)]


def _kmsg(seq: int, usec: int, message: str) -> str:
    return f"4,{seq},{usec},-;{message}\n"


def test_kernel_log_reads_kmsg_records_once_across_restarts(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        _kmsg(101, 5_000_000, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15")
        + " SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
        + _kmsg(
            102,
            86_400_123_456,
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
        )
    )
    out, health, stop = Collected(), Health(), threading.Event()
    source = KernelLog(
        out.put,
        health,
        "gpu-node-7",
        IngestOptions(),
        None,
        path=kmsg,
        boot_ms=BOOT_MS,
        boot_id="boot-a",
        poll_s=0.05,
    )
    source.start(stop)
    _wait(lambda: any(r.kind == "gpu.xid" for r in out.records()))
    stop.set()
    source.join(2)
    (xid,) = [r for r in out.records() if r.kind == "gpu.xid"]
    assert xid.node == "gpu-node-7" and xid.attrs["xid"] == 79
    assert xid.ts == BOOT_MS + 86_400_123  # seconds since boot, from the kmsg timestamp
    assert out.batches[-1].checkpoints == {"kernel": "boot-a:102"}
    # Restarted with its checkpoint, it reads only what came after.
    with kmsg.open("a") as stream:
        stream.write(
            _kmsg(
                103,
                86_500_000_000,
                "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
            )
        )

    def restart(checkpoint: str, boot_id: str) -> list[int]:
        seen, halt = Collected(), threading.Event()
        reader = KernelLog(
            seen.put, health, "gpu-node-7", IngestOptions(), checkpoint,
            path=kmsg, boot_ms=BOOT_MS, boot_id=boot_id, poll_s=0.05,
        )  # fmt: skip
        reader.start(halt)
        _wait(lambda: bool(seen.records()))
        halt.set()
        reader.join(2)
        return [r.attrs["xid"] for r in seen.records() if r.kind == "gpu.xid"]

    assert restart("boot-a:102", "boot-a") == [48]  # the same boot: only what is new
    assert restart("boot-a:102", "boot-b") == [79, 48]  # after a reboot the numbers start over


def _cri(stamp: str, text: str) -> str:
    return f"2026-11-22T10:{stamp}Z stdout F {text}\n"


def test_pod_logs_keep_errors_with_context_and_the_tail_of_an_ended_run(tmp_path: Path) -> None:
    root = tmp_path / "pods"
    log0 = root / POD_DIR / "pytorch" / "0.log"
    log0.parent.mkdir(parents=True)
    log0.write_text(
        "".join(_cri(f"00:{i:02d}.000000000", f"data loader batch {i}") for i in range(10))
        + _cri("00:11.000000000", "epoch 3 step 4200 | loss 2.31")
    )
    out = Collected()
    retention = LogRetention(context_lines=3, progress_every_s=30, idle_flush_s=3600)
    tailer = PodLogs(out.put, Health(), IngestOptions(), {}, retention, root=root)
    tailer.scan()
    assert [r.kind for r in out.records()] == ["log.progress"]  # plain lines are held, not stored
    with log0.open("a") as stream:  # a half-written last line waits for the next scan
        stream.write(
            _cri(
                "00:12.000000000",
                "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
            )
            + "2026-11-22T10:00:13"
        )
    tailer.scan()
    errors = [r for r in out.records() if r.kind == "log.error"]
    assert len(errors) == 1 and errors[0].attrs["restart"] == 0
    assert [r.message for r in out.records() if r.kind == "log.line"] == [
        f"data loader batch {i}" for i in (7, 8, 9)
    ]
    with log0.open("a") as stream:
        stream.write(".000000000Z stdout F last words before the end\n")
    tailer.scan()
    # The container restarts: run 1 begins, and the held tail of run 0 is kept.
    log1 = log0.with_name("1.log")
    log1.write_text(_cri("05:00.000000000", "starting run 1"))
    tailer.scan()
    assert "last words before the end" in [r.message for r in out.records()]
    key = f"pod-log:{log0}"
    checkpoint = next(b.checkpoints[key] for b in reversed(out.batches) if key in b.checkpoints)
    assert checkpoint.endswith(f":{log0.stat().st_size}:13")  # 13 whole lines read
    # A restarted agent resumes at the checkpoint: nothing of 0.log is read again.
    resumed = Collected()
    PodLogs(
        resumed.put, Health(), IngestOptions(), {key: checkpoint}, LogRetention(), root=root
    ).scan()
    assert not [b for b in resumed.batches if b.items and str(log0) in b.origin]


def test_agent_spools_while_the_collector_is_away_and_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    config = CollectConfig(
        tmp_path / "config.yaml",
        metrics_listen=None,
        receiver={
            "listen": ("127.0.0.1", port),
            "token": "t0ken",
            "keep": "classified",
            "context_lines": 5,
            "progress_every": 30.0,
        },
    )
    index_path = tmp_path / "index.sqlite"
    health = Health()
    forwarder = Forwarder(
        tmp_path / "spool", f"http://127.0.0.1:{port}", health, token="t0ken", timeout_s=5
    )

    def record(n: int) -> Item:
        from whyjob.core.evidence import evidence_id

        return Evidence(
            evidence_id("kernel", "gpu-node-7", str(n)),
            BOOT_MS + n,
            "kernel",
            "kernel.io",
            f"line {n}",
            node="gpu-node-7",
        )

    # The collector is down: batches wait in the spool, checkpoints advance with them.
    forwarder.put(Batch("kernel", "kmsg", [record(n) for n in range(50)], {"kernel": "50"}))
    forwarder.put(Batch("kernel", "kmsg", [record(n) for n in range(50, 80)], {"kernel": "80"}))
    assert forwarder.pending() == 2 and forwarder.checkpoints() == {"kernel": "80"}
    with pytest.raises(OSError):  # connection refused: nothing sent, nothing lost
        forwarder.send_pending()
    assert forwarder.pending() == 2
    # The agent restarts: it finds its checkpoints and its spool where it left them.
    forwarder = Forwarder(
        tmp_path / "spool", f"http://127.0.0.1:{port}", health, token="t0ken", timeout_s=5
    )
    assert forwarder.checkpoints() == {"kernel": "80"} and forwarder.pending() == 2
    running = start_collectors(config, index_path, IngestOptions(), log=io.StringIO())
    try:
        assert forwarder.send_pending() == 2
        forwarder.put(
            Batch("kernel", "kmsg", [record(n) for n in range(70, 90)], {"kernel": "90"})
        )  # overlaps
        assert forwarder.send_pending() == 1
        running.writer.flush()
        with SqliteIndex(index_path, readonly=True) as reader:
            count = reader._db.execute(
                "SELECT count(*) FROM evidence WHERE kind = 'kernel.io'"
            ).fetchone()[0]
        assert count == 90  # every record, each once
    finally:
        running.stop()
