"""The kernel log through the systemd journal, where `/dev/kmsg` cannot be read.

`journalctl -k -f -o json` (on the host's journal folder when the agent runs in a pod) gives
each kernel line with its wall-clock time and a cursor. The checkpoint is the cursor of the
last entry handed over: a restarted agent asks for what came `--after-cursor`, so it neither
skips nor repeats a line; without one (or with one of an earlier boot) it reads the current boot
from its start (`--no-tail`).
Entries go through the same parser as `whyjob ingest` of a `journalctl -k -o json` export, so
a line read live and the same line imported later are one record.

journalctl is a child process: if it exits (no journal yet, a rotated folder), the error is
reported and it is started again from the last cursor.
"""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import orjson

from whyjob.collector.ingest import kernel
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.live.health import Health
from whyjob.collector.live.node import Put, SourceThread
from whyjob.collector.live.sink import Batch

__all__ = ["JournalKernelLog"]

_BATCH_LINES: Final = 2000


class JournalKernelLog(SourceThread):
    name = "kernel"

    def __init__(
        self,
        put: Put,
        health: Health,
        node: str,
        options: IngestOptions,
        checkpoint: str | None,
        *,
        directory: Path | None = None,
        command: Sequence[str] = ("journalctl",),
        boot_id: str | None = None,
        poll_s: float = 0.2,
        restart_s: float = 5.0,
    ) -> None:
        super().__init__()
        self.put, self.health, self.node = put, health, node
        self.ctx = Context(f"journal:{node}", replace(options, node=node))
        self.boot_id = (boot_id if boot_id is not None else _boot_id()).replace("-", "")
        self.cursor = checkpoint if _resumable(checkpoint, self.boot_id) else None
        self.directory, self.command, self.poll_s = directory, list(command), poll_s
        self.restart_s = restart_s

    def arguments(self) -> list[str]:
        args = [*self.command, "-k", "-f", "-o", "json", "--no-pager"]
        if self.directory is not None:
            args += ["--directory", str(self.directory)]
        return args + (["--after-cursor", self.cursor] if self.cursor else ["--no-tail"])

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            # stderr to a file, read after exit: a pipe nobody drains could block journalctl.
            with tempfile.TemporaryFile() as errors:
                try:
                    process = subprocess.Popen(
                        self.arguments(), stdout=subprocess.PIPE, stderr=errors
                    )
                except OSError as exc:
                    self.health.error(self.name, f"cannot run {self.command[0]}: {exc.strerror}")
                    stop.wait(self.restart_s)
                    continue
                with process:  # closes the pipe and reaps the child
                    try:
                        self._follow(process, stop)
                    finally:
                        process.terminate()
                        try:
                            process.wait(5)
                        except subprocess.TimeoutExpired:
                            process.kill()
                            process.wait()
                if stop.is_set():
                    return
                errors.seek(0)
                problem = errors.read().decode("utf-8", "replace").strip()
            if self.cursor and "cursor" in problem.lower():
                # Vacuumed away, or not a cursor at all: the boot from its start instead
                # (records already stored are recognised by their ids).
                self.cursor = None
            self.health.error(
                self.name,
                f"{self.command[0]} exited with {process.returncode}"
                + (f": {problem.splitlines()[-1]}" if problem else ""),
            )
            stop.wait(self.restart_s)

    def _follow(self, process: subprocess.Popen[bytes], stop: threading.Event) -> None:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        buffer = b""
        pending: list[bytes] = []
        try:
            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], self.poll_s)
                chunk = os.read(fd, 1 << 16) if ready else b""
                if ready and not chunk:
                    return  # journalctl exited
                if chunk:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    pending += [line for line in lines if line.strip()]
                    if len(pending) < _BATCH_LINES:
                        continue  # more may be right behind: send when the burst pauses
                if pending:
                    pending = self._send(pending)
        finally:
            if pending:
                self._send(pending)

    def _send(self, lines: list[bytes]) -> list[bytes]:
        """Hand the entries over; returns what is still to send (all of it, if that failed)."""
        items: list[Item] = []
        cursor = self.cursor
        for line in lines:
            try:
                entry: Any = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                items.append(Rejected(None, f"journalctl printed invalid JSON: {exc}", line))
                continue
            items += kernel.parse_journal_json(self.ctx, entry, None)
            if isinstance(entry, dict) and isinstance(entry.get("__CURSOR"), str):
                cursor = entry["__CURSOR"]

        def batch() -> Batch:
            checkpoint = {self.name: cursor} if cursor else {}
            return Batch(self.name, f"journal:{self.node}", items, checkpoint)

        if not self.hand_over(batch, len(lines)):
            return lines
        self.cursor = cursor
        return []


def _boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _resumable(checkpoint: str | None, boot_id: str) -> bool:
    """A journal cursor (`s=…;i=…;b=BOOT;…`) of this boot. `-k` reads only the current boot,
    and `--after-cursor` skips one entry even when the cursor's own entry is filtered out, so
    a cursor of an earlier boot would lose the new boot's first line; a kmsg checkpoint
    (`boot:seq`) from before a switch to the journal is no cursor at all."""
    if not checkpoint or not checkpoint.startswith("s="):
        return False
    fields = dict(part.split("=", 1) for part in checkpoint.split(";") if "=" in part)
    return not boot_id or fields.get("b") == boot_id
