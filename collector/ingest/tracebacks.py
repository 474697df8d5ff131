"""Python tracebacks put back together from log lines.

A traceback arrives as many lines (`Traceback (most recent call last):`, the frames, the
exception), and with torchrun the lines of eight local ranks interleave, each prefixed with
`[rankN]:`. Rules want the whole thing: which exception, raised from which functions, and
whether it was the first of a chain ("During handling of the above exception..."). The
tracker follows one traceback per stream and rank and hands back a summary when the exception
line closes it, or a truncated one when the log moves on before it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Traceback", "TracebackTracker"]

# torchrun's rank prefix, doubled when a rank's own logger adds it again ("[rank0]:[rank0]: ").
_PREFIX: Final = re.compile(r"^\s*(?:\[(?:rank|default)(?P<rank>\d+)\]:\s?)+")
_START: Final = "Traceback (most recent call last):"
# Frames are indented by Python; a paste through markdown often loses the indent.
_FRAME: Final = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>\S+)')
# The line that ends a traceback names the exception's class: any class its module qualifies
# (`botocore.errorfactory.NoSuchKey`, `google.api_core.exceptions.NotFound`), an unqualified one
# named like an exception (a bare `Node: '...'` line of TensorFlow's is not one), and the few
# built-ins named otherwise.
_EXCEPTION: Final = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)+[A-Z]\w*"
    r"|(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning|Failure)"
    r"|StopIteration|StopAsyncIteration|GeneratorExit|socket\.(?:timeout|gaierror|herror))"
    # Ray wraps the worker's exception: `ray.exceptions.RayTaskError(AttributeError): ...`
    r"(?:\((?P<inner>[\w.]+)\))?(?::\s?(?P<detail>.*))?$"
)
# IPython and Jupyter print the exception's class first, on the header line, then frames as
# `Cell In[3], line 1`, `File ~/x.py:12, in f(...)` (IPython 8) or `/x.py in f(...)` and
# `<ipython-input-3-...> in <module>` (older), with `---->` marking each frame's line.
_IPYTHON_START: Final = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\s{2,}Traceback \(most recent call last\)$"
)
_IPYTHON_FRAME: Final = re.compile(
    r"^(?:File (?P<file>\S[^:]*):\d+, in (?P<func>[\w.<>]+)"
    r"|(?P<path>\S+\.py) in (?P<pfunc>[\w.<>]+)\("
    r"|(?P<cell>Cell In\[\d+\]|<ipython-input-[^>]+>)(?:, line \d+| in (?P<cfunc>[\w.<>]+)))"
)
_IPYTHON_NOISE: Final = re.compile(r"^(?:-*> ?\s*\d+\b|-+$|\.\.\.)")
_CHAIN: Final = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_MAX_FRAMES: Final = 40


@dataclass(slots=True)
class Traceback:
    """One traceback: where it started, its frames (innermost last) and its exception."""

    first_line: int
    rank: str | None
    functions: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    exception: str | None = None
    detail: str | None = None
    last_line: int = 0
    chained: bool = False  # it followed "During handling of the above exception" or similar
    truncated: bool = False
    ipython: bool = False  # IPython's layout: the exception named in the header

    @property
    def summary(self) -> str:
        if self.exception is None:
            return "truncated traceback" + (f" in {self.functions[-1]}" if self.functions else "")
        return f"{self.exception}: {self.detail}" if self.detail else self.exception


class TracebackTracker:
    """Feed it every line of one stream, in order; it returns tracebacks as they close."""

    def __init__(self) -> None:
        self._open: dict[str | None, Traceback] = {}
        self._chain_next: set[str | None] = set()

    def feed(self, number: int, text: str) -> list[Traceback]:
        prefix = _PREFIX.match(text)
        rank = prefix.group("rank") if prefix else None
        body = text[prefix.end() :] if prefix else text
        stripped = body.strip()
        done: list[Traceback] = []
        current = self._open.get(rank)
        if stripped == _START:
            if current is not None:  # a new one began before the last closed
                current.truncated = True
                done.append(self._open.pop(rank))
            self._open[rank] = Traceback(number, rank, chained=rank in self._chain_next)
            self._chain_next.discard(rank)
            return done
        if stripped in _CHAIN:
            self._chain_next.add(rank)
            return done
        if header := _IPYTHON_START.match(stripped):
            if current is not None:
                current.truncated = True
                done.append(self._open.pop(rank))
            self._open[rank] = Traceback(number, rank, exception=header.group("name"), ipython=True)
            return done
        if current is not None and current.ipython:
            return done + self._feed_ipython(rank, current, number, body)
        if current is None:
            if not _FRAME.match(body):
                return done
            # A traceback cut above its header (a paste that kept only the frames): read it
            # from its first frame on.
            current = self._open[rank] = Traceback(number, rank, truncated=True)
        if frame := _FRAME.match(body):
            if len(current.functions) < _MAX_FRAMES:
                current.functions.append(frame.group("func"))
                current.files.append(frame.group("file"))
            return done
        if not stripped or body[:1].isspace():
            return done  # a code line, a caret line, or a blank inside the traceback
        done.append(self._finish(rank, number, _EXCEPTION.match(stripped)))
        return done

    def _feed_ipython(
        self, rank: str | None, current: Traceback, number: int, body: str
    ) -> list[Traceback]:
        """A line of an IPython traceback: a frame, code, or the exception line that ends it.
        Code lines there begin at the margin (`----> 1 f()`), so only the exception ends it."""
        if frame := _IPYTHON_FRAME.match(body):
            if len(current.functions) < _MAX_FRAMES:
                current.functions.append(
                    frame.group("func") or frame.group("pfunc") or frame.group("cfunc") or "<cell>"
                )
                current.files.append(
                    frame.group("file") or frame.group("path") or frame.group("cell")
                )
            return []
        stripped = body.strip()
        if not stripped or body[:1].isspace() or _IPYTHON_NOISE.match(stripped):
            return []
        exception = _EXCEPTION.match(stripped)
        return [] if exception is None else [self._finish(rank, number, exception)]

    def _finish(self, rank: str | None, number: int, exception: re.Match[str] | None) -> Traceback:
        """Close the rank's open traceback at this line: with its exception, or cut off."""
        finished = self._open.pop(rank)
        finished.last_line = number
        if exception is not None:
            finished.exception = exception.group("name")
            finished.detail = (exception.group("detail") or "").strip() or None
        else:
            finished.truncated = True
        return finished

    def close(self) -> list[Traceback]:
        """Tracebacks still open when the log ended: cut off."""
        left = list(self._open.values())
        for traceback in left:
            traceback.truncated = True
        self._open.clear()
        return left
