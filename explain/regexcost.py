"""Does a regex take quadratic time on a long line? Measured, not guessed.

A pattern such as `\\S+ for removal` or `[\\w.]*Error` tries every start position inside a long
run of matching characters and scans to its end from each: a 300 KB line then costs minutes.
`slowest_probe` times a pattern on long lines of the shapes real logs hold (one long word, a
dotted path, digits, spaces, `key: value` runs, bracketed tokens), alone and after each word
the pattern spells out (so `OpType=(?P<op>\\w+).*?ran for` meets `OpType=xxxx...`), and
reports the worst, so `whyjob rules lint` can name a rule before a runaway log line finds it.
"""

from __future__ import annotations

import re
import time

__all__ = ["PROBE_CHARS", "slowest_probe"]

PROBE_CHARS = 20_000
_SHAPES = ("x", " ", "a.", "1", "a: ", "[a]", "node ", "a=b ", "Ab1_-.", "\t", '"a" ')
_PROBES = tuple((shape, shape * (PROBE_CHARS // len(shape))) for shape in _SHAPES)


# Words the pattern spells out: runs of plain characters not after a backslash.
_WORD = re.compile(r"(?<![\\\w])[A-Za-z][\w=: -]{3,}")
_AFTER_WORDS = ("x", "1", " ", "a.")
_AGAIN_S = 0.005


def slowest_probe(pattern: re.Pattern[str]) -> tuple[str, float]:
    """The probe on which `pattern.search` is slowest (its shape, after the word it starts
    with, if any), and its time in seconds."""
    probes = list(_PROBES)
    for word in dict.fromkeys(_WORD.findall(pattern.pattern)[:6]):
        probes += [
            (f"{word}{shape}", word + text) for shape, text in _PROBES if shape in _AFTER_WORDS
        ]
    worst = ("", 0.0)
    for shape, text in probes:
        took = _quickest(pattern, text)
        if took > _AGAIN_S:  # slow once: the best of three, so a busy machine is not blamed
            took = min(took, _quickest(pattern, text), _quickest(pattern, text))
        if took > worst[1]:
            worst = (shape, took)
    return worst


def _quickest(pattern: re.Pattern[str], text: str) -> float:
    started = time.perf_counter()
    pattern.search(text)
    return time.perf_counter() - started
