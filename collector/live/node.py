"""Node-local sources of `whyjob agent`: the kernel log and the kubelet's container log files.

- `KernelLog` follows `/dev/kmsg` (one record per line: `PRI,SEQ,USEC,FLAGS;message`), so Xid,
  OOM-killer, I/O and NIC lines are read as the kernel prints them; its checkpoint is the last
  sequence number read, so a restarted agent neither skips nor repeats a line. The records go
  through the kernel parser as raw dmesg lines dated from the boot time.
- `PodLogs` tails `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log` (CRI format), each
  file from the offset its checkpoint holds (inode:offset, so a rotated file starts over), and
  keeps what `LogRetention` says; when a container's next run starts, the last lines of the one
  that ended are kept too.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

from whyjob.collector.ingest import kernel, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention
from whyjob.collector.live.sink import Batch

__all__ = ["KernelLog", "PodLogs", "Put", "SourceThread", "boot_time_ms"]

_BATCH_LINES: Final = 2000

Put = Callable[[Batch], None]


def boot_time_ms(proc_stat: Path = Path("/proc/stat")) -> int:
    """When this machine booted: `btime` of /proc/stat."""
    for line in proc_stat.read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1]) * 1000
    raise RuntimeError(f"no btime in {proc_stat}")


class SourceThread:
    """A source with its own thread, started and joined like the collectors."""

    name = "source"
    put: Put  # where batches go, and how the source is doing: set by each source
    health: Health

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), name=f"whyjob-{self.name}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def hand_over(self, make: Callable[[], Batch], lines: int) -> bool:
        """Make a batch and put it; health says how it went. False (a full disk, a stopped
        writer): the caller keeps what the batch was made of and tries again."""
        try:
            self.put(make())
        except Exception as exc:
            self.health.error(self.name, f"{type(exc).__name__}: {exc}")
            return False
        self.health.ok(self.name)
        self.health.count(self.name, "lines", lines)
        return True


class KernelLog(SourceThread):
    name = "kernel"

    def __init__(
        self,
        put: Put,
        health: Health,
        node: str,
        options: IngestOptions,
        checkpoint: str | None,
        *,
        path: Path = Path("/dev/kmsg"),
        boot_ms: int | None = None,
        boot_id: str | None = None,
        poll_s: float = 0.2,
    ) -> None:
        super().__init__()
        self.put, self.health, self.node, self.path = put, health, node, path
        self.boot_id = boot_id if boot_id is not None else _boot_id()
        boot = boot_ms if boot_ms is not None else boot_time_ms()
        # One context for the agent's life: the parser keeps what it learns (PCI -> GPU).
        self.ctx = Context(f"kmsg:{node}", replace(options, node=node, boot_time=boot))
        # Sequence numbers start again at every boot: a checkpoint of another boot counts nothing.
        seen_boot, _, seq = (checkpoint or "").rpartition(":")
        self.last_seq = int(seq) if seq.isdigit() and seen_boot == self.boot_id else -1
        self.poll_s = poll_s

    def run(self, stop: threading.Event) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self.health.error(self.name, f"cannot read {self.path}: {exc.strerror}")
            return
        pending: list[tuple[int, str]] = []
        try:
            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], self.poll_s)
                record = self._read(fd) if ready else b""
                if record:
                    pending += self._lines(record)
                    if len(pending) < _BATCH_LINES:
                        continue  # more may be right behind: send when the burst pauses
                elif ready:  # readable yet empty: a regular file at its end (tests)
                    stop.wait(self.poll_s)
                if pending:
                    pending = self._send(pending)
        finally:
            os.close(fd)
            if pending:
                self._send(pending)

    def _read(self, fd: int) -> bytes:
        try:
            return os.read(fd, 8192)  # /dev/kmsg: one record per read
        except BlockingIOError:
            return b""
        except OSError as exc:  # EPIPE: the ring buffer overwrote records not yet read
            self.health.error(self.name, f"{self.path}: {exc.strerror}", down=False)
            return b""

    def _lines(self, record: bytes) -> list[tuple[int, str]]:
        out = []
        for line in record.decode("utf-8", "replace").splitlines():
            parsed = _kmsg(line)
            if parsed is None or parsed[0] <= self.last_seq:
                continue
            number, usec, message = parsed
            self.last_seq = number
            out.append((number, f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {message}"))
        return out

    def _send(self, lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Hand the lines over; returns what is still to send (all of it, if that failed)."""

        def batch() -> Batch:
            items: list[Item] = list(kernel.parse_kernel_text(self.ctx, lines))
            checkpoint = {self.name: f"{self.boot_id}:{lines[-1][0]}"}
            return Batch(self.name, f"kmsg:{self.node}", items, checkpoint)

        return [] if self.hand_over(batch, len(lines)) else lines


