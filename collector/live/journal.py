"""The kernel log through the systemd journal, where `/dev/kmsg` cannot be read.

`journalctl -k -f -o json` (on the host's journal folder when the agent runs in a pod) gives
each kernel line with its wall-clock time and a cursor. The checkpoint is the cursor of the
last entry handed over: a restarted agent asks for what came `--after-cursor`, so it neither
skips nor repeats a line; without one it reads the current boot from its start (`--no-tail`).
Entries go through the same parser as `whyjob ingest` of a `journalctl -k -o json` export, so
a line read live and the same line imported later are one record.

journalctl is a child process: if it exits (no journal yet, a rotated folder), the error is
reported and it is started again from the last cursor.
"""

from __future__ import annotations

import os
import select
import subprocess
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
_RESTART_S: Final = 5.0


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
        poll_s: float = 0.2,
    ) -> None:
        super().__init__()
        self.put, self.health, self.node = put, health, node
        self.ctx = Context(f"journal:{node}", replace(options, node=node))
        # A kmsg checkpoint (boot:seq) from before a switch to the journal is not a cursor.
        self.cursor = checkpoint if checkpoint and "s=" in checkpoint else None
        self.directory, self.command, self.poll_s = directory, list(command), poll_s

    def arguments(self) -> list[str]:
        args = [*self.command, "-k", "-f", "-o", "json", "--no-pager"]
        if self.directory is not None:
            args += ["--directory", str(self.directory)]
        return args + (["--after-cursor", self.cursor] if self.cursor else ["--no-tail"])

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                process = subprocess.Popen(
                    self.arguments(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            except OSError as exc:
                self.health.error(self.name, f"cannot run {self.command[0]}: {exc.strerror}")
                stop.wait(_RESTART_S)
                continue
            with process:  # closes the pipes and reaps the child
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
                assert process.stderr is not None
                problem = process.stderr.read().decode("utf-8", "replace").strip()
            self.health.error(
                self.name,
                f"{self.command[0]} exited with {process.returncode}"
                + (f": {problem.splitlines()[-1]}" if problem else ""),
            )
            stop.wait(_RESTART_S)

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
        try:
            checkpoint = {self.name: cursor} if cursor else {}
            self.put(Batch(self.name, f"journal:{self.node}", items, checkpoint))
        except Exception as exc:  # a full disk, a stopped writer: keep the lines, try again
            self.health.error(self.name, f"{type(exc).__name__}: {exc}")
            return lines
        self.cursor = cursor
        self.health.ok(self.name)
        self.health.count(self.name, "lines", len(lines))
        return []
