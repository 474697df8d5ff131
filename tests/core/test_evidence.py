from __future__ import annotations

import pytest

from whyjob.core.evidence import Evidence, Severity, evidence_id, format_id, parse_id
from whyjob.core.taxonomy import CATEGORIES, Grade, category
from whyjob.core.timeutil import format_duration, format_ts, parse_ts


def test_ids_are_deterministic_and_versioned() -> None:
    first = evidence_id("k8s.event", "uid-1", "1/1000")
    assert first == evidence_id("k8s.event", "uid-1", "1/1000")
    assert first != evidence_id("k8s.event", "uid-1", "2/2000")  # an UPDATE is a new version
    assert first != evidence_id("k8s.pod", "uid-1", "1/1000")
    assert 0 <= first < 2**63  # fits a positive SQLite rowid


def test_public_id_round_trips() -> None:
    value = evidence_id("log", "x", "y")
    text = format_id(value)
    assert len(text) == 16 and int(text, 16) == value
    assert parse_id(text) == value
    with pytest.raises(ValueError):
        parse_id("not-hex")
    with pytest.raises(ValueError):
        parse_id("")


def test_entities_lists_only_set_keys() -> None:
    ev = Evidence(1, 0, "s", "k", "m", node="n1", pod_uid="u")
    assert ev.entities() == {"pod_uid": "u", "node": "n1"}
    assert Severity.parse("warning") is Severity.WARNING


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-04T10:11:12Z", 1772619072000),
        ("2026-03-04T10:11:12.123456789Z", 1772619072123),
        ("2026-03-04T11:11:12+01:00", 1772619072000),
        ("2026-03-04T10:11:12,5+00:00", 1772619072500),
        ("Wed, 04 Mar 2026 10:11:12 GMT", 1772619072000),
        ("04 Mar 2026 10:11:12 GMT", 1772619072000),
    ],
)
def test_parse_ts_accepts_every_source_spelling(text: str, expected: int) -> None:
    assert parse_ts(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-45T00:00:00Z"])
def test_parse_ts_rejects_garbage_with_the_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ts(text)


def test_formatting() -> None:
    assert format_ts(1772619072123) == "2026-03-04T10:11:12Z"
    assert format_ts(1772619072123, precise=True) == "2026-03-04T10:11:12.123Z"
    assert format_ts(None) == "-"
    assert [format_duration(ms) for ms in (4_000, 125_000, 7_380_000, 200_000_000)] == [
        "4s",
        "2m 05s",
        "2h 03m",
        "2d 7h",
    ]


def test_taxonomy_contract() -> None:
    # The ids are a public contract (DESIGN §4): this list changes only with a new schema.
    assert sorted(CATEGORIES) == sorted(
        [
            "gpu.xid", "node.maintenance", "node.spot_interruption", "node.scale_in",
            "node.not_ready", "node.eviction", "pod.preempted", "pod.deleted",
            "container.oom_killed", "app.cuda_oom", "app.cuda_error", "app.nccl_timeout",
            "app.nccl_error", "app.exception", "app.segfault", "app.nan_loss",
            "app.checkpoint_error", "storage.io", "startup.image_pull", "startup.unschedulable",
            "startup.config", "peer.failure", "job.completed", "unknown",
        ]
    )  # fmt: skip
    assert category("gpu.xid").owner == "infra"
    with pytest.raises(KeyError, match="not a whyjob taxonomy id"):
        category("gpu.melted")
    assert Grade("proven").rank > Grade("likely").rank > Grade("possible").rank
