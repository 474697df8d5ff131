"""What a launcher says about its workers when the job fails: torchrun's error summary.

torch.distributed.elastic ends a failed run with a `ChildFailedError` and a table: every
worker that failed (`Failures:`) and the one it saw fail first (`Root Cause (first observed
failure):`), each as `[n]:` followed by `time`, `host`, `rank (local_rank)`, `exitcode (pid)`,
`error_file` and `traceback` (the worker's own error, or "Signal 9 (SIGKILL) received by PID
…"). The format is torch's `_FAILURE_FORMAT_TEMPLATE` (torch/distributed/elastic/
multiprocessing/errors/__init__.py), unchanged since torchelastic joined PyTorch. The tracker
reads it from log lines, whatever prefix a launcher or a terminal put before them, and hands
back one `Failure` per worker when the table ends; the agent's own line about the worker it
saw fail (`failed (exitcode: -9) local_rank: 0 (pid: …)`) is a first failure too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from signal import Signals
from typing import Final

__all__ = ["Failure", "SummaryTracker"]

_ROOT: Final = re.compile(r"Root Cause \(first observed failure\):\s*$")
_FAILURES: Final = re.compile(r"(?:^|\s)Failures:\s*$")
_ENTRY: Final = re.compile(r"\[(?P<index>\d+)\]:\s*$")
_FIELD: Final = re.compile(
    r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*?)\s*$"
)
_RANK: Final = re.compile(r"^(?P<rank>-?\d+)(?: \(local_rank: (?P<local>-?\d+)\))?")
_EXIT: Final = re.compile(r"^(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_SIGNAL: Final = re.compile(r"Signal (?P<number>\d+) \((?P<name>SIG\w+)\)")
# A table row: what is left of a line once a launcher's or a terminal's prefix is cut.
_PREFIX: Final = re.compile(
    r"^(?:\s*\d+: )?(?:\[\d+,\d+\]<std(?:out|err)>:)?(?:\[(?:rank|default)\d+\]:)?"
)
# The agent's own line when it sees a worker fail, before it stops the others:
# `failed (exitcode: -9) local_rank: 0 (pid: 598577) of binary: /usr/bin/python`.
# DeepSpeed's launcher says it as `... '--local_rank=1', ...] exits with return code = -11`,
# and torch.distributed.launch (before torchrun) as the CalledProcessError it raises: `Command
# '[..., '--local_rank=1', ...]' returned non-zero exit status 1.`
_AGENT_FAILED: Final = re.compile(
    r"\bfailed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: \d+\)"
    r"|--local_rank=(?P<ds_local>\d+)\b.*\bexits with return code = (?P<ds_code>-?\d+)"
    r"|CalledProcessError: Command '\[.*--local_rank=(?P<cp_local>\d+)\b.*\]' returned non-zero"
    r" exit status (?P<cp_code>-?\d+)"
)
_MAX_ENTRIES: Final = 4096


@dataclass(slots=True)
class Failure:
    """One worker in the launcher's table."""

    line: int
    first: bool  # listed under "Root Cause (first observed failure)"
    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    host: str | None = None
    time: str | None = None
    detail: str | None = None  # the traceback field: the worker's error, or the signal

    @property
    def summary(self) -> str:
        who = (
            f"rank {self.rank}"
            if self.rank is not None
            else f"local rank {self.local_rank}"
            if self.local_rank is not None
            else "a worker"
        )
        where = f" on {self.host}" if self.host else ""
        how = f"exit code {self.exit_code}" + (f", {self.signal}" if self.signal else "")
        role = "failed first" if self.first else "failed"
        return f"{who}{where} {role} ({how})"


class SummaryTracker:
    """Feed it every log line in order; it returns the workers of each table as it ends."""

    def __init__(self) -> None:
        self._entries: list[Failure] = []
        self._section: bool | None = None  # inside a table: True under Root Cause
        self._current: Failure | None = None

    def feed(self, number: int, text: str) -> list[Failure]:
        body = text[_PREFIX.match(text).end() :]  # type: ignore[union-attr]  # always matches
        stripped = body.strip()
        if self._section is None and (agent := _AGENT_FAILED.search(body)):
            return [_agent_failure(number, agent)]
        if _ROOT.search(stripped):
            self._section = True
            self._current = None
            return []
        if _FAILURES.search(stripped):
            self._section = False
            self._current = None
            return []
        if self._section is None:
            return []
        if _ENTRY.match(stripped):
            if len(self._entries) < _MAX_ENTRIES:
                self._current = Failure(number, first=self._section)
                self._entries.append(self._current)
            return []
        if (found := _FIELD.match(body)) and self._current is not None:
            self._field(self._current, found.group("key"), found.group("value"))
            return []
        if not stripped or set(stripped) <= set("=-") or stripped.startswith("<NO_OTHER"):
            if set(stripped) == {"="} and self._section:
                return self.close()  # the rule that closes the table after the root cause
            return []
        return self.close()  # anything else ends the table

    def close(self) -> list[Failure]:
        done, self._entries = self._entries, []
        self._section, self._current = None, None
        return done

    @staticmethod
    def _field(failure: Failure, key: str, value: str) -> None:
        if key == "rank" and (rank := _RANK.match(value)):
            failure.rank = int(rank.group("rank"))
            failure.local_rank = int(rank.group("local")) if rank.group("local") else None
        elif key == "exitcode" and (code := _EXIT.match(value)):
            failure.exit_code = int(code.group("code"))
        elif key == "host":
            failure.host = value or None
        elif key == "time":
            failure.time = value or None
        elif key == "traceback":
            # torch's placeholder when the worker wrote no error file says nothing of its own
            failure.detail = (
                None if value.startswith("To enable traceback") else value[:500] or None
            )
            if signal := _SIGNAL.search(value):
                failure.signal = signal.group("name")


def _agent_failure(number: int, found: re.Match[str]) -> Failure:
    """The worker the agent saw fail first; a negative exit code is the signal that ended it."""
    code = int(found.group("code") or found.group("ds_code") or found.group("cp_code"))
    signal: str | None = None
    if code < 0:
        try:
            signal = Signals(-code).name
        except ValueError:
            signal = None
    return Failure(
        number,
        first=True,
        local_rank=int(found.group("local") or found.group("ds_local") or found.group("cp_local")),
        exit_code=code,
        signal=signal,
    )
