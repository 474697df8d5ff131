"""dcgm-exporter metrics: Prometheus text scrapes and Prometheus HTTP API answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from whyjob.collector.ingest import dcgm
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.core.entities import Binding
from whyjob.core.evidence import Evidence, Severity
from whyjob.core.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
MTIME = parse_ts("2026-03-14T10:00:00Z")
GPU0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
GPU1 = "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"


def lines(name: str) -> list[tuple[int, str]]:
    return list(enumerate((FIXTURES / name).read_text().splitlines(), start=1))


def scrape(name: str, mtime: int | None = MTIME, **options: Any) -> tuple[list[Item], Context]:
    ctx = Context(f"fixtures/{name}", IngestOptions(**options), mtime)
    return list(dcgm.parse_prometheus_text(ctx, lines(name))), ctx


def api(name: str, **hints: Any) -> list[Item]:
    ctx = Context(f"fixtures/{name}", IngestOptions(), MTIME, path_hints=hints)
    return list(dcgm.parse_prometheus_api(ctx, orjson.loads((FIXTURES / name).read_bytes()), 1))


def of_kind(items: list[Item], kind: str) -> list[Evidence]:
    return [i for i in items if isinstance(i, Evidence) and i.kind == kind]


def test_detection() -> None:
    first = [text for _, text in lines("scrape.prom")][:20]
    assert dcgm.looks_like_prometheus_text(first)
    assert dcgm.looks_like_prometheus_text([text for _, text in lines("scrapes-timestamped.prom")])
    assert not dcgm.looks_like_prometheus_text(["# HELP go_goroutines x", "go_goroutines 1"])
    assert not dcgm.looks_like_prometheus_text(["Nov 22 15:03:43 node kernel: hello"])
    for name in ("api-vector.json", "api-matrix.json", "api-error.json"):
        assert dcgm.looks_like_prometheus_api(orjson.loads((FIXTURES / name).read_bytes()))
    assert not dcgm.looks_like_prometheus_api({"status": "success"})


def test_one_status_per_gpu() -> None:
    items, ctx = scrape("scrape.prom")
    statuses = of_kind(items, "gpu.status")
    assert [s.gpu_uuid for s in statuses] == [GPU0, GPU1]
    busy, idle = statuses
    assert busy.ts == MTIME and busy.attrs["ts_source"] == "mtime"
    assert busy.node == "gpu-node-7"
    assert (busy.namespace, busy.pod, busy.container) == (
        "ml-team",
        "llm-pretrain-worker-3",
        "pytorch",
    )
    assert idle.pod is None and idle.namespace is None
    assert busy.attrs["gpu"] == "0"
    assert busy.attrs["pci"] == "0000:10:1c.0"
    assert busy.attrs["model"] == "NVIDIA A100-SXM4-80GB"
    assert busy.attrs["driver"] == "535.104.05"
    metrics = busy.attrs["metrics"]
    assert metrics["DCGM_FI_DEV_SM_CLOCK"] == 1410
    assert metrics["DCGM_FI_DEV_POWER_USAGE"] == 87.312
    assert metrics['DCGM_EXP_XID_ERRORS_COUNT{xid="48"}'] == 2
    assert metrics["DCGM_EXP_GPU_HEALTH_STATUS"] == 20  # escaped label values parsed
    assert idle.attrs["metrics"]["DCGM_EXP_XID_ERRORS_COUNT"] == 0
    assert ctx.skipped == {"dcgm samples without a GPU UUID": 1}  # go_goroutines


def test_bindings() -> None:
    items, _ = scrape("scrape.prom")
    bindings = [i for i in items if isinstance(i, Binding)]
    assert (
        Binding(
            "gpu.node",
            GPU0,
            "gpu-node-7",
            MTIME,
            MTIME,
            {"pci": "0000:10:1c.0", "model": "NVIDIA A100-SXM4-80GB"},
        )
        in bindings
    )
    assert (
        Binding(
            "gpu.node",
            GPU1,
            "gpu-node-7",
            MTIME,
            MTIME,
            {"pci": "0000:2b:00.0", "model": "NVIDIA A100-SXM4-80GB"},
        )
        in bindings
    )
    pod = [b for b in bindings if b.kind == "pod.gpu"]
    assert pod == [
        Binding(
            "pod.gpu", "ml-team/llm-pretrain-worker-3", GPU0, MTIME, MTIME, {"container": "pytorch"}
        )
    ]


def test_problem_records() -> None:
    items, _ = scrape("scrape.prom")
    xids = of_kind(items, "gpu.xid")
    assert [(x.attrs["metric"], x.attrs["xid"]) for x in xids] == [
        ("DCGM_FI_DEV_XID_ERRORS", 79),
        ("DCGM_EXP_XID_ERRORS_COUNT", 79),
        ("DCGM_EXP_XID_ERRORS_COUNT", 48),
    ]
    last = xids[0]
    assert last.gpu_uuid == GPU0 and last.node == "gpu-node-7"
    assert last.pod == "llm-pretrain-worker-3"
    assert last.attrs["latched"] is True
    assert last.attrs["fatal"] is True
    assert last.attrs["pci"] == "0000:10:1c.0"
    assert last.severity == Severity.CRITICAL
    assert xids[2].attrs["count"] == 2
    assert [(e.attrs["metric"], e.attrs["value"]) for e in of_kind(items, "gpu.ecc")] == [
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2)
    ]
    remaps = of_kind(items, "gpu.row_remap")
    assert [r.attrs["metric"] for r in remaps] == [
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ]
    assert remaps[1].severity == Severity.CRITICAL
    [nvlink] = of_kind(items, "gpu.nvlink")
    assert (
        nvlink.gpu_uuid == GPU1 and nvlink.attrs["value"] == 12 and nvlink.attrs["previous"] is None
    )
    thermal = of_kind(items, "gpu.thermal")
    assert [(t.attrs["metric"], t.attrs["value"]) for t in thermal] == [
        ("DCGM_FI_DEV_GPU_TEMP", 91),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 64),
    ]
    assert thermal[1].attrs["reasons"] == ["hw_thermal"]
    assert all(t.gpu_uuid == GPU0 for t in thermal)  # GPU 1 is only idle (0x1), not hot


def test_bad_lines_are_rejected_and_the_rest_kept() -> None:
    items, _ = scrape("scrape.prom")
    bad = [i for i in items if isinstance(i, Rejected)]
    assert [b.line for b in bad] == [len(lines("scrape.prom")) - 1, len(lines("scrape.prom"))]
    assert "not a Prometheus sample line" in bad[0].reason
    assert "'fast' is not a number" in bad[1].reason
    assert len(of_kind(items, "gpu.status")) == 2


def test_sample_timestamps_and_change_only_problems() -> None:
    items, _ = scrape("scrapes-timestamped.prom", mtime=None)
    statuses = of_kind(items, "gpu.status")
    assert [s.ts for s in statuses] == [1773481200000, 1773481215000, 1773481230000]
    assert all("ts_source" not in s.attrs for s in statuses)
    assert statuses[1].attrs["metrics"] == {
        "DCGM_FI_DEV_XID_ERRORS": 79,
        "DCGM_FI_DEV_GPU_TEMP": 92,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 4,
    }
    # The latched Xid is written once, when it appears; the temperature once, when it crosses 90.
    [xid] = of_kind(items, "gpu.xid")
    assert xid.ts == 1773481215000 and xid.attrs["previous"] == 0
    [hot] = of_kind(items, "gpu.thermal")
    assert hot.ts == 1773481215000 and hot.attrs["value"] == 92
    # A counter is written when first seen non-zero and again when it grows.
    replays = of_kind(items, "gpu.nvlink")
    assert [(r.ts, r.attrs["value"], r.attrs["previous"]) for r in replays] == [
        (1773481200000, 4, None),
        (1773481230000, 9, 4),
    ]
    [binding] = [i for i in items if isinstance(i, Binding)]
    assert (binding.first_ts, binding.last_ts) == (1773481200000, 1773481230000)


def test_at_beats_mtime() -> None:
    at = parse_ts("2026-03-14T09:58:30Z")
    items, _ = scrape("scrape.prom", at=at)
    status = of_kind(items, "gpu.status")[0]
    assert status.ts == at and status.attrs["ts_source"] == "at"


def test_no_clock_at_all() -> None:
    items, _ = scrape("scrape.prom", mtime=None)
    assert items == [Rejected(None, "dcgm scrape without timestamps: pass --at TIME")]


def test_missing_hostname_needs_node() -> None:
    items, _ = scrape("scrape-no-hostname.prom")
    assert items == [Rejected(None, "dcgm metrics without a Hostname label: pass --node NODE")]
    items, _ = scrape("scrape-no-hostname.prom", node="gpu-node-9")
    [status] = of_kind(items, "gpu.status")
    assert status.node == "gpu-node-9"


def test_ids_are_stable() -> None:
    once = [i.id for i in scrape("scrape.prom")[0] if isinstance(i, Evidence)]
    again = [i.id for i in scrape("scrape.prom")[0] if isinstance(i, Evidence)]
    assert once == again and len(set(once)) == len(once)


def test_api_vector() -> None:
    items = api("api-vector.json")
    statuses = of_kind(items, "gpu.status")
    assert len(statuses) == 2
    assert statuses[0].ts == 1773481215123
    assert statuses[0].node == "gke-train-a3-gpu-pool-9f8e7d6c-x2k4"
    assert statuses[0].attrs["pci"] == "0000:9a:00.0"
    [xid] = of_kind(items, "gpu.xid")
    assert xid.attrs["xid"] == 48 and xid.severity == Severity.CRITICAL
    assert (xid.namespace, xid.pod) == ("research", "vit-huge-run7-worker-1")
    assert (
        Binding(
            "pod.gpu",
            "research/vit-huge-run7-worker-1",
            xid.gpu_uuid or "",
            1773481215123,
            1773481215123,
            {"container": "trainer"},
        )
        in items
    )


def test_api_matrix_with_query() -> None:
    query = 'max_over_time(DCGM_EXP_XID_ERRORS_COUNT{Hostname="gke-train-a3-gpu-pool-9f8e7d6c-x2k4"}[5m])'
    items = api("api-matrix.json", query=query)
    statuses = of_kind(items, "gpu.status")
    assert [s.ts for s in statuses] == [1773481140000, 1773481200000, 1773481260000, 1773481320000]
    assert statuses[-1].attrs["metrics"] == {
        'DCGM_EXP_XID_ERRORS_COUNT{xid="48"}': 2,
        'DCGM_EXP_XID_ERRORS_COUNT{xid="79"}': 1,
    }
    assert statuses[0].attrs["query"] == query
    xids = of_kind(items, "gpu.xid")
    assert [(x.ts, x.attrs["xid"], x.attrs["count"]) for x in xids] == [
        (1773481200000, 48, 1),
        (1773481320000, 48, 2),
        (1773481320000, 79, 1),
    ]
    [bad] = [i for i in items if isinstance(i, Rejected)]
    assert "not-a-number" in bad.reason


def test_api_matrix_without_a_name() -> None:
    items = api("api-matrix.json")
    assert not of_kind(items, "gpu.status")
    bad = [i for i in items if isinstance(i, Rejected)]
    assert len(bad) == 2 and all("__name__" in b.reason for b in bad)


def test_api_error() -> None:
    [bad] = api("api-error.json")
    assert isinstance(bad, Rejected) and "parse error" in bad.reason
