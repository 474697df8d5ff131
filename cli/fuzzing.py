"""Hostile inputs for the importers: real files, mutated the way bad exports and attackers do.

`mutate` takes a seed file (a real export of some format) and a random source and returns a
damaged copy. JSON seeds are damaged in their structure (a value replaced by one of the wrong
type, a key dropped, an integer past 64 bits, `1e999`, a lone surrogate, deep nesting); every
seed is damaged in its bytes (flips, NUL bytes, cuts, invalid UTF-8, an over-long line, a
repeated or garbage line). `run` feeds each mutant through the real import path into a real
index and reports what escaped: uncaught exceptions with where they were raised, and inputs
that took too long.

The same mutator drives the Hypothesis suite in the tests (which shrinks a failure to a small
case) and `whyjob bench fuzz` (which runs many more inputs, faster, without shrinking).
"""

from __future__ import annotations

import copy
import json
import random
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Crash", "FuzzReport", "Seed", "Target", "load_seeds", "mutate", "run"]


@dataclass(frozen=True, slots=True)
class Seed:
    """A real file to mutate; `origin` keeps its path, which names the pod for kubelet logs."""

    origin: str
    data: bytes


@dataclass(slots=True)
class Crash:
    """An exception that escaped the importer."""

    origin: str
    where: str  # file:line of the innermost whyjob frame
    error: str
    data: bytes


@dataclass(slots=True)
class FuzzReport:
    inputs: int = 0
    records: int = 0  # records stored or quarantined
    quarantined: int = 0
    crashes: list[Crash] = field(default_factory=list)
    slow: list[tuple[str, float]] = field(default_factory=list)  # (origin, seconds)
    seconds: float = 0.0


_SEED_SUFFIXES = (".json", ".jsonl", ".yaml", ".log", ".prom", ".txt")


def load_seeds(folders: Sequence[Path]) -> list[Seed]:
    """Every export-looking file under the folders (sorted, so a seed list is reproducible)."""
    seeds: list[Seed] = []
    for folder in folders:
        files = [folder] if folder.is_file() else sorted(folder.rglob("*"))
        seeds.extend(
            Seed(str(path.relative_to(folder.parent)), path.read_bytes())
            for path in files
            if path.is_file() and path.suffix in _SEED_SUFFIXES and path.stat().st_size < 4 << 20
        )
    return seeds


# -- values a hostile or broken producer writes where a field is expected ----------------------

_MARK = "\u0000whyjob-fuzz-{}\u0000"
# Written into the JSON text after json.dumps, since Python's JSON cannot emit them itself.
_RAW_VALUES = (
    "1e999",
    "-1e999",
    "18446744073709551617",
    "-9223372036854775809",
    str(10**400),
    '"\\ud800"',
    '"x\\udfffy"',
    "[" * 5000 + "]" * 5000,
    "{" + '"a":{' * 3000 + "}" * 3001,
    "NaN",
)
_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    2**63,
    3.5,
    "",
    "x" * 70_000,
    "\u202e\u0000\x1b[31m",
    [],
    {},
    [None],
    {"": None},
    "2026-13-45T99:99:99Z",
    "-1",
    "1e309",
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if len(prefix) > 60:
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for n, value in enumerate(doc[:50]):
            yield from _paths(value, (*prefix, n))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _drop(doc: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return doc


def _mutate_json(doc: Any, rnd: random.Random, *, one_line: bool = False) -> str:
    raws: list[str] = []
    for _ in range(rnd.randint(1, 4)):
        paths = list(_paths(doc))
        path = rnd.choice(paths)
        roll = rnd.random()
        if roll < 0.35:
            doc = _set(doc, path, copy.deepcopy(rnd.choice(_VALUES)))
        elif roll < 0.6:
            raws.append(rnd.choice(_RAW_VALUES))
            doc = _set(doc, path, _MARK.format(len(raws) - 1))
        elif roll < 0.8 and path:
            doc = _drop(doc, path)
        else:
            # The right value in the wrong container: a list where an object was, and back.
            current: Any = doc
            for key in path:
                current = current[key]
            if isinstance(current, dict):
                doc = _set(doc, path, list(current.values()))
            elif isinstance(current, list):
                doc = _set(doc, path, {str(n): v for n, v in enumerate(current)})
            else:
                doc = _set(doc, path, [current])
    text = json.dumps(doc, indent=None if one_line else rnd.choice((None, 2)))
    for n, raw in enumerate(raws):
        text = text.replace(json.dumps(_MARK.format(n)), raw)
    return text


def _json_docs(data: bytes) -> tuple[list[Any], bool] | None:
    """The seed's JSON documents and whether it is JSON lines; None when it is not JSON."""
    try:
        return [json.loads(data)], False
    except ValueError:
        pass
    try:
        docs = [json.loads(line) for line in data.splitlines() if line.strip()]
    except ValueError:
        return None
    return (docs, True) if docs else None


_LINE_DAMAGE: tuple[Callable[[list[bytes], random.Random], None], ...] = (
    lambda lines, rnd: lines.insert(
        rnd.randrange(len(lines) + 1), rnd.randbytes(rnd.randint(1, 80))
    ),
    lambda lines, rnd: lines.insert(
        rnd.randrange(len(lines) + 1), b"x" * rnd.choice((9000, 300_000))
    ),
    lambda lines, rnd: lines.insert(
        rnd.randrange(len(lines) + 1), lines[rnd.randrange(len(lines))]
    ),
    lambda lines, rnd: lines.insert(rnd.randrange(len(lines) + 1), b"\xff\xfe\xed garbage \x00"),
    lambda lines, rnd: lines.__delitem__(rnd.randrange(len(lines))),
)


def _mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    roll = rnd.random()
    if roll < 0.3:
        buf = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            if buf:
                buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        return bytes(buf)
    if roll < 0.45:
        return data[: rnd.randrange(len(data) + 1)]
    if roll < 0.55:
        at = rnd.randrange(len(data) + 1)
        return (
            data[:at]
            + rnd.choice((b"\x00", b"\r", b"\xef\xbb\xbf", b"\\", b'"', b"\n\n"))
            + data[at:]
        )
    lines = data.split(b"\n") or [b""]
    for _ in range(rnd.randint(1, 3)):
        if lines:
            rnd.choice(_LINE_DAMAGE)(lines, rnd)
    return b"\n".join(lines)


def mutate(seed: Seed, rnd: random.Random) -> bytes:
    """A damaged copy of the seed: its structure when it is JSON, its bytes, or both."""
    data = seed.data
    parsed = _json_docs(data) if rnd.random() < 0.7 else None
    if parsed is not None:
        docs, lines = parsed
        if lines:
            n = rnd.randrange(len(docs))
            text = "\n".join(
                _mutate_json(doc, rnd, one_line=True) if i == n else json.dumps(doc)
                for i, doc in enumerate(docs)
            )
        else:
            text = _mutate_json(docs[0], rnd)
        data = text.encode("utf-8", "surrogatepass")
        if rnd.random() < 0.8:
            return data
    return _mutate_bytes(data, rnd)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "whyjob" in f.filename and "fuzzing" not in f.filename]
    if not (ours or frames):
        return "?"
    frame = (ours or frames)[-1]
    name = frame.filename
    cut = name.rfind("whyjob/")
    return f"{name[cut:] if cut >= 0 else name}:{frame.lineno}"