def _boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "unknown"


def _kmsg(line: str) -> tuple[int, int, str] | None:
    """`PRI,SEQ,USEC,FLAGS[,...];message` → (seq, usec, message); continuation lines (which
    start with a space and carry `KEY=value` device details) are skipped."""
    head, sep, message = line.partition(";")
    if not sep or line.startswith(" "):
        return None
    fields = head.split(",")
    try:
        return int(fields[1]), int(fields[2]), message
    except (IndexError, ValueError):
        return None


class PodLogs(SourceThread):
    name = "pod-logs"

    def __init__(
        self,
        put: Put,
        health: Health,
        options: IngestOptions,
        checkpoints: Mapping[str, str],
        retention: LogRetention,
        *,
        root: Path = Path("/var/log/pods"),
        poll_s: float = 1.0,
    ) -> None:
        super().__init__()
        self.put, self.health, self.options, self.root = put, health, options, root
        self.retention = retention
        self.poll_s = poll_s
        # path -> (inode, offset, lines) of what has been read
        self.offsets: dict[str, tuple[int, int, int]] = {}
        for key, value in checkpoints.items():
            if key.startswith("pod-log:"):
                inode, offset, lines = (int(part) for part in value.split(":"))
                self.offsets[key[len("pod-log:") :]] = (inode, offset, lines)
        self._runs: dict[tuple[str, str], int] = {}  # (pod dir, container) -> newest restart

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.scan()
            except Exception as exc:  # reported; the offsets did not move, the next scan retries
                self.health.error(
                    self.name, f"{self.root}: {type(exc).__name__}: {exc}", down=False
                )
            stop.wait(self.poll_s)
        try:
            self.stop_flush()
        except Exception as exc:
            self.health.error(self.name, f"on stop: {exc}", down=False)

    def scan(self) -> None:
        """Read what every log file gained since the last scan: one batch for all of them,
        and the offsets move only once the batch is handed over."""
        items: list[Item] = []
        checkpoints: dict[str, str] = {}
        moved: dict[str, tuple[int, int, int]] = {}
        for path in sorted(self.root.glob("*/*/*.log")):
            found = self._read(path)
            if found is not None:
                read, mark = found
                items += read
                moved[str(path)] = mark
                checkpoints[f"pod-log:{path}"] = ":".join(map(str, mark))
        items += self.retention.flush_idle()
        if items or checkpoints:
            self.put(Batch(self.name, str(self.root), items, checkpoints))
            self.offsets.update(moved)
        self.health.ok(self.name)

    def stop_flush(self) -> None:
        """The held tails, on the way out."""
        tails = self.retention.flush_all()
        if tails:
            self.put(Batch(self.name, str(self.root), tails))

    def _read(self, path: Path) -> tuple[list[Item], tuple[int, int, int]] | None:
        key = str(path)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        inode, offset, seen = self.offsets.get(key, (stat.st_ino, 0, 0))
        if inode != stat.st_ino or stat.st_size < offset:
            offset = seen = 0  # rotated or truncated: a new file under the old name
        if stat.st_size == offset:
            return None
        with path.open("rb") as stream:
            stream.seek(offset)
            data = stream.read(16 * 1024 * 1024)
        end = data.rfind(b"\n") + 1  # only whole lines; a partial one waits for the next scan
        if end == 0:
            return None
        hints = podlogs.pod_from_path(key)
        ctx = Context(key, self.options, path_hints=hints)
        text = data[:end].decode("utf-8", "replace").splitlines()
        lines = [(seen + n, line) for n, line in enumerate(text, start=1)]
        items = self._ended_run(path, hints) + self.retention.filter(
            podlogs.parse_cri_text(ctx, lines)
        )
        self.health.count(self.name, "lines", len(lines))
        return items, (stat.st_ino, offset + end, seen + len(lines))

    def _ended_run(self, path: Path, hints: Mapping[str, object]) -> list[Item]:
        """A container's next run began: keep the held last lines of the run that ended."""
        restart = hints.get("restart")
        if not isinstance(restart, int):
            return []
        run = (str(path.parent.parent), path.parent.name)
        before = self._runs.get(run)
        self._runs[run] = max(restart, before if before is not None else restart)
        if before is None or restart <= before:
            return []
        return self.retention.flush_stream(str(hints.get("uid")), path.parent.name, before)
