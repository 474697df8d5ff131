"""The import pipeline: detection, damage, quarantine, counting, logs."""

from __future__ import annotations

import gzip
import io
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from whyjob.collector.ingest.base import PodRef
from whyjob.collector.ingest.loglines import classify, clean
from whyjob.collector.redaction import redact_text as redact
from whyjob.core.index import SqliteIndex

Ingest = Callable[..., Any]
FIXTURES = Path(__file__).parent.parent / "fixtures"
UID = "5d1c9a2b-7e3f-4c1a-9b2d-0f6e8a7c4b31"


def _kubelet_log(root: Path, restart: int = 1) -> Path:
    folder = root / "var/log/pods" / f"ml-research_gpt2-run7-worker-1_{UID}" / "pytorch"
    folder.mkdir(parents=True)
    target = folder / f"{restart}.log"
    shutil.copy(FIXTURES / "logs" / "cri-run.log", target)
    return target


def test_truncated_json_keeps_the_complete_items(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    text = (FIXTURES / "k8s" / "events.json").read_text()
    cut = tmp_path / "events.json"
    cut.write_text(text[: text.index('"reason": "NodeNotReady"')])
    rejected: list[tuple[str, str]] = []
    summary = ingest(cut, rejected=rejected)
    assert summary.total("stored") == 3  # the three whole events before the damage
    assert summary.total("rejected") == 1
    ((where, why),) = rejected
    assert where.startswith(f"{cut}:") and int(where.rsplit(":", 1)[1]) > 50
    assert "truncated JSON document" in why
    (row,) = index.quarantined()
    assert row[2] == where and row[5] and row[5].lstrip().startswith(b"{")


def test_corrupt_item_in_the_middle_loses_only_that_item(ingest: Ingest, tmp_path: Path) -> None:
    text = (FIXTURES / "k8s" / "events.json").read_text()
    broken = tmp_path / "events.json"
    broken.write_text(text.replace('"count": 4,', '"count": 4 oops,'))
    rejected: list[tuple[str, str]] = []
    summary = ingest(broken, rejected=rejected)
    assert (summary.total("stored"), summary.total("rejected")) == (4, 1)
    assert "invalid JSON" in rejected[0][1]


def test_binary_file_is_rejected_with_a_reason(ingest: Ingest, tmp_path: Path) -> None:
    blob = tmp_path / "core.dump"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    rejected: list[tuple[str, str]] = []
    summary = ingest(blob, rejected=rejected)
    assert summary.total("rejected") == 1 and summary.total("stored") == 0
    assert "binary file (NUL byte at offset 7)" in rejected[0][1]


def test_binary_files_met_in_a_folder_are_skipped_not_errors(
    ingest: Ingest, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "blob.bin").write_bytes(b"\x00\x01")
    (bundle / "notes.txt").write_text("things I noticed\n")
    shutil.copy(FIXTURES / "k8s" / "events.json", bundle)
    summary = ingest(bundle)
    assert summary.total("rejected") == 0 and summary.total("stored") == 5
    assert sorted(Path(f.origin).name for f in summary.files if f.skipped) == [
        "blob.bin",
        "notes.txt",
    ]


def test_kubelet_log_with_invalid_utf8_keeps_every_other_line(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    log = _kubelet_log(tmp_path)
    lines = log.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"grad_norm", b"grad\xff\xfenorm")
    log.write_bytes(b"\n".join(lines))
    rejected: list[tuple[str, str]] = []
    summary = ingest(log, rejected=rejected)
    assert summary.files[0].fmt == "log.cri"
    # 11 lines, one P+F pair, one bad; plus the traceback they hold, put back together
    assert (summary.total("stored"), summary.total("rejected")) == (10, 1)
    assert rejected == [(f"{log}:3", "invalid UTF-8 (byte 0xff at column 63)")]
    (row,) = index.quarantined()
    assert b"grad\xff\xfenorm" in row[5]


def test_cri_lines_are_classified_joined_and_redacted(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    ingest(_kubelet_log(tmp_path))
    records = index.pod_evidence([UID], 0, 2**62)
    by_kind: dict[str, list[str]] = {}
    for ev in records:
        by_kind.setdefault(ev.kind, []).append(ev.message)
        assert (
            ev.attrs["restart"] == 1 and ev.container == "pytorch" and ev.namespace == "ml-research"
        )
    assert by_kind["log.checkpoint"] == [
        "Saving model checkpoint to /ckpt/gpt2-run7/checkpoint-200"
    ]
    assert [m[:10] for m in by_kind["log.progress"]] == ["{'loss': 2", " iteration"]
    assert (
        "KeyError: 'input_ids'" in by_kind["log.error"]
        and "Traceback (most recent call last):" in by_kind["log.error"]
    )
    tail = index.log_tail(UID, "pytorch", 2**62, 10)
    joined = next(ev.message for ev in tail if "wandb" in ev.message)
    assert (
        "api_key=[REDACTED]" in joined and "hf_" not in joined and "0123456789abcdef" not in joined
    )
    (pod,) = index.pods_named_like("gpt2-run7")
    assert pod.uid == UID


def test_plain_log_needs_a_pod_and_takes_leading_timestamps(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    log = tmp_path / "train.out"
    log.write_text(
        "2026-03-04 10:12:02,100 INFO starting\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "2026-03-04 10:13:00,000 ERROR RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    rejected: list[tuple[str, str]] = []
    assert ingest(log, rejected=rejected).total("stored") == 0  # a file named on the command line
    assert "not a format whyjob recognises" in rejected[0][1]
    summary = ingest(log, pod=PodRef("ml", "job-worker-0", "main"))
    assert summary.files[0].fmt == "log.plain" and summary.total("stored") == 5  # + the traceback
    records = index.entity_evidence("pod", ["job-worker-0"], 0, 2**62)
    traceback = next(ev for ev in records if ev.message.startswith("Traceback"))
    first = next(ev for ev in records if ev.message.endswith("starting"))
    assert traceback.ts == first.ts and traceback.attrs["seq"] == 2  # inherits the previous stamp


def test_stdin_and_gzip(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (FIXTURES / "k8s" / "events.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert ingest("-").total("stored") == 5
    packed = tmp_path / "nodes.json.gz"
    packed.write_bytes(gzip.compress((FIXTURES / "k8s" / "nodes.json").read_bytes()))
    assert ingest(packed).total("stored") > 1


def test_truncated_yaml_list_rejects_only_the_cut_item(ingest: Ingest, tmp_path: Path) -> None:
    text = (FIXTURES / "k8s" / "pods.yaml").read_text()
    cut = tmp_path / "pods.yaml"
    cut.write_text(text[: text.index("    phase: Pending")])
    rejected: list[tuple[str, str]] = []
    summary = ingest(cut, rejected=rejected)
    assert summary.total("rejected") == 1 and summary.total("stored") >= 4
    assert "truncated YAML document" in rejected[0][1] and rejected[0][0].endswith(":51")


def test_forced_format_and_unknown_json(ingest: Ingest, tmp_path: Path) -> None:
    doc = tmp_path / "x.json"
    doc.write_text('{"hello": "world"}')
    rejected: list[tuple[str, str]] = []
    ingest(doc, rejected=rejected)
    assert "JSON, but not an export whyjob recognises" in rejected[0][1]
    rejected.clear()
    ingest(FIXTURES / "k8s" / "events.json", rejected=rejected, fmt="aws.asg-activities")
    assert rejected and "describe-scaling-activities" in rejected[0][1]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "log.error"),
        (
            "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout",
            "log.error",
        ),
        ("successfully saved checkpoint from iteration    1000 to /ckpt", "log.checkpoint"),
        ("[Torch] Checkpoint global_step1000 is ready now!", "log.checkpoint"),
        ("Epoch 3:  45%|████▌     | 450/1000 [01:02<01:16,  7.21it/s, loss=2.31]", "log.progress"),
        ("step 1200 | loss 2.31", "log.progress"),
        # Checkpoint markers of the common trainers
        ("Saving model checkpoint to /ckpt/run7/checkpoint-1200", "log.checkpoint"),  # HF Trainer
        (
            "Epoch 3, global step 1200: 'val_loss' reached 2.31 (best 2.31), saving model to '/ckpt/epoch=3-step=1200.ckpt' as top 1",
            "log.checkpoint",
        ),  # Lightning
        (
            "saving checkpoint at iteration    1000 to /ckpt in torch_dist format",
            "log.checkpoint",
        ),  # Megatron
        ("Saved checkpoint to /ckpt/step_1200.pt", "log.checkpoint"),  # plain torch.save
        (
            'train.py:248] Stored checkpoint at step 3000 to "/ckpt/checkpoint_3000"',
            "log.checkpoint",
        ),  # vision_transformer's JAX trainer: a save, not one more step
        (
            " iteration  100/ 500000 | lm loss: 2.6E+00 | number of nan iterations:   0 |",
            "log.progress",
        ),
        ("step 1200 | loss: nan | grad norm: inf", "log.error"),
        ("NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7", "log.line"),
        # Structured loggers' own error levels: logfmt, JSON, bracketed, Go's angle brackets.
        ('time="2022-10-16T07:01:34Z" level=error msg="pod deleted" workflow=xyz', "log.error"),
        (
            '{"level":"error","time":"2024-08-26T21:51:35Z","message":"could not schedule pod"}',
            "log.error",
        ),
        (
            "2021/10/21 10:18:25.212739 juicefs[6] <FATAL>: create /jfs/pvc: file exists",
            "log.error",
        ),
        ('time="2022-10-16T07:01:34Z" level=info msg="node phase Pending -> Skipped"', "log.line"),
    ],
)
def test_classification(line: str, kind: str) -> None:
    assert classify(clean(line)).kind == kind


def test_cleaning_and_redaction() -> None:
    assert clean("\x1b[31mERROR\x1b[0m boom\r") == "ERROR boom"
    assert redact("s3://AKIAABCDEFGHIJKLMNOP@bucket") == "s3://[REDACTED]@bucket"
    assert (
        redact("https://user:hunter2@git.example.com/x")
        == "https://user:[REDACTED]@git.example.com/x"
    )
    assert redact("Authorization: Bearer eyJhbGciOi.abc.def") == "Authorization: Bearer [REDACTED]"
    assert redact("password=[REDACTED]") == "password=[REDACTED]"
    assert redact("nothing secret here") == "nothing secret here"


def test_configured_markers_extend_the_built_in_ones() -> None:
    from whyjob.collector.ingest.loglines import LineClassifier

    custom = LineClassifier(
        {
            "checkpoint": [r"ckpt-sync done for shard (?P<step>\d+)"],
            "progress": [r"^tick (?P<step>\d+)"],
            "error": ["PANIC"],
        }
    )
    saved = custom.classify("ckpt-sync done for shard 42")
    assert (saved.kind, saved.step, saved.phase) == ("log.checkpoint", 42, "saved")
    assert (
        custom.classify("tick 17").step == 17 and custom.classify("tick 17").kind == "log.progress"
    )
    assert custom.classify("PANIC in allocator").kind == "log.error"
    assert classify("ckpt-sync done for shard 42").kind == "log.line"  # only where configured
