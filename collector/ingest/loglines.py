"""Job log lines: cleaned, redacted and classified at ingest.

Classification decides what the index keeps in the fast path: error-looking lines
(`log.error`), training progress (`log.progress`) and checkpoint markers (`log.checkpoint`)
are read by every explanation; the rest (`log.line`) only as the tail before a termination.
The patterns are deliberately generous: a false `log.error` costs a row, a missed one can cost
the diagnosis. Meaning is assigned later by the rules, not here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from whyjob.core.evidence import Severity

__all__ = ["Classified", "LineClassifier", "classify", "clean"]

_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")

_ERROR: Final = re.compile(
    r"Traceback \(most recent call last\)"
    r"|(?<![\w.:])[A-Za-z_][\w.:]*(?:Error|Exception)\b"
    r"|\b(?:ERROR|FATAL|CRITICAL|Fatal Python error|Segmentation fault|core dumped|Bus error)\b"
    r"|^\s*(?:\[[^\]]*\]:?)?\[?[EF]\d{4} \d\d:\d\d:\d\d"  # glog / c10 error and fatal lines
    r"|terminate called|Watchdog caught|NCCL WARN|\bNCCL error|CUDA error|out of memory"
    r"|No space left on device|Input/output error|\[Errno \d+\]|\bKilled\b|exited unexpectedly"
    r"|killed by signal|\bfailed\b|\bNaN\b|(?i:loss)[^\n|,]{0,20}[:=]\s*(?:nan|inf)\b"
    r"|OVERFLOW!|cannot decrease scale"
    # Structured loggers mark an error in lower case: logfmt, JSON, bracketed and klog-style.
    r"|\blevel=\"?(?:error|fatal|panic|crit)|\"level\":\s*\"(?:error|fatal|panic|ERROR|FATAL)\""
    r"|\[(?:error|fatal)\]|<(?:ERROR|FATAL)>|\berror:",
    re.MULTILINE,
)
_WARNING: Final = re.compile(r"\b(?:WARN(?:ING)?|[Ww]arning)\b|^\s*\[?W\d{4} ")
_CHECKPOINT: Final = re.compile(
    r"(?i)(?P<verb>sav(?:e|ed|ing)|wr(?:ote|itten|iting)|load(?:ed|ing)?|restor(?:ed|ing)"
    r"|resum(?:ed|ing)|\bstor(?:e|ed|ing))\b[^\n]{0,80}?\bcheckpoint"
    r"|\bcheckpoint\b[^\n]{0,120}?\b(?P<after>saved|is ready|written|loaded|restored)\b"
    r"|(?P<lightning>saving model to \S+\.ckpt)"
)
_STEP: Final = re.compile(
    r"(?i)(?:\b(?:global[_ ]?step|step|iteration|iter)\b\s*[:=#]?\s*|checkpoint-|global_step)"
    r"(?P<step>\d+)"
)
_TQDM: Final = re.compile(r"\b(?P<step>\d+)/(?P<total>\d+) \[\d")
_PROGRESS: Final = re.compile(
    r"(?i)\b(?:global[_ ]?step|step|iteration|iter)\b\s*[:=#]?\s*\d+|\b\d+/\d+ \[\d|'loss': "
)


@dataclass(frozen=True, slots=True)
class Classified:
    kind: str
    severity: int
    step: int | None = None
    phase: str | None = None


def clean(text: str) -> str:
    """Strip ANSI colour codes and carriage returns (progress bars) from a log line."""
    return _ANSI.sub("", text) if ("\x1b" in text or "\r" in text) else text


_LINE = Classified("log.line", Severity.INFO)
_WARN = Classified("log.line", Severity.WARNING)


def _step(text: str) -> int | None:
    match = _STEP.search(text) or _TQDM.search(text)
    return int(match.group("step")) if match else None


class LineClassifier:
    """The built-in patterns plus a team's own (`logs.checkpoint|progress|error` in the config
    file): extra checkpoint patterns mark a saved checkpoint, extra progress patterns a step,
    and a named group `step` in either gives the step number."""

    def __init__(self, extra: Mapping[str, Sequence[str]] | None = None) -> None:
        extra = extra or {}
        self._checkpoint = [re.compile(p) for p in extra.get("checkpoint", ())]
        self._progress = [re.compile(p) for p in extra.get("progress", ())]
        self._error = [re.compile(p) for p in extra.get("error", ())]

    @staticmethod
    def _named_step(match: re.Match[str], text: str) -> int | None:
        step = match.groupdict().get("step")
        return int(step) if step and step.isdigit() else _step(text)

    def classify(self, text: str) -> Classified:
        """The kind and severity of one cleaned log line."""
        for pattern in self._checkpoint:
            if found := pattern.search(text):
                return Classified(
                    "log.checkpoint", Severity.INFO, self._named_step(found, text), "saved"
                )
        if any(pattern.search(text) for pattern in self._error):
            return Classified("log.error", Severity.ERROR)
        if checkpoint := _CHECKPOINT.search(text):
            verb = (checkpoint.group("verb") or checkpoint.group("after") or "save").lower()
            if verb.startswith(("load", "restor", "resum")):
                phase = "load"
            elif verb.startswith(
                ("saved", "written", "wrote", "is ready", "stored")
            ) or checkpoint.group("lightning"):
                phase = "saved"
            else:
                phase = "save"
            if not _ERROR.search(text):
                return Classified("log.checkpoint", Severity.INFO, _step(text), phase)
        if _ERROR.search(text):
            return Classified("log.error", Severity.ERROR)
        for pattern in self._progress:
            if found := pattern.search(text):
                return Classified("log.progress", Severity.INFO, self._named_step(found, text))
        if _PROGRESS.search(text):
            return Classified("log.progress", Severity.INFO, _step(text))
        if _WARNING.search(text):
            return _WARN
        return _LINE


_DEFAULT = LineClassifier()


def classify(text: str) -> Classified:
    """The kind and severity of one cleaned log line, with the built-in patterns only."""
    return _DEFAULT.classify(text)