_AT = 1_800_000_000_000  # a fixed clock: the same seed gives the same run
_PASTE = 256 << 10


class Target:
    """Where mutants go: `whyjob ingest` into a real index, and every `diagnose_every`-th
    one of paste size also through `whyjob diagnose` (the paste readers and the rules)."""

    def __init__(self, index_path: Path, *, diagnose_every: int = 4) -> None:
        from whyjob.collector.ingest.base import IngestOptions
        from whyjob.collector.ingest.run import Ingestor
        from whyjob.core.index import SqliteIndex
        from whyjob.explain.ruleset import load_rules

        self.index = SqliteIndex(index_path)
        self.options = IngestOptions(node="fuzz-node", at=_AT)
        self.ingestor = Ingestor(self.index, self.options)
        self.rules = load_rules([])
        self.diagnose_every = diagnose_every
        self.fed = 0

    def feed(self, origin: str, data: bytes) -> tuple[int, int]:
        """(records read, records rejected); raises whatever escaped."""
        from whyjob.cli.pasted import diagnose_text

        result = self.ingestor.ingest_bytes(origin, data, _AT)
        self.fed += 1
        # Pastes are small: a 4 MiB export is ingested, not pasted into diagnose.
        if self.diagnose_every and self.fed % self.diagnose_every == 0 and len(data) <= _PASTE:
            diagnose_text(data, self.rules, self.options, origin)
        return result.stored + result.duplicate + result.rejected, result.rejected

    def close(self) -> None:
        self.index.close()


def run(
    seeds: Sequence[Seed],
    inputs: int,
    index_path: Path,
    *,
    seed: int = 0,
    slow_s: float = 5.0,
    diagnose_every: int = 10,
    on_progress: Callable[[int], None] | None = None,
) -> FuzzReport:
    """Feed `inputs` mutants of the seeds, one file each, to a real index and diagnose."""
    report = FuzzReport()
    rnd = random.Random(seed)
    started = time.perf_counter()
    target = Target(index_path, diagnose_every=diagnose_every)
    try:
        for n in range(inputs):
            chosen = seeds[rnd.randrange(len(seeds))]
            data = mutate(chosen, rnd)
            t0 = time.perf_counter()
            try:
                read, rejected = target.feed(chosen.origin, data)
            except Exception as exc:  # the point is to catch what escapes
                report.crashes.append(
                    Crash(chosen.origin, _where(exc), f"{type(exc).__name__}: {exc}"[:300], data)
                )
            else:
                report.records += read
                report.quarantined += rejected
            took = time.perf_counter() - t0
            if took > slow_s:
                report.slow.append((chosen.origin, took))
            report.inputs += 1
            if on_progress and n % 1000 == 999:
                on_progress(n + 1)
    finally:
        target.close()
    report.seconds = time.perf_counter() - started
    return report
