"""Kernel logs: every export form, every classification, clocks, hosts and id dedup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from whyjob.collector.ingest import kernel
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.ingest.jsondocs import Doc, iter_json_docs
from whyjob.core.entities import Binding
from whyjob.core.evidence import Evidence, Severity
from whyjob.core.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures" / "kernel"
MTIME = parse_ts("2026-11-23T08:00:00Z")
NODE = "gpu-node-7"
GPU0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
GPU1 = "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"
POD = "7c1d9e2a-3b4f-4a5c-9d6e-8f7a6b5c4d3e"
XID79 = (
    "NVRM: Xid (PCI:0000:10:1c): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def lines(name: str) -> list[tuple[int, str]]:
    return list(enumerate((FIXTURES / name).read_text().splitlines(), start=1))


def parse(name: str, mtime: int | None = MTIME, **options: Any) -> list[Item]:
    ctx = Context(f"fixtures/{name}", IngestOptions(**options), mtime)
    return list(kernel.parse_kernel_text(ctx, lines(name)))


def journal(name: str = "journal.json", **options: Any) -> list[Item]:
    ctx = Context(f"fixtures/{name}", IngestOptions(**options), MTIME)
    items: list[Item] = []
    for doc in iter_json_docs((FIXTURES / name).read_bytes()):
        assert isinstance(doc, Doc)
        assert kernel.looks_like_journal_json(doc.value)
        items.extend(kernel.parse_journal_json(ctx, doc.value, doc.line))
    return items


def records(items: list[Item]) -> list[Evidence]:
    return [i for i in items if isinstance(i, Evidence)]


def by_message(items: list[Item]) -> dict[str, Evidence]:
    return {e.message: e for e in records(items)}


def kinds(items: list[Item]) -> dict[str, str]:
    return {e.message: e.kind for e in records(items)}


# --- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "journal-short.log",
        "journal-short-precise.log",
        "journal-short-iso.log",
        "journal-short-iso-precise.log",
        "journal-short-unix.log",
        "kern.log",
        "kern-rfc3339.log",
        "dmesg-T.log",
        "dmesg-iso.log",
        "dmesg-raw.log",
        "talosctl-dmesg.log",
    ],
)
def test_detected(name: str) -> None:
    assert kernel.looks_like_kernel_text([text for _, text in lines(name)][:20])


@pytest.mark.parametrize(
    "first_lines",
    [
        ["2026-11-22T15:03:43.123456789Z stdout F step 100 loss 2.31"],  # CRI log
        ["2026-11-22T15:03:43Z rank0 INFO: step 100"],  # a job log with syslog-like stamps
        ['DCGM_FI_DEV_GPU_TEMP{gpu="0"} 55'],
        ["Traceback (most recent call last):", '  File "train.py", line 1'],
        [],
    ],
)
def test_not_detected(first_lines: list[str]) -> None:
    assert not kernel.looks_like_kernel_text(first_lines)


# --- classification -----------------------------------------------------------------------


def test_every_classification() -> None:
    got = kinds(parse("journal-short.log"))
    expected = {
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023": "kernel.line",
        "NVRM: GPU at PCI:0000:10:1c: GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52": "gpu.identity",
        XID79: "gpu.xid",
        "NVRM: GPU 0000:10:1c.0: GPU has fallen off the bus.": "kernel.hw",
        "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)": "kernel.hw",
        "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999": "kernel.line",
        "oom_reaper: reaped process 51000 (pt_data_worker), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB": "kernel.line",
        "blk_update_request: I/O error, dev nvme1n1, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 0": "kernel.io",
        "Buffer I/O error on dev nvme1n1p1, logical block 15432, async page read": "kernel.io",
        "XFS (md0): log I/O error -5": "kernel.line",
        "XFS (md0): Log I/O Error Detected. Shutting down filesystem": "kernel.io",
        "nfs: server 10.0.8.12 not responding, still trying": "kernel.io",
        "nfs: server 10.0.8.12 OK": "kernel.io",
        "mlx5_core 0000:0c:00.0 ib0: Link down": "kernel.net",
        "ena 0000:00:06.0 eth1: Link is Down": "kernel.net",
        "NETDEV WATCHDOG: eth1 (ena): transmit queue 3 timed out": "kernel.net",
        "INFO: task python:48213 blocked for more than 120 seconds.": "kernel.hung_task",
        "mce: [Hardware Error]: Machine check events logged": "kernel.hw",
        "pcieport 0000:00:01.0: AER: enabled with IRQ 27": "kernel.line",
        "watchdog: BUG: soft lockup - CPU#17 stuck for 23s! [python:48213]": "kernel.hw",
        "Oops: 0000 [#1] SMP NOPTI": "kernel.hw",
        "Kernel panic - not syncing: Fatal exception": "kernel.hw",
        "pcieport 0000:0f:00.0: pciehp: Slot(3): Link Down": "kernel.hw",
        "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready": "kernel.line",
    }
    for message, kind in expected.items():
        assert got[message] == kind, message
    assert set(got.values()) == {
        "gpu.identity", "gpu.xid", "kernel.oom", "kernel.segfault", "kernel.io", "kernel.net",
        "kernel.hung_task", "kernel.hw", "kernel.line",
    }  # fmt: skip


def test_xid_records() -> None:
    items = parse("journal-short.log")
    xids = [e for e in records(items) if e.kind == "gpu.xid"]
    assert [(x.attrs["xid"], x.gpu_uuid, x.severity) for x in xids] == [
        (13, GPU1, Severity.WARNING),  # application fault
        (63, GPU0, Severity.NOTICE),  # row remap recorded
        (79, GPU0, Severity.CRITICAL),  # fell off the bus
        (154, GPU0, Severity.CRITICAL),  # node reboot required
        (14, None, Severity.WARNING),  # old driver spelling, GPU not in the file
    ]
    app, remap, lost, recovery, old = xids
    assert app.attrs == {
        "xid": 13,
        "pci": "0000:2b:00.0",
        "pid": 48213,
        "process": "python",
        "text": "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
        "name": "ROBUST_CHANNEL_GR_EXCEPTION",
        "meaning": "graphics engine exception",
        "fatal": False,
    }
    assert remap.attrs["pid"] == 1896 and remap.attrs["process"] is None
    assert lost.attrs["pid"] is None and lost.attrs["process"] is None
    assert lost.attrs["text"] == "GPU has fallen off the bus."
    assert lost.attrs["fatal"] is True
    assert lost.node == NODE and lost.source == "kernel"
    assert lost.ts == parse_ts("2026-11-22T15:03:43Z")
    assert recovery.attrs["recovery_action"] == 2
    assert old.attrs["pci"] == "0000:3b:00.0" and old.attrs["text"] == "Channel 00000001"


def test_identity_lines_bind_gpus_to_the_node() -> None:
    items = parse("journal-short.log")
    bindings = [i for i in items if isinstance(i, Binding)]
    at = parse_ts("2026-11-22T15:00:02Z")
    assert bindings == [
        Binding("gpu.node", GPU0, NODE, at, at, {"pci": "0000:10:1c.0"}),
        Binding("gpu.node", GPU1, NODE, at, at, {"pci": "0000:2b:00.0"}),
    ]
    identity = by_message(items)[f"NVRM: GPU at PCI:0000:10:1c: {GPU0}"]
    assert identity.gpu_uuid == GPU0 and identity.attrs == {"pci": "0000:10:1c.0"}


def test_oom_records() -> None:
    items = parse("journal-short.log")
    ooms = [e for e in records(items) if e.kind == "kernel.oom"]
    assert len(ooms) == 3
    summary, memcg, node_oom = ooms
    assert summary.pod_uid == POD
    assert summary.attrs["constraint"] == "memcg"
    assert summary.attrs["process"] == "python" and summary.attrs["pid"] == 48213
    assert summary.attrs["memcg"].startswith(f"/kubepods/burstable/pod{POD}/")
    assert (
        summary.attrs["container_id"]
        == "4f1e0c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
    )
    # The "Killed process" line of the same kill carries what the summary said.
    assert memcg.pod_uid == POD
    assert memcg.attrs["pid"] == 48213 and memcg.attrs["anon_rss_kb"] == 98765432
    assert memcg.attrs["container_id"] == summary.attrs["container_id"]
    assert memcg.severity == Severity.ERROR
    assert node_oom.attrs["constraint"] == "global"
    assert node_oom.attrs["process"] == "pt_data_worker"
    assert node_oom.pod_uid is None


@pytest.mark.parametrize(
    ("path", "uid"),
    [
        (f"/kubepods/burstable/pod{POD}/4f1e0c2b", POD),
        (f"/kubepods/besteffort/pod{POD}", POD),
        (f"/kubepods/pod{POD}/abc", POD),  # Guaranteed QoS has no class folder
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{POD.replace('-', '_')}.slice/cri-containerd-4f1e.scope",
            POD,
        ),
        (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice", POD),
        ("/system.slice/containerd.service", None),
        ("/user.slice/user-1000.slice", None),
    ],
)
def test_pod_uid_from_cgroup(path: str, uid: str | None) -> None:
    assert kernel.pod_uid_from_cgroup(path) == uid


def test_systemd_cgroup_oom() -> None:
    line = (
        "Nov 22 15:04:00 gpu-node-7 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
        "cpuset=cri-containerd-aa.scope,mems_allowed=0,oom_memcg=/kubepods.slice/"
        "kubepods-burstable.slice/kubepods-burstable-pod7c1d9e2a_3b4f_4a5c_9d6e_8f7a6b5c4d3e.slice,"
        "task_memcg=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1d9e2a_3b4f_"
        "4a5c_9d6e_8f7a6b5c4d3e.slice/cri-containerd-4f1e0c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c"
        "0d9e8f7a6b5c4d3e2f.scope,task=python,pid=4242,uid=0"
    )
    ctx = Context("x", IngestOptions(year=2026))
    [oom] = records(list(kernel.parse_kernel_text(ctx, [(1, line)])))
    assert oom.kind == "kernel.oom" and oom.pod_uid == POD
    assert oom.attrs["container_id"].startswith("4f1e0c2b")


def test_other_classifications() -> None:
    items = by_message(parse("journal-short.log"))
    segv = next(e for m, e in items.items() if "segfault at" in m)
    assert segv.kind == "kernel.segfault"
    assert (segv.attrs["process"], segv.attrs["pid"], segv.attrs["library"]) == (
        "python",
        48300,
        "libtorch_cuda.so",
    )
    gpf = next(e for m, e in items.items() if "general protection fault" in m)
    assert gpf.kind == "kernel.segfault" and gpf.attrs["trap"] == "general protection fault"
    io = [e for e in items.values() if e.kind == "kernel.io"]
    assert [(e.attrs["device"], e.attrs["detail"]) for e in io] == [
        ("nvme1n1", "I/O error"),
        ("nvme1n1p1", "buffer I/O error"),
        ("nvme1n1p1", "ext4 error"),
        ("md0", "xfs shutdown"),
        ("10.0.8.12", "nfs not responding"),
        ("10.0.8.12", "nfs ok"),
    ]
    assert io[-1].severity == Severity.INFO
    net = [e for e in items.values() if e.kind == "kernel.net"]
    assert [(e.attrs["device"], e.attrs["detail"]) for e in net] == [
        ("ib0", "link down"),
        ("eth1", "link down"),
        ("eth1", "tx timeout"),
        ("0000:0c:00.0", "health compromised"),
        ("ib0", "link up"),
    ]
    hung = [e for e in items.values() if e.kind == "kernel.hung_task"]
    assert [(e.attrs["process"], e.attrs["pid"], e.attrs["seconds"]) for e in hung] == [
        ("python", 48213, 120),
        ("kworker/u257:3", 911, 122),
    ]
    hw = {
        e.message: (e.attrs["event"], e.severity) for e in items.values() if e.kind == "kernel.hw"
    }
    assert list(hw.values()) == [
        ("gpu", Severity.CRITICAL),
        ("sxid", Severity.NOTICE),
        ("mce", Severity.WARNING),
        ("mce", Severity.CRITICAL),
        ("aer", Severity.NOTICE),
        ("aer", Severity.ERROR),
        ("edac", Severity.WARNING),
        ("lockup", Severity.ERROR),
        ("bug", Severity.ERROR),
        ("oops", Severity.ERROR),
        ("panic", Severity.CRITICAL),
        ("pcie_link", Severity.ERROR),
    ]
    aer = items["nvidia 0000:10:1c.0: AER: Uncorrected (Non-Fatal) error received: 0000:10:1c.0"]
    assert aer.attrs["pci"] == "0000:10:1c.0" and aer.gpu_uuid == GPU0
    plain = items[
        "Linux version 5.15.0-1053-aws (buildd@lcy02-amd64-001) (gcc (Ubuntu 9.4.0-1ubuntu1~20.04.2) 9.4.0, GNU ld (GNU Binutils for Ubuntu) 2.34) #58~20.04.1-Ubuntu SMP Mon Jan 22 17:15:57 UTC 2024"
    ]
    assert plain.kind == "kernel.line" and plain.severity == Severity.INFO and plain.attrs == {}


def test_bad_lines_are_rejected_and_parsing_goes_on() -> None:
    items = parse("journal-short.log")
    bad = [i for i in items if isinstance(i, Rejected)]
    assert [(b.line, b.reason) for b in bad] == [
        (47, "bad timestamp in a short line"),
        (48, "not a kernel log line in any known format"),
    ]
    assert bad[1].body == b"this line is not a kernel log line"
    assert records(items)[-1].message.startswith("Linux version")  # the line after them


# --- clocks -------------------------------------------------------------------------------


def test_year_from_option_and_from_mtime() -> None:
    with_year = records(parse("journal-short-precise.log", year=2025, mtime=None))
    assert with_year[0].ts == parse_ts("2025-11-22T15:03:43.481Z")
    from_mtime = records(parse("journal-short-precise.log"))
    assert from_mtime[0].ts == parse_ts("2026-11-22T15:03:43.481Z")
    # A file last written in January whose first line is in November started the year before.
    january = records(parse("journal-short-precise.log", mtime=parse_ts("2027-01-05T00:00:00Z")))
    assert january[0].ts == parse_ts("2026-11-22T15:03:43.481Z")


def test_no_year_at_all() -> None:
    items = parse("journal-short-precise.log", mtime=None)
    assert items == [
        Rejected(None, "syslog timestamps have no year and the file has no date: pass --year YEAR")
    ]


def test_december_to_january_rollover() -> None:
    from_year = records(parse("kern-rollover.log", year=2026, mtime=None))
    assert [e.ts for e in from_year] == [
        parse_ts("2026-12-31T23:59:58Z"),
        parse_ts("2027-01-01T00:00:03Z"),
        parse_ts("2027-01-01T00:00:04Z"),
    ]
    from_mtime = records(parse("kern-rollover.log", mtime=parse_ts("2027-01-01T00:05:00Z")))
    assert [e.ts for e in from_mtime] == [e.ts for e in from_year]
    assert from_year[0].attrs["xid"] == 48 and from_year[0].severity == Severity.CRITICAL
    assert from_year[1].attrs["event"] == "aer" and from_year[1].severity == Severity.CRITICAL


@pytest.mark.parametrize(
    "name",
    [
        "journal-short-iso.log",
        "journal-short-iso-precise.log",
        "journal-short-unix.log",
        "kern-rfc3339.log",
        "dmesg-iso.log",
        "talosctl-dmesg.log",
    ],
)
def test_zoned_formats(name: str) -> None:
    first = records(parse(name, node=NODE, mtime=None))[0]
    assert first.ts // 1000 == parse_ts("2026-11-22T15:03:43Z") // 1000
    assert first.kind == "gpu.xid"


def test_talos_names_its_node_and_keeps_userspace_apart() -> None:
    found = records(parse("talosctl-dmesg.log", mtime=None))
    assert [(e.node, e.kind) for e in found[:2]] == [
        ("172.20.0.5", "gpu.xid"),
        ("172.20.0.5", "gpu.identity"),
    ]
    assert found[2].attrs.get("ident") == "user"


def test_zone_offset_is_applied() -> None:
    link = records(parse("journal-short-iso.log"))[1]
    assert link.ts == parse_ts("2026-11-22T15:08:00Z")  # written as 16:08:00+0100


def test_inner_monotonic_stamp_is_stripped() -> None:
    first = records(parse("kern.log"))[0]
    assert first.message == XID79
    assert first.kind == "gpu.xid"


def test_raw_dmesg_needs_boot_time() -> None:
    items = parse("dmesg-raw.log", node=NODE)
    assert len(items) == 1
    [bad] = items
    assert isinstance(bad, Rejected) and bad.line is None
    assert "--boot-time" in bad.reason and "dmesg -T" in bad.reason
    boot = parse_ts("2026-11-22T13:03:31.600Z")
    ok = parse("dmesg-raw.log", node=NODE, boot_time=boot)
    xid = next(e for e in records(ok) if e.kind == "gpu.xid")
    assert xid.ts == boot + 7211402
    assert xid.gpu_uuid == GPU0  # the identity line at 12 s after boot


@pytest.mark.parametrize("name", ["dmesg-T.log", "dmesg-iso.log", "dmesg-raw.log"])
def test_dmesg_needs_node(name: str) -> None:
    items = parse(name, boot_time=0)
    assert items == [Rejected(None, "dmesg output does not name its host: pass --node NODE")]


def test_dmesg_t() -> None:
    items = parse("dmesg-T.log", node=NODE)
    got = records(items)
    assert got[0].ts == parse_ts("2026-11-22T15:03:43Z") and got[0].node == NODE
    assert got[3].kind == "kernel.hung_task"
    [bad] = [i for i in items if isinstance(i, Rejected)]
    assert bad.line == 5 and "bad timestamp" in bad.reason


# --- hosts --------------------------------------------------------------------------------


def test_node_flag_wins_over_the_hostname() -> None:
    items = records(parse("kern-rfc3339.log", node="ip-10-0-1-23.ec2.internal"))
    assert all(e.node == "ip-10-0-1-23.ec2.internal" for e in items)
    assert items[0].attrs["host"] == "ip-10-0-1-23"
    own = records(parse("kern-rfc3339.log"))
    assert own[0].node == "ip-10-0-1-23" and "host" not in own[0].attrs


def test_other_idents_are_kept_and_marked() -> None:
    kubelet = records(parse("kern.log"))[-1]
    assert kubelet.kind == "kernel.line" and kubelet.attrs["ident"] == "kubelet"


# --- ids ----------------------------------------------------------------------------------


def test_ids_are_stable() -> None:
    once = [e.id for e in records(parse("journal-short.log"))]
    again = [e.id for e in records(parse("journal-short.log"))]
    assert once == again
    assert len(set(once)) == len(once)  # the repeated link-down line is kept twice


def test_the_same_line_from_every_export_has_one_id() -> None:
    exports = {
        "journal-short.log": parse("journal-short.log"),
        "journal-short-precise.log": parse("journal-short-precise.log"),
        "journal-short-iso.log": parse("journal-short-iso.log"),
        "journal-short-iso-precise.log": parse("journal-short-iso-precise.log"),
        "journal-short-unix.log": parse("journal-short-unix.log"),
        "kern.log": parse("kern.log"),
        "dmesg-T.log": parse("dmesg-T.log", node=NODE),
        "dmesg-iso.log": parse("dmesg-iso.log", node=NODE),
        "dmesg-raw.log": parse(
            "dmesg-raw.log", node=NODE, boot_time=parse_ts("2026-11-22T13:03:31.600Z")
        ),
        "journal.json": journal(),
    }
    ids = {name: by_message(items)[XID79].id for name, items in exports.items()}
    assert len(set(ids.values())) == 1, ids
    # A line printed twice in one second is two records, in every export.
    twice = "mlx5_core 0000:0c:00.0 ib0: Link down"
    for name in ("journal-short.log", "journal-short-precise.log", "dmesg-T.log"):
        links = [e.id for e in records(exports[name]) if e.message == twice]
        assert len(links) == 2 and len(set(links)) == 2
        assert set(links) == {e.id for e in records(exports["dmesg-T.log"]) if e.message == twice}


# --- journalctl -o json -------------------------------------------------------------------


def test_journal_json() -> None:
    items = journal()
    got = records(items)
    assert [e.kind for e in got] == ["gpu.identity", "gpu.xid", "kernel.net"]
    identity, xid, link = got
    assert xid.gpu_uuid == GPU0  # the identity entry, a document earlier
    assert xid.ts == 1795359823481
    assert xid.raw is not None and b"__CURSOR" in xid.raw
    assert link.message == "mlx5_core 0000:0c:00.0 ib0: Link down \ufffd"  # MESSAGE as bytes
    assert [i for i in items if isinstance(i, Binding)] == [
        Binding("gpu.node", GPU0, NODE, identity.ts, identity.ts, {"pci": "0000:10:1c.0"})
    ]
    [bad] = [i for i in items if isinstance(i, Rejected)]
    assert bad.line == 4 and "__REALTIME_TIMESTAMP" in bad.reason


def test_journal_json_ids_are_stable() -> None:
    assert [e.id for e in records(journal())] == [e.id for e in records(journal())]
    # The same Context reading the file again restarts its per-file state.
    ctx = Context("j", IngestOptions(), MTIME)
    docs = [
        d for d in iter_json_docs((FIXTURES / "journal.json").read_bytes()) if isinstance(d, Doc)
    ]
    first = [
        i.id
        for d in docs
        for i in kernel.parse_journal_json(ctx, d.value, d.line)
        if isinstance(i, Evidence)
    ]
    second = [
        i.id
        for d in docs
        for i in kernel.parse_journal_json(ctx, d.value, d.line)
        if isinstance(i, Evidence)
    ]
    assert first == second


def test_journal_json_list_and_missing_host() -> None:
    entry = {"__REALTIME_TIMESTAMP": "1795359823481236", "MESSAGE": XID79, "_TRANSPORT": "kernel"}
    assert kernel.looks_like_journal_json([entry])
    assert not kernel.looks_like_journal_json({"MESSAGE": "x"})
    ctx = Context("j", IngestOptions(), MTIME)
    assert list(kernel.parse_journal_json(ctx, [entry, entry], 1)) == [
        Rejected(None, "journal entries without _HOSTNAME: pass --node NODE")
    ]
    ctx = Context("j2", IngestOptions(node=NODE), MTIME)
    two = records(list(kernel.parse_journal_json(ctx, [entry, entry], 1)))
    assert [e.node for e in two] == [NODE, NODE] and two[0].id != two[1].id


# --- helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pci"),
    [
        ("PCI:0000:10:1c", "0000:10:1c.0"),
        ("00000000:2B:00.0", "0000:2b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
    ],
)
def test_normalize_pci(text: str, pci: str) -> None:
    assert kernel.normalize_pci(text) == pci


def test_xid_severity() -> None:
    assert kernel.xid_severity(13) == Severity.WARNING
    assert kernel.xid_severity(31) == Severity.WARNING
    assert kernel.xid_severity(43) == Severity.WARNING
    assert kernel.xid_severity(45) == Severity.WARNING
    assert kernel.xid_severity(48) == Severity.CRITICAL
    assert kernel.xid_severity(79) == Severity.CRITICAL
    assert kernel.xid_severity(74) == Severity.ERROR
    assert kernel.xid_severity(119) == Severity.ERROR
    assert kernel.xid_severity(94) == Severity.ERROR
    assert kernel.xid_severity(154, 0) == Severity.INFO
    assert kernel.xid_severity(154, 1) == Severity.ERROR
    assert kernel.xid_severity(999) == Severity.WARNING


def _stack_records(text: str) -> list[Evidence]:
    ctx = Context("dump.log", IngestOptions(year=2026), MTIME)
    rows = list(enumerate(text.splitlines(), start=1))
    return [
        e
        for e in records(list(kernel.parse_kernel_text(ctx, rows)))
        if e.kind == "kernel.blocked_stack"
    ]


BLOCKED = """\
Nov 19 01:03:24 gpu-node-7 kernel: INFO: task python:4242 blocked for more than 122 seconds.
Nov 19 01:03:24 gpu-node-7 kernel:       Not tainted 6.8.0-48-generic #48-Ubuntu
Nov 19 01:03:24 gpu-node-7 kernel: "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
Nov 19 01:03:24 gpu-node-7 kernel: task:python          state:D stack:0     pid:4242  tgid:4242  ppid:1      flags:0x00004002
Nov 19 01:03:24 gpu-node-7 kernel: Call Trace:
Nov 19 01:03:24 gpu-node-7 kernel:  <TASK>
Nov 19 01:03:24 gpu-node-7 kernel:  __schedule+0x27c/0x6b0
Nov 19 01:03:24 gpu-node-7 kernel:  rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]
Nov 19 01:03:24 gpu-node-7 kernel:  ? nfs_wait_on_request.isra.0.constprop.0+0x24/0x90 [nfs]
Nov 19 01:03:24 gpu-node-7 kernel:  </TASK>
Nov 19 01:03:25 gpu-node-7 kernel: task:nfsd            state:S stack:0     pid:911   tgid:911   ppid:2      flags:0x00004000
Nov 19 01:03:25 gpu-node-7 kernel:  svc_recv+0x7d/0x1b0 [sunrpc]
Nov 19 01:03:26 gpu-node-7 kernel: python          D ffff8817d2c1e180     0 12345  12300 0x00000080
Nov 19 01:03:26 gpu-node-7 kernel:  [<ffffffffa06cd2e4>] os_acquire_rwlock_write+0x3c/0x70 [nvidia]
Nov 19 01:03:27 gpu-node-7 kernel: WARNING: CPU: 3 PID: 77 at fs/nfs/write.c:1234 nfs_commit_release+0x1f/0x40 [nfs]
Nov 19 01:03:27 gpu-node-7 kernel:  nfs_commit_release+0x1f/0x40 [nfs]
"""


def test_a_blocked_tasks_stack_names_the_modules_it_waits_in() -> None:
    found = _stack_records(BLOCKED)
    # The hung task's own stack (both its reports), the 3.x header's; not the sleeping nfsd's
    # frames nor the NFS warning's, which belong to no blocked task.
    assert [(e.attrs["modules"], e.origin) for e in found] == [
        ("sunrpc nfs", "dump.log:4"),
        ("nvidia", "dump.log:13"),
    ]
    assert found[0].message.endswith("(its stack in sunrpc, nfs)")
    assert found[0].node == "gpu-node-7"
