"""The agent's kernel log through the systemd journal: real journal files, written by Debian's
systemd-journal-remote from the journal export format, followed by the real `journalctl`."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.collector.live.test_agent import Collected as AgentCollected
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.live.health import Health
from whyjob.collector.live.journal import JournalKernelLog
from whyjob.core.evidence import Evidence

GPU = "GPU-604ac76c-1111-2222-3333-444455556666"
_REMOTE = Path("/lib/systemd/systemd-journal-remote")


def _tools() -> tuple[str, Path]:
    journalctl = shutil.which("journalctl")
    if journalctl is None or not _REMOTE.exists():
        raise RuntimeError(
            "journalctl and systemd-journal-remote are needed: ./scripts/setup installs the "
            "Debian package (WHYJOB_TEST_DEBS), or `apt-get install systemd-journal-remote`"
        )
    return journalctl, _REMOTE


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")


class Journal:
    """A journal folder that kernel lines are appended to, as journald would."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.file = folder / "remote.journal"
        self.boot = _boot_id()
        self.n = 0

    def kernel(self, *messages: str) -> None:
        export = []
        for message in messages:
            self.n += 1
            export.append(
                f"__REALTIME_TIMESTAMP={int(time.time() * 1e6)}\n"
                f"__MONOTONIC_TIMESTAMP={self.n * 1000}\n"
                f"_BOOT_ID={self.boot}\n"
                "_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nPRIORITY=4\n"
                "_HOSTNAME=ip-10-0-1-54\n"
                f"MESSAGE={message}\n\n"
            )
        subprocess.run(
            [str(_tools()[1]), "-o", str(self.file), "--split-mode=none", "-"],
            input="".join(export).encode(),
            check=True,
            capture_output=True,
        )


class Collected(AgentCollected):
    def xids(self) -> list[int]:
        return [r.attrs["xid"] for r in self.records() if r.kind == "gpu.xid"]


def _wait(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


def _source(
    out: Collected, health: Health, folder: Path, cursor: str | None, boot_id: str | None = None
) -> JournalKernelLog:
    return JournalKernelLog(
        out.put,
        health,
        "gpu-node-7",
        IngestOptions(),
        cursor,
        directory=folder,
        command=[_tools()[0]],
        boot_id=boot_id,
        poll_s=0.05,
        restart_s=0.2,
    )


def test_journal_kernel_lines_are_followed_and_resumed_by_cursor(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.kernel(
        f"NVRM: GPU at PCI:0000:10:1c: {GPU}",
        "NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has fallen off the bus.",
    )
    out, health, stop = Collected(), Health(), threading.Event()
    source = _source(out, health, tmp_path, None)
    source.start(stop)
    try:
        _wait(lambda: out.xids() == [79])
        # Followed live: a line the journal gets later arrives too.
        journal.kernel(
            "NVRM: Xid (PCI:0000:10:1c): 48, pid=1234, name=python, An uncorrectable double "
            "bit error (DBE) has been detected on GPU in the framebuffer at partition 0."
        )
        _wait(lambda: out.xids() == [79, 48])
    finally:
        stop.set()
        source.join(10)
    (xid79,) = [
        i for b in out.batches for i in b.items if isinstance(i, Evidence) and i.kind == "gpu.xid"
    ][:1]
    assert xid79.node == "gpu-node-7" and xid79.gpu_uuid == GPU  # the PCI address was learnt
    cursor = out.batches[-1].checkpoints["kernel"]
    assert cursor.startswith("s=") and ";i=" in cursor
    assert health.states["kernel"].up

    # Restarted from the cursor: only what came after.
    journal.kernel("NVRM: Xid (PCI:0000:10:1c): 63, pid=1234, name=python, row remapping")
    again, halt = Collected(), threading.Event()
    reader = _source(again, Health(), tmp_path, cursor)
    assert reader.arguments()[-2:] == ["--after-cursor", cursor]
    reader.start(halt)
    try:
        _wait(lambda: again.xids() == [63])
        time.sleep(0.3)  # and nothing older trickles in after it
    finally:
        halt.set()
        reader.join(10)
    assert again.xids() == [63]


def test_a_journal_that_cannot_be_read_is_reported_and_retried(tmp_path: Path) -> None:
    health, stop = Health(), threading.Event()
    source = _source(Collected(), health, tmp_path / "no-such-folder", None)
    source.start(stop)
    try:
        _wait(lambda: health.counters[("kernel", "errors")] >= 1)
    finally:
        stop.set()
        source.join(10)
    state = health.states["kernel"]
    assert not state.up and "journalctl exited with" in (state.last_error or "")


@pytest.mark.parametrize("checkpoint", ["boot-a:102", None])
def test_without_a_cursor_the_current_boot_is_read_from_its_start(
    checkpoint: str | None, tmp_path: Path
) -> None:
    source = _source(Collected(), Health(), tmp_path, checkpoint)
    assert source.arguments()[-1] == "--no-tail"
    assert source.arguments()[1:5] == ["-k", "-f", "-o", "json"]


def test_a_cursor_of_an_earlier_boot_reads_this_boot_from_its_start(tmp_path: Path) -> None:
    cursor = "s=20294511ee0141748d622ebd12c9e1c2;i=2;b=0123456789abcdef0123456789abcdef;m=f4242"
    earlier = _source(Collected(), Health(), tmp_path, cursor, boot_id="fedcba98-7654-3210")
    assert earlier.arguments()[-1] == "--no-tail"
    same = _source(
        Collected(), Health(), tmp_path, cursor, boot_id="01234567-89ab-cdef-0123-456789abcdef"
    )
    assert same.arguments()[-2:] == ["--after-cursor", cursor]


def test_a_cursor_journalctl_cannot_seek_to_falls_back_to_the_boot(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.kernel(
        "NVRM: Xid (PCI:0000:10:1c): 79, pid=1, name=python, GPU has fallen off the bus."
    )
    out, health, stop = Collected(), Health(), threading.Event()
    source = _source(out, health, tmp_path, f"s=garbage;b={journal.boot}")
    assert source.arguments()[-2] == "--after-cursor"
    source.start(stop)
    try:
        _wait(lambda: out.xids() == [79])
    finally:
        stop.set()
        source.join(10)
    assert "cursor" in (health.states["kernel"].last_error or "").lower()
    assert health.states["kernel"].up
