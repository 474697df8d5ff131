"""Hostile and broken files: each gets a clear error, costs only itself, and the good records
beside it are stored."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
from pathlib import Path

from tests.collector.conftest import Ingest
from whyjob.collector.ingest.base import PodRef
from whyjob.core.index import SqliteIndex
from whyjob.core.settings import IngestLimits

FIXTURES = Path(__file__).parents[1] / "fixtures"
UID = "5d1c9a2b-7e3f-4c1a-9b2d-0f6e8a7c4b31"


def _events() -> dict[str, object]:
    loaded: dict[str, object] = json.loads((FIXTURES / "k8s" / "events.json").read_text())
    return loaded


def _cri_log(root: Path) -> Path:
    folder = root / "var/log/pods" / f"ml-research_gpt2-run7-worker-1_{UID}" / "pytorch"
    folder.mkdir(parents=True)
    return folder / "0.log"


def test_a_record_of_the_wrong_shape_costs_only_itself(ingest: Ingest, tmp_path: Path) -> None:
    """Wrong JSON types, a number past 64 bits and a lone surrogate, each in one item of a
    List: that item is quarantined with its bytes, every other item is stored."""
    doc = _events()
    items = doc["items"]
    assert isinstance(items, list) and len(items) == 5
    items[1]["involvedObject"] = ["not", "an", "object"]
    items[2]["metadata"] = 7
    items[3]["count"] = 2**70
    items[4]["message"] = "\ud800 torn"
    path = tmp_path / "events.json"
    path.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    rejected: list[tuple[str, str]] = []
    summary = ingest(path, rejected=rejected)
    assert summary.total("stored") + summary.total("rejected") == len(items)
    assert summary.total("stored") >= 1 and summary.total("rejected") >= 1, rejected
    assert all(where.startswith(f"{path}:") and why for where, why in rejected), rejected
    assert summary.exit_code == 1


def test_deep_nesting_is_damage_not_a_crash(ingest: Ingest, tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(
        '{"kind": "EventList", "apiVersion": "v1", "items": ' + "[" * 20000 + "]" * 20000 + "}"
    )
    rejected: list[tuple[str, str]] = []
    summary = ingest(path, rejected=rejected)
    assert summary.total("rejected") == 1 and "nested too deeply" in rejected[0][1]


def test_gzip_bomb_is_refused_without_inflating_it(ingest: Ingest, tmp_path: Path) -> None:
    bomb = tmp_path / "events.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 << 20), compresslevel=9))  # 64 KiB -> 64 MiB
    rejected: list[tuple[str, str]] = []
    tracemalloc.start()
    try:
        summary = ingest(bomb, rejected=rejected, limits=IngestLimits(inflated_bytes=1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.exit_code == 3 and "inflates past 1,048,576 bytes" in rejected[0][1]
    assert peak < 8 << 20  # inflated in bounded steps: never anywhere near the 64 MiB


def test_concatenated_gzip_members_are_all_read(ingest: Ingest, tmp_path: Path) -> None:
    text = (FIXTURES / "k8s" / "events.json").read_bytes()
    path = tmp_path / "events.json.gz"
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    items = _events()["items"]
    assert isinstance(items, list)
    summary = ingest(path)
    assert summary.exit_code == 0 and summary.total("stored") == len(items)


def test_yaml_alias_bomb_is_refused_and_its_neighbours_read(ingest: Ingest, tmp_path: Path) -> None:
    bomb = (
        "apiVersion: v1\nkind: Event\nmetadata: {name: bomb, namespace: default}\n"
        "reason: Boom\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "message: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    )
    good = (FIXTURES / "k8s" / "pods.yaml").read_text()
    path = tmp_path / "mixed.yaml"
    path.write_text(good + "\n---\n" + bomb)
    rejected: list[tuple[str, str]] = []
    started = time.perf_counter()
    summary = ingest(path, rejected=rejected)
    assert time.perf_counter() - started < 5
    assert any("YAML aliases are refused" in why for _, why in rejected), rejected
    assert summary.total("stored") > 0 and summary.exit_code == 1


def test_a_runaway_line_is_cut_kept_and_counted(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    log = _cri_log(tmp_path)
    runaway = "x" * 500_000
    log.write_text(
        "2026-03-04T10:00:00.000000000Z stderr F starting\n"
        f"2026-03-04T10:00:01.000000000Z stderr F {runaway}\n"
        "2026-03-04T10:00:02.000000000Z stderr F RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    summary = ingest(log, limits=IngestLimits(line_bytes=4096))
    assert summary.files[0].fmt == "log.cri" and summary.files[0].cut == 1
    assert summary.total("rejected") == 0 and summary.total("stored") >= 1
    stored = index._db.execute("SELECT max(length(message)) FROM evidence").fetchone()[0]
    assert stored < 8192


def test_garbage_and_nul_lines_cost_only_themselves(ingest: Ingest, tmp_path: Path) -> None:
    """A torn write leaves garbage and NUL bytes in a kubelet log: those lines are rejected,
    the file stays a CRI log and every other line is read."""
    log = _cri_log(tmp_path)
    log.write_bytes(
        b"2026-03-04T10:00:00.000000000Z stderr F epoch 1 step 100 loss 2.1\n"
        b"\x00\x00\x00\x00\x00\x00\x00\x00\n"
        b"garbage that is no CRI line\n"
        b"2026-03-04T10:00:02.000000000Z stderr F RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    rejected: list[tuple[str, str]] = []
    summary = ingest(log, rejected=rejected)
    assert summary.files[0].fmt == "log.cri"
    assert sorted(int(w.rsplit(":", 1)[1]) for w, _ in rejected) == [2, 3]
    assert "NUL byte" in rejected[0][1]


def test_oversized_document_is_refused_unparsed(ingest: Ingest, tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(json.dumps(_events()))
    rejected: list[tuple[str, str]] = []
    summary = ingest(path, rejected=rejected, limits=IngestLimits(document_bytes=1000))
    assert "over ingest.max_document" in rejected[0][1] and summary.total("stored") == 0


def test_json_lines_are_bounded_line_by_line(ingest: Ingest, tmp_path: Path) -> None:
    items = _events()["items"]
    assert isinstance(items, list)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in items) + "\n")
    summary = ingest(path, limits=IngestLimits(document_bytes=path.stat().st_size - 1))
    assert summary.total("stored") == len(items) and summary.total("rejected") == 0


def test_a_trainer_log_of_printed_dicts_stays_a_log(ingest: Ingest, tmp_path: Path) -> None:
    """Hugging Face's Trainer prints Python dicts (`{'loss': 2.0}`), which are not JSON: the
    log is read as a log, and its traceback with it."""
    log = tmp_path / "train.log"
    log.write_text(
        "***** Running training *****\n"
        + "".join(
            f"{{'loss': {2.0 - n / 10}, 'learning_rate': 5e-05, 'epoch': {n / 10}}}\n"
            for n in range(6)
        )
        + "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    summary = ingest(log, pod=PodRef("ml", "gpt2-run7-worker-1"), at=1_800_000_000_000)
    assert summary.files[0].fmt == "log.plain" and summary.total("rejected") == 0
    assert summary.total("stored") >= 7


def test_a_utf16_export_is_read_as_text(ingest: Ingest, tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_bytes(
        (FIXTURES.parent / "collector/fixtures/kernel/kern.log").read_text().encode("utf-16")
    )
    plain = tmp_path / "plain" / "kern.log"
    plain.parent.mkdir()
    plain.write_bytes((FIXTURES.parent / "collector/fixtures/kernel/kern.log").read_bytes())
    summary = ingest(path, node="node-a", year=2026)
    assert summary.files[0].fmt == "kernel" and summary.total("rejected") == 0
    assert summary.total("stored") == 3  # what the UTF-8 file gives, nothing quarantined
    assert ingest(plain, node="node-a", year=2026).total("duplicate") == 3
