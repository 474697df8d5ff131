"""Pasted text to a diagnosis: the paste reader's records through the diagnosis engine.

Shared by `whyjob diagnose` and `whyjob bench realworld`, so the benchmark measures exactly
what a user runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from whyjob.collector.admit import Unfit, admit
from whyjob.collector.ingest.base import IngestOptions, Rejected
from whyjob.collector.ingest.paste import read_paste
from whyjob.collector.redaction import redact_record
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.explain.diagnosis import Diagnosis, diagnose
from whyjob.explain.ruleset import RuleSet

__all__ = ["Pasted", "diagnose_text", "read_pasted"]


@dataclass(slots=True)
class Pasted:
    """What the paste reader made of one or more pasted sources."""

    records: list[Evidence] = field(default_factory=list)
    pods: list[PodRecord] = field(default_factory=list)
    skipped: list[tuple[str, int | None, str]] = field(default_factory=list)  # origin, line, why


def read_pasted(sources: Iterable[tuple[str, bytes]], options: IngestOptions) -> Pasted:
    """Records and pods from (origin, bytes) pairs; what a reader refused is listed, not lost."""
    pasted = Pasted()
    for origin, data in sources:
        for item in read_paste(origin, data, options):
            if isinstance(item, Rejected):
                pasted.skipped.append((origin, item.line, item.reason))
                continue
            try:  # the same check the index makes: a paste reads as its import would
                if isinstance(item, Evidence):
                    pasted.records.append(redact_record(admit(item)))
                elif isinstance(item, PodRecord):
                    pasted.pods.append(redact_record(admit(item)))
            except Unfit as exc:
                pasted.skipped.append((origin, None, f"unusable record: {exc}"))
    return pasted


def diagnose_text(
    text: str | bytes, rules: RuleSet, options: IngestOptions, origin: str = "<paste>"
) -> Diagnosis:
    """The diagnosis of one pasted text, as `whyjob diagnose` gives it."""
    data = text.encode() if isinstance(text, str) else text
    pasted = read_pasted([(origin, data)], options)
    return diagnose(pasted.records, pasted.pods, rules, undated=options.at)
