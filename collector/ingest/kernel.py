"""Kernel logs in every common export form, one evidence record per line.

Read as text: `journalctl -k` (`short`, `-o short-precise`, `-o short-iso`,
`-o short-iso-precise`, `-o short-unix`), `/var/log/kern.log` and `/var/log/syslog` (classic
`Nov 22 15:03:43 host kernel: msg` and RFC 3339 rsyslog stamps, an inner `[  123.456789]`
monotonic stamp stripped), `dmesg -T`, `dmesg --time-format iso` and raw `dmesg`. Read as JSON:
`journalctl -k -o json` entries (one per line, or a list of them).

Every line becomes a record; the line's text decides its kind: an NVIDIA Xid (`gpu.xid`, severity
from NVIDIA's catalog), the `NVRM: GPU at PCI:…: GPU-…` identity line (`gpu.identity` plus a
gpu.node binding, and the PCI → UUID map that gives later Xid lines in the same file their GPU),
the OOM killer (`kernel.oom`, with the pod uid taken from the cgroup path), segfaults, I/O and
filesystem errors, NIC and InfiniBand link loss, hung tasks, machine checks / AER / panics, and
`kernel.line` for everything else. A task dumped as stuck in uninterruptible sleep (the hung-task
detector's report, sysrq-w) gives one more record when its stack ends, `kernel.blocked_stack`,
with the modules its frames are in: what the task waits on (a filesystem's, the GPU driver's).

Clocks. Syslog stamps carry no year and no zone: the year is `--year` (the year of the file's
first line) or else the file's modification time (the year of its last line, so a file that
starts in a later month than it was last written started the year before); a month going
backwards by more than six (Dec → Jan) moves to the next year. Stamps without a zone (syslog,
`dmesg -T`) are taken as UTC, which is what Kubernetes nodes run in. Raw `dmesg` counts seconds
since boot and needs `--boot-time`; the dmesg forms name no host and need `--node`.

Hosts. A syslog or journal line names its host, but a host name is not always the node name
(on EKS the hostname is `ip-10-0-1-23` and the node `ip-10-0-1-23.ec2.internal`), so `--node`,
when given, wins and the line's own host is kept in attrs `host`.

Ids. The same kernel line is often exported twice (a `dmesg -T` taken on the node and a
`journalctl -k` pulled later), with different precision (seconds vs microseconds) and different
prefixes. So the id hashes (node, the second, the message text) and not the format or the file
line: the two exports of one line get one id and the second import stores nothing. The version
is the occurrence number of that (node, second, text) in the file, so a line that really
repeats within one second is kept as many times as it was printed, and re-importing a file
gives the same ids. Dedup across exports is best effort: `dmesg -T` derives wall time from the
boot time and can be off by a second (or more after a suspend), and journald stamps a kernel
line when it reads it, which lags during a boot flood.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.entities import Binding
from whyjob.core.evidence import Evidence, Severity

__all__ = [
    "XID_CATALOG",
    "XID_MEANING",
    "looks_like_journal_json",
    "looks_like_kernel_text",
    "normalize_pci",
    "parse_journal_json",
    "parse_kernel_text",
    "pod_uid_from_cgroup",
    "xid_info",
    "xid_severity",
]

SOURCE: Final = "kernel"

# --- NVIDIA Xid catalog (reference A7: mnemonic, NVSentinel's fatal flag) -------------------

XID_CATALOG: Final[dict[int, tuple[str, bool]]] = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", False),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", False),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", False),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", False),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", False),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", False),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", False),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", False),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", True),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", True),
    61: ("PMU_BREAKPOINT", True),
    62: ("PMU_HALT_ERROR", True),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", False),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", True),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", False),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", False),
    74: ("NVLINK_ERROR", True),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", True),
    92: ("EXCESSIVE_SBE_INTERRUPTS", False),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", False),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", True),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", True),
    119: ("GSP_RPC_TIMEOUT", True),
    120: ("GSP_ERROR", True),
    121: ("C2C_ERROR", False),
    136: ("ALI_TRAINING_FAIL", True),
    137: ("NVLINK_FLA_PRIV_ERR", False),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", True),
    143: ("GPU_INIT_ERROR", True),
    144: ("NVLINK_SAW_ERROR", True),
    145: ("NVLINK_RLW_ERROR", True),
    146: ("NVLINK_TLW_ERROR", True),
    147: ("NVLINK_TREX_ERROR", True),
    148: ("NVLINK_NVLPW_CTRL_ERROR", True),
    149: ("NVLINK_NETIR_ERROR", True),
    150: ("NVLINK_MSE_ERROR", True),
    154: ("GPU_RECOVERY_ACTION_CHANGED", False),
    155: ("NVLINK_SW_DEFINED_ERROR", True),
    156: ("RESOURCE_RETIREMENT_EVENT", True),
    158: ("GPU_FATAL_TIMEOUT", True),
}
# What each Xid means, in a few words a researcher can read (reference A7, NVIDIA's catalog).
XID_MEANING: Final[dict[int, str]] = {
    8: "GPU stopped processing",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "corrupted push buffer stream",
    38: "firmware watchdog timeout",
    43: "GPU stopped processing after an application fault",
    44: "graphics fault during context switch",
    45: "channels torn down after the process was killed",
    46: "GPU stopped processing (timeout)",
    48: "uncorrectable (double-bit) ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video decoder exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high rate of single-bit ECC errors",
    94: "contained uncorrectable ECC error",
    95: "uncontained uncorrectable ECC error",
    109: "context-switch timeout",
    119: "GSP firmware RPC timeout",
    120: "GSP firmware error",
    121: "chip-to-chip link error",
    122: "SPI flash read through the PMU failed (firmware storage)",
    123: "SPI flash write through the PMU failed (firmware storage)",
    124: "SPI flash erase through the PMU failed (firmware storage)",
    125: "InfoROM file-system failure",
    136: "NVLink link training failure",
    137: "NVLink privilege error",
    140: "uncorrectable ECC error escaped containment",
    143: "GPU initialization failure",
    154: "the driver changed the GPU's required recovery action",
    155: "NVLink software-defined error",
    156: "resource retirement event",
    158: "GPU fatal timeout",
    **dict.fromkeys(range(144, 151), "NVLink5 error"),
}
# Application-level Xids: the training code faulted, the GPU is fine (the usual alert exclusion).
_XID_APP: Final = frozenset({13, 31, 43, 45})
# The GPU or the whole node is gone or corrupted: DBE, fallen off the bus, uncontained ECC.
_XID_CRITICAL: Final = frozenset({46, 48, 79, 95, 140})
# NVIDIA's IGNORE bucket: informational on their own.
_XID_QUIET: Final = frozenset({38, 44, 63, 121, 137})


def xid_info(code: int) -> tuple[str | None, bool | None]:
    """The mnemonic and NVSentinel's fatal flag of an Xid, or (None, None) if not catalogued."""
    entry = XID_CATALOG.get(code)
    return (entry[0], entry[1]) if entry else (None, None)


def xid_severity(code: int, recovery_action: int | None = None) -> Severity:
    """How bad an Xid is on its own: app-level faults warn, fatal classes are errors or worse.

    Xid 154 states the recovery the driver needs, so its severity follows that action:
    none → info, GPU reset → error, node reboot or more → critical.
    """
    if code == 154 and recovery_action is not None:
        if recovery_action == 0:
            return Severity.INFO
        return Severity.ERROR if recovery_action == 1 else Severity.CRITICAL
    if code in _XID_APP:
        return Severity.WARNING
    if code in _XID_CRITICAL:
        return Severity.CRITICAL
    if code in _XID_QUIET:
        return Severity.NOTICE
    if code == 94:  # contained ECC: the GPU survives, the process using the memory is killed
        return Severity.ERROR
    entry = XID_CATALOG.get(code)
    return Severity.ERROR if entry and entry[1] else Severity.WARNING


@lru_cache(maxsize=1024)
def normalize_pci(text: str) -> str:
    """One spelling of a PCI address so kernel, DCGM and nvidia-smi join: `0000:2b:00.0`.

    The kernel prints `0000:2b:00` (no function), DCGM and nvidia-smi `00000000:2B:00.0`
    (8-digit domain, upper case). A GPU is always function 0.
    """
    value = text.strip().lower().removeprefix("pci:")
    parts = value.split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    if len(parts) != 3:
        return value
    domain, bus, device = parts
    if "." not in device:
        device += ".0"
    return f"{domain[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{device}"


_POD_CGROUP = re.compile(
    r"kubepods(?:[/-](?:burstable|besteffort|guaranteed))?[/-]pod"
    r"(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
_CONTAINER_CGROUP = re.compile(r"(?P<id>[0-9a-f]{64})(?:\.scope)?/?$")


def pod_uid_from_cgroup(path: str) -> str | None:
    """The pod uid named by a kubepods cgroup path, cgroupfs or systemd driver spelling.

    cgroupfs: `/kubepods/burstable/pod<uid>/<container>`; systemd:
    `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/…`.
    """
    match = _POD_CGROUP.search(path)
    return match.group("uid").replace("_", "-") if match else None


# --- line formats -------------------------------------------------------------------------

_IDENT = r" (?P<host>\S+) (?P<ident>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?: ?(?P<msg>.*)$"
# journalctl short / short-precise, classic syslog (kern.log).
_SHORT = re.compile(
    r"(?P<stamp>(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) "
    r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d))(?:\.(?P<frac>\d{1,9}))?" + _IDENT
)
# journalctl short-iso / short-iso-precise, rsyslog RFC 3339.
_ISO = re.compile(
    r"(?P<stamp>(?P<date>\d{4}-\d\d-\d\d)T(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d))"
    r"(?:\.(?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?" + _IDENT
)
# journalctl short-unix.
_UNIX = re.compile(r"(?P<stamp>\d{9,11})\.(?P<frac>\d{1,9})" + _IDENT)
# dmesg --time-format iso: a comma before the fraction, and no host.
_DMESG_ISO = re.compile(
    r"(?P<stamp>(?P<date>\d{4}-\d\d-\d\d)T(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d))"
    r",(?P<frac>\d{1,9})(?P<tz>Z|[+-]\d\d:?\d\d) (?P<msg>.*)$"
)
# dmesg -T.
_DMESG_T = re.compile(
    r"\[(?P<stamp>[A-Z][a-z]{2} (?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) "
    r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d) (?P<year>\d{4}))\](?P<frac>) ?(?P<msg>.*)$"
)
# raw dmesg: seconds since boot.
_DMESG_RAW = re.compile(r"\[\s*(?P<stamp>\d+)\.(?P<frac>\d{1,9})\] ?(?P<msg>.*)$")
# talosctl dmesg: "<node>: <facility>: <level>: [<RFC 3339 time>]: <message>", the level padded
# to a width ("172.20.0.2: kern:     err: [2026-04-22T21:25:20.466Z]: ...").
_TALOS = re.compile(
    r"(?P<host>[\w.:-]+?): (?P<ident>kern|user|daemon|auth|syslog):\s+\w+: "
    r"\[(?P<stamp>(?P<date>\d{4}-\d\d-\d\d)T(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d))"
    r"(?:\.(?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?\]: (?P<msg>.*)$"
)
# A kernel line with no time at all, as people cut it from dmesg or a bug report: recognised by
# the subsystems that write the lines whyjob reads (the NVIDIA driver, the OOM killer, storage,
# machine checks, panics), with or without a leading `kernel:`.
_BARE = re.compile(
    r"(?P<stamp>)(?P<frac>)(?:kernel: )?(?P<msg>(?:NVRM: |nvidia-nvswitch\d*: |NVRM:Xid"
    r"|Out of memory: |Memory cgroup out of memory|oom-kill:|oom_reaper: |\S+ invoked oom-killer"
    r"|EXT4-fs |XFS \(|nfs: server |Buffer I/O error|blk_update_request: |print_req_error: "
    r"|Kernel panic - |BUG: |watchdog: BUG: |INFO: task \S+ blocked |mce: |EDAC |pcieport "
    r"|mlx5_core |nvme nvme\d+: |block nvme\w+: |(?:sd|scsi) \d+:\d+:\d+:\d+: "
    r"| ?session\d+: session recovery | ?connection\d+:\d+: detected conn error).*)$"
)
# The monotonic stamp rsyslog and some journald setups keep inside the message.
_INNER_STAMP = re.compile(r"\[\s*\d+\.\d+\] ?")

_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_PATTERNS: Final = {
    "short": _SHORT,
    "iso": _ISO,
    "unix": _UNIX,
    "dmesg_iso": _DMESG_ISO,
    "dmesg_t": _DMESG_T,
    "dmesg_raw": _DMESG_RAW,
    "talos": _TALOS,
    "bare": _BARE,
}
# Candidate formats by a line's first character, most specific first.
_BRACKET_FORMATS: Final = ("dmesg_raw", "dmesg_t")
_DIGIT_FORMATS: Final = ("dmesg_iso", "iso", "unix", "talos")
_WORD_FORMATS: Final = ("short", "talos", "bare")
# What a host-naming format calls the kernel: syslog's ident, Talos' facility.
_KERNEL_IDENTS: Final = frozenset({"kernel", "kern"})
_NODELESS: Final = frozenset({"dmesg_iso", "dmesg_t", "dmesg_raw", "bare"})
_ZONED: Final = frozenset({"iso", "dmesg_iso", "talos"})
# Milliseconds per unit of a fraction's first 1, 2 or 3 digits.
_FRACTION_SCALE: Final = (0, 100, 10, 1)

# --- classification -----------------------------------------------------------------------

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?"
    r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-9a-fA-F])?)\):"
    r" (?P<xid>\d+),?\s*(?P<rest>.*)$"
)
_XID_PID = re.compile(r"pid=(?P<pid>'?<unknown>'?|\d+),\s*(?:name=(?P<name>[^,]*),\s*)?")
_XID_RECOVERY = re.compile(
    r"recovery action changed from \S+(?: \([^)]*\))? to (?P<code>0x[0-9a-fA-F]+)"
)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_SXID = re.compile(
    r"SXid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<sxid>\d+), (?P<level>Non-fatal|Fatal)?"
)
_OOM_KILLED = re.compile(
    r"(?:(?P<scope>Memory cgroup out of memory|Out of memory[^:]*): )?"
    r"Killed process (?P<pid>\d+) \((?P<proc>[^)]*)\)(?:.*?anon-rss:(?P<anon>\d+)kB)?"
)
_OOM_KILL = re.compile(r"oom-kill:(?P<fields>\S+)")
_OOM_CONSTRAINTS: Final = {
    "CONSTRAINT_NONE": "global",
    "CONSTRAINT_MEMCG": "memcg",
    "CONSTRAINT_CPUSET": "cpuset",
    "CONSTRAINT_MEMORY_POLICY": "mempolicy",
}
_SEGFAULT = re.compile(
    r"(?<!\S)(?P<proc>\S+)\[(?P<pid>\d+)\]: segfault at (?P<addr>[0-9a-fA-Fx]+)"
    r"(?:.*? in (?P<lib>[^\[\s]+)\[)?"
)
_TRAP = re.compile(
    r"traps: (?P<proc>\S+)\[(?P<pid>\d+)\] (?P<what>general protection fault|trap [a-z ]+?) ip"
)
_HUNG = re.compile(
    r"INFO: task (?P<proc>.+):(?P<pid>\d+) blocked for more than (?P<sec>\d+) seconds"
)
# sched_show_task's header for a dumped task, since 5.x ("task:dd state:D stack:0 pid:59750"),
# in 4.x ("dd  D  0 59750  51044 0x00004004") and 3.x ("python  D ffff8817d2c1e180  0 12345
# 12300 0x00000080"); the frames of its stack ("ceph_fsync+0x59/0x3b0 [ceph]", on 3.x after
# "[<ffffffffa06cd2e4>] "); and the lines a dump prints between them.
_TASK_HEADER = re.compile(
    r"\btask:(?P<name>\S+)\s+state:(?P<state>[A-Z])\b"
    r"|^\s*(?P<old>\S+)\s+(?P<old_state>[DRSTIZX])\s+(?:[0-9a-f]{8,16}\s+)?\d+\s+\d+\s+\d+"
    r"\s+0x[0-9a-f]{8}\s*$"
)
_FRAME = re.compile(
    r"^\s*(?:\[<[0-9a-f]+>\]\s*)?(?:\? )?[\w.]+\+0x[0-9a-f]+/0x[0-9a-f]+(?:\s+\[(?P<module>\w+)\])?"
)
_STACK_FURNITURE = re.compile(
    r"Call Trace:|</?(?:TASK|IRQ|NMI)>|^\s*(?:RIP|RSP|RAX|RBX|RCX|RDX|RSI|RDI|RBP|R\d\d?|Code):"
    r"|Not tainted|Tainted:|hung_task_timeout_secs"
)
_IO: Final = (
    (
        re.compile(r"Buffer I/O error on dev(?:ice)? (?P<dev>[\w.-]+)"),
        "buffer I/O error",
        Severity.ERROR,
    ),
    (re.compile(r"I/O error, dev (?P<dev>[\w.-]+)"), "I/O error", Severity.ERROR),
    (
        re.compile(
            r"critical (?:medium|target|space allocation|nexus) error, dev (?P<dev>[\w.-]+)"
        ),
        "critical medium error",
        Severity.ERROR,
    ),
    # The block layer's other statuses (blk_errors[]): the device went away, or timed out.
    (
        re.compile(r"(?:device offline|timeout) error, dev (?P<dev>[\w.-]+)"),
        "device offline or timed out",
        Severity.ERROR,
    ),
    (re.compile(r"EXT4-fs error \(device (?P<dev>[\w.-]+)\)"), "ext4 error", Severity.ERROR),
    (
        re.compile(r"XFS \((?P<dev>[\w.-]+)\):.*[Ss]hut(?:ting )?down"),
        "xfs shutdown",
        Severity.ERROR,
    ),
    # A soft mount giving up returns errors to the program; a hard one keeps trying.
    (
        re.compile(r"nfs: server (?P<dev>\S+) not responding, timed out"),
        "nfs timed out",
        Severity.ERROR,
    ),
    (
        re.compile(r"nfs: server (?P<dev>\S+) not responding"),
        "nfs not responding",
        Severity.WARNING,
    ),
    (re.compile(r"nfs: server (?P<dev>\S+) OK"), "nfs ok", Severity.INFO),
    # Block storage over the network losing its target: SCSI failing I/O to a device the
    # iSCSI session dropped (scsi_lib.c), the session given up (scsi_transport_iscsi.c), NVMe
    # multipath with no path left (nvme/host/multipath.c).
    (
        re.compile(r"(?:sd|scsi) (?P<dev>\d+(?::\d+)+): rejecting I/O to offline device"),
        "device offline",
        Severity.ERROR,
    ),
    (
        re.compile(r"(?P<dev>session\d+): session recovery timed out"),
        "iSCSI session lost",
        Severity.ERROR,
    ),
    (
        re.compile(r"(?:block )?(?P<dev>[\w.-]+): no (?:available )?path - failing I/O"),
        "no path left",
        Severity.ERROR,
    ),
)
_NETDEV_WATCHDOG = re.compile(r"NETDEV WATCHDOG: (?P<dev>\S+) \((?P<drv>[^)]*)\): transmit queue")
_LINK = re.compile(r"\blink (?:is |status (?:definitely )?)?(?P<state>down|up)\b", re.IGNORECASE)
_NIC_DRIVER = re.compile(
    r"(?P<drv>mlx5_core|mlx5_ib|mlx4_core|ena|efa|ixgbe|i40e|ice|bnxt_en|igb|e1000e|gve|"
    r"virtio_net|cxgb4)\b"
)
_NIC_TROUBLE = re.compile(r"reset|fatal|health compromised|timeout|timed out", re.IGNORECASE)
_NET_DEVICE = re.compile(
    r"(?:[\w-]+ (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
    r"(?: (?P<iface>[\w.@-]+))?|(?P<name>[\w.@-]+)):"
)
_PCI_PREFIX = re.compile(r"\S+ (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
_PCI_ANYWHERE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_EDAC = re.compile(r"EDAC \S+: \d+ (?P<kind>CE|UE) ")


@dataclass(slots=True)
class _Class:
    """What a message is: its kind, severity, attrs and the entity keys it names."""

    kind: str
    severity: int
    attrs: dict[str, Any]
    gpu_uuid: str | None = None
    pod_uid: str | None = None


@dataclass(slots=True)
class _Stack:
    """A blocked task's dump being read: its header's place and the modules of its frames."""

    node: str
    ts: int
    message: str
    line: int | None
    modules: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    """What one file teaches about later lines: PCI → GPU, pid → pod, clocks, repeats."""

    pci_to_gpu: dict[str, str] = field(default_factory=dict)
    oom_pods: dict[str, tuple[str | None, dict[str, Any]]] = field(default_factory=dict)
    second: int | None = None
    seen: dict[tuple[str, str], int] = field(default_factory=dict)
    year: int | None = None
    last_month: int = 0
    stopped: bool = False
    stack: _Stack | None = None

    def occurrence(self, node: str, ts: int, text: str) -> str:
        """'' for the first (node, second, text) in the file, then '2', '3', …"""
        second = ts // 1000
        if second != self.second:
            self.second = second
            self.seen.clear()
        key = (node, text)
        count = self.seen.get(key, 0) + 1
        self.seen[key] = count
        return "" if count == 1 else str(count)


def _classify(msg: str, state: _State, node: str) -> _Class:
    """The kind of one kernel message. Cheap substring tests gate every regex."""
    if "NVRM: " in msg:
        if match := _XID.search(msg):
            return _xid(match, state)
        if match := _GPU_AT.search(msg):
            pci = normalize_pci(match.group("pci"))
            uuid = match.group("uuid")
            state.pci_to_gpu[pci] = uuid
            return _Class("gpu.identity", Severity.DEBUG, {"pci": pci}, gpu_uuid=uuid)
        if "fallen off the bus" in msg or "RmInitAdapter failed" in msg:
            found = _PCI_ANYWHERE.search(msg)
            address = normalize_pci(found.group()) if found else None
            return _Class(
                "kernel.hw",
                Severity.CRITICAL if "fallen off" in msg else Severity.ERROR,
                {"event": "gpu", "pci": address},
                gpu_uuid=state.pci_to_gpu.get(address) if address else None,
            )
    if "Killed process" in msg and (match := _OOM_KILLED.search(msg)):
        return _oom_killed(match, state)
    if "oom-kill:" in msg and (match := _OOM_KILL.search(msg)):
        return _oom_kill(match, state)
    if "segfault at" in msg and (match := _SEGFAULT.search(msg)):
        attrs = {
            "process": match.group("proc"),
            "pid": int(match.group("pid")),
            "library": match.group("lib"),
            "address": match.group("addr"),
        }
        return _Class("kernel.segfault", Severity.WARNING, attrs)
    if "traps: " in msg and (match := _TRAP.search(msg)):
        attrs = {
            "process": match.group("proc"),
            "pid": int(match.group("pid")),
            "library": None,
            "trap": match.group("what"),
        }
        return _Class("kernel.segfault", Severity.WARNING, attrs)
    if "blocked for more than" in msg and (match := _HUNG.search(msg)):
        attrs = {
            "process": match.group("proc"),
            "pid": int(match.group("pid")),
            "seconds": int(match.group("sec")),
        }
        return _Class("kernel.hung_task", Severity.WARNING, attrs)
    if (hw := _hardware(msg, state)) is not None:
        return hw
    if (
        "I/O error" in msg
        or "EXT4-fs error" in msg
        or "XFS (" in msg
        or "nfs: server" in msg
        or ("error, dev" in msg)
        or "offline device" in msg
        or "session recovery timed out" in msg
        or "path - failing I/O" in msg
    ):
        for pattern, detail, level in _IO:
            if match := pattern.search(msg):
                return _Class("kernel.io", level, {"device": match.group("dev"), "detail": detail})
    if (net := _network(msg)) is not None:
        return net
    return _Class("kernel.line", Severity.INFO, {})


def _xid(match: re.Match[str], state: _State) -> _Class:
    code = int(match.group("xid"))
    pci = normalize_pci(match.group("pci"))
    rest = match.group("rest")
    pid: int | None = None
    process: str | None = None
    if found := _XID_PID.match(rest):
        pid_text = found.group("pid")
        pid = int(pid_text) if pid_text.isdigit() else None
        name = found.group("name")
        process = name if name and name != "<unknown>" else None
        rest = rest[found.end() :]
    recovery: int | None = None
    if code == 154 and (found := _XID_RECOVERY.search(rest)):
        recovery = int(found.group("code"), 16)
    mnemonic, fatal = xid_info(code)
    attrs: dict[str, Any] = {
        "xid": code,
        "pci": pci,
        "pid": pid,
        "process": process,
        "text": rest.strip(),
        "name": mnemonic,
        "meaning": XID_MEANING.get(code),
        "fatal": fatal,
    }
    if recovery is not None:
        attrs["recovery_action"] = recovery
    return _Class(
        "gpu.xid", xid_severity(code, recovery), attrs, gpu_uuid=state.pci_to_gpu.get(pci)
    )


def _oom_kill(match: re.Match[str], state: _State) -> _Class:
    """`oom-kill:constraint=…,oom_memcg=…,task_memcg=…,task=…,pid=…,uid=…` (kernels ≥ 4.19)."""
    fields: dict[str, str] = {}
    for part in match.group("fields").split(","):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = value
    memcg = fields.get("task_memcg") or fields.get("oom_memcg")
    constraint = fields.get("constraint")
    attrs: dict[str, Any] = {
        "pid": int(fields["pid"]) if fields.get("pid", "").isdigit() else None,
        "process": fields.get("task"),
        "constraint": _OOM_CONSTRAINTS.get(constraint or "", constraint),
        "memcg": memcg,
    }
    pod_uid = pod_uid_from_cgroup(memcg) if memcg else None
    if memcg and (container := _CONTAINER_CGROUP.search(memcg)):
        attrs["container_id"] = container.group("id")
    if attrs["pid"] is not None:
        extra: dict[str, Any] = {
            k: attrs[k] for k in ("constraint", "memcg", "container_id") if k in attrs
        }
        state.oom_pods[str(attrs["pid"])] = (pod_uid, extra)
    return _Class("kernel.oom", Severity.ERROR, attrs, pod_uid=pod_uid)


def _oom_killed(match: re.Match[str], state: _State) -> _Class:
    """`[Memory cgroup ]Out of memory: Killed process PID (comm) …`, enriched from the
    oom-kill summary the kernel printed just before it for the same pid."""
    scope = match.group("scope")
    pid = match.group("pid")
    pod_uid, extra = state.oom_pods.get(pid, (None, {}))
    attrs: dict[str, Any] = {
        "pid": int(pid),
        "process": match.group("proc"),
        "constraint": (
            "memcg" if scope and scope.startswith("Memory cgroup") else "global" if scope else None
        ),
        "memcg": None,
    }
    attrs.update(extra)
    if match.group("anon"):
        attrs["anon_rss_kb"] = int(match.group("anon"))
    return _Class("kernel.oom", Severity.ERROR, attrs, pod_uid=pod_uid)


def _hardware(msg: str, state: _State) -> _Class | None:
    if "[Hardware Error]" in msg:
        lowered = msg.lower()
        fatal = (
            "machine check exception" in lowered or "fatal" in lowered or "uncorrected" in lowered
        )
        return _Class(
            "kernel.hw", Severity.CRITICAL if fatal else Severity.WARNING, {"event": "mce"}
        )
    if "AER:" in msg and ("rror" in msg or "Uncorrect" in msg):
        if "(Fatal)" in msg:
            severity = Severity.CRITICAL
        elif "Uncorrected" in msg:
            severity = Severity.ERROR
        else:
            severity = Severity.NOTICE
        pci_match = _PCI_PREFIX.match(msg)
        pci = normalize_pci(pci_match.group("pci")) if pci_match else None
        return _Class(
            "kernel.hw",
            severity,
            {"event": "aer", "pci": pci},
            gpu_uuid=state.pci_to_gpu.get(pci) if pci else None,
        )
    if "Kernel panic" in msg:
        return _Class("kernel.hw", Severity.CRITICAL, {"event": "panic"})
    if "Oops: " in msg or "Oops#" in msg:
        return _Class("kernel.hw", Severity.ERROR, {"event": "oops"})
    if "soft lockup" in msg or "hard LOCKUP" in msg:
        return _Class("kernel.hw", Severity.ERROR, {"event": "lockup"})
    if "BUG: " in msg:
        return _Class("kernel.hw", Severity.ERROR, {"event": "bug"})
    if "EDAC" in msg and (match := _EDAC.search(msg)):
        severity = Severity.CRITICAL if match.group("kind") == "UE" else Severity.WARNING
        return _Class("kernel.hw", severity, {"event": "edac"})
    if "pciehp" in msg and ("Link Down" in msg or "Card not present" in msg):
        pci_match = _PCI_PREFIX.match(msg)
        pci = normalize_pci(pci_match.group("pci")) if pci_match else None
        return _Class("kernel.hw", Severity.ERROR, {"event": "pcie_link", "pci": pci})
    if "SXid" in msg and (match := _SXID.search(msg)):
        fatal = match.group("level") == "Fatal"
        attrs = {
            "event": "sxid",
            "sxid": int(match.group("sxid")),
            "pci": normalize_pci(match.group("pci")),
        }
        return _Class("kernel.hw", Severity.ERROR if fatal else Severity.NOTICE, attrs)
    return None


def _net_device(msg: str) -> str | None:
    match = _NET_DEVICE.match(msg)
    if not match:
        return None
    return match.group("iface") or match.group("pci") or match.group("name")


def _network(msg: str) -> _Class | None:
    if "NETDEV WATCHDOG" in msg and (match := _NETDEV_WATCHDOG.search(msg)):
        return _Class(
            "kernel.net", Severity.ERROR, {"device": match.group("dev"), "detail": "tx timeout"}
        )
    if ("ink" in msg or "LINK" in msg) and (match := _LINK.search(msg)):
        down = match.group("state").lower() == "down"
        return _Class(
            "kernel.net",
            Severity.WARNING if down else Severity.INFO,
            {"device": _net_device(msg), "detail": "link down" if down else "link up"},
        )
    if (match := _NIC_DRIVER.match(msg)) and (trouble := _NIC_TROUBLE.search(msg)):
        detail = "reset" if "reset" in trouble.group().lower() else trouble.group().lower()
        return _Class(
            "kernel.net", Severity.WARNING, {"device": _net_device(msg), "detail": detail}
        )
    return None


# --- clocks -------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _day_ms(year: int, month: int, day: int) -> int:
    """Midnight UTC of a date in epoch ms; ValueError for a date that does not exist."""
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        raise ValueError(f"no such date {year}-{month:02d}-{day:02d}")
    return calendar.timegm((year, month, day, 0, 0, 0)) * 1000


@lru_cache(maxsize=256)
def _date_ms(date: str) -> int:
    return _day_ms(int(date[:4]), int(date[5:7]), int(date[8:10]))


@lru_cache(maxsize=64)
def _tz_ms(tz: str | None) -> int:
    """A zone suffix (`Z`, `+01:00`, `-0500`) as the ms to subtract to get UTC."""
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60) * 1000


def _clock_ms(h: str, m: str, s: str) -> int:
    hours, minutes, seconds = int(h), int(m), int(s)
    if hours > 23 or minutes > 59 or seconds > 60:
        raise ValueError(f"no such time {h}:{m}:{s}")
    return ((hours * 60 + minutes) * 60 + seconds) * 1000


# --- the parsers --------------------------------------------------------------------------


def looks_like_kernel_text(first_lines: list[str]) -> bool:
    """Most of the first lines are in a kernel log format, and the host-naming formats say
    `kernel:` at least once (a job log with syslog-like stamps must not pass)."""
    hits = total = 0
    kernel_seen = journal_marker = False
    for raw in first_lines:
        text = raw.strip("\r\n")
        if not text.strip():
            continue
        if text.startswith("-- "):
            journal_marker = True
            continue
        total += 1
        fmt, match = _match_any(text)
        if match is None:
            continue
        hits += 1
        if fmt in _NODELESS or match.group("ident") in _KERNEL_IDENTS:
            kernel_seen = True
    if total == 0:
        return False
    return hits * 2 >= total and (kernel_seen or (journal_marker and hits > 0))


def _match_any(text: str) -> tuple[str | None, re.Match[str] | None]:
    """The first format whose pattern matches, trying only those the first character allows."""
    first = text[:1]
    candidates: tuple[str, ...]
    if first == "[":
        candidates = _BRACKET_FORMATS
    elif first.isdigit():
        candidates = _DIGIT_FORMATS
    else:
        candidates = _WORD_FORMATS
    for fmt in candidates:
        if match := _PATTERNS[fmt].match(text):
            return fmt, match
    return None, None


def parse_kernel_text(ctx: Context, lines: Iterable[tuple[int, str]]) -> Iterator[Item]:
    """Every kernel log line of a text export, in any of the formats above (mixed is fine).

    Lines come many to a second, so a stamp's time is worked out once per distinct second
    and only the fraction is added per line. What the parser learns (which GPU sits at which
    PCI address, which pod an OOM-killed pid was in) is kept in the context, so a live source
    that reads one batch at a time through one context keeps it too.
    """
    state: _State = ctx.memory.setdefault("kernel.state", _State())
    last_key: tuple[str, str, str | None] | None = None
    base: int | None = None
    node_flag = ctx.options.node
    fmt = ""
    locked: re.Pattern[str] | None = None  # the last line's format: try it first
    for number, raw in lines:
        text = raw.rstrip("\r")
        if not text or text.startswith("-- ") or text.isspace():
            continue  # journalctl's "-- Boot …" / "-- No entries --" markers
        match = locked.match(text) if locked is not None else None
        if match is None:
            found_fmt, match = _match_any(text)
            if match is None or found_fmt is None:
                yield Rejected(number, "not a kernel log line in any known format", text.encode())
                continue
            fmt, locked = found_fmt, _PATTERNS[found_fmt]
            if fmt in _NODELESS and (node_flag or ctx.node_hint) is None:
                yield Rejected(None, "dmesg output does not name its host: pass --node NODE")
                return
        stamp, frac = match.group("stamp", "frac")
        key = (fmt, stamp, match.group("tz") if fmt in _ZONED else None)
        if key != last_key:
            found = _stamp_ms(ctx, state, fmt, match)
            if isinstance(found, Rejected):
                yield found
                return
            last_key, base = key, found
        if base is None:
            yield Rejected(number, f"bad timestamp in a {fmt} line", text.encode())
            continue
        ts = base + (int(frac[:3]) * _FRACTION_SCALE[min(len(frac), 3)] if frac else 0)
        if fmt in _NODELESS:
            node, host, ident, msg = (
                node_flag or ctx.node_hint or "",
                None,
                None,
                match.group("msg"),
            )
        else:
            host, ident, msg = match.group("host", "ident", "msg")
            node = node_flag or host
        if msg.startswith("[") and (inner := _INNER_STAMP.match(msg)):
            msg = msg[inner.end() :]
        record = _record(ctx, state, node, ts, msg, host, ident, number, None)
        yield record
        if record.kind == "gpu.identity" and record.gpu_uuid:
            yield Binding("gpu.node", record.gpu_uuid, node, ts, ts, {"pci": record.attrs["pci"]})
        if (stack := _follow_stack(ctx, state, record, number)) is not None:
            yield stack
    if (stack := _end_stack(ctx, state)) is not None:
        yield stack


def _follow_stack(
    ctx: Context, state: _State, record: Evidence, line: int | None
) -> Evidence | None:
    """Reads a blocked task's dump along: a hung-task report or a task in state D opens it,
    its frames add the modules they are in, any other line ends it (another task's header too:
    a sysrq-t dump's sleeping tasks are not the blocked one)."""
    msg = record.message
    header = (
        _TASK_HEADER.search(msg)
        if record.kind != "kernel.hung_task" and ("state:" in msg or " D " in msg)
        else None
    )
    hung = record.kind == "kernel.hung_task"
    if hung or header is not None:
        ended = _end_stack(ctx, state)
        if hung or (header is not None and "D" in header.group("state", "old_state")):
            state.stack = _Stack(record.node or "", record.ts, msg, line)
        return ended
    if state.stack is None:
        return None
    if "+0x" in msg and (frame := _FRAME.match(msg)):
        module = frame.group("module")
        if module and module not in state.stack.modules:
            state.stack.modules.append(module)
        return None
    if _STACK_FURNITURE.search(msg):
        return None
    return _end_stack(ctx, state)


def _end_stack(ctx: Context, state: _State) -> Evidence | None:
    """The blocked task's dump as one record, if its frames named any module."""
    stack, state.stack = state.stack, None
    if stack is None or not stack.modules:
        return None
    return ctx.evidence(
        source=SOURCE,
        native_id=f"{stack.node}\x1f{stack.ts // 1000}\x1f{stack.message}\x1fstack",
        ts=stack.ts,
        kind="kernel.blocked_stack",
        message=f"{stack.message} (its stack in {', '.join(stack.modules)})",
        severity=Severity.WARNING,
        node=stack.node,
        attrs={"modules": " ".join(stack.modules)},
        line=stack.line,
    )


def _stamp_ms(ctx: Context, state: _State, fmt: str, match: re.Match[str]) -> int | Rejected | None:
    """A line's time to the second in epoch ms: None for a stamp that is not a real time, a
    Rejected when the flag the format needs is missing."""
    group = match.group
    try:
        if fmt in _ZONED:
            return (
                _date_ms(group("date"))
                + _clock_ms(group("h"), group("m"), group("s"))
                - _tz_ms(group("tz"))
            )
        if fmt == "short":
            month = _MONTHS.get(group("mon"))
            if month is None:
                return None
            year = _syslog_year(ctx, state, month)
            if year is None:
                return Rejected(
                    None,
                    "syslog timestamps have no year and the file has no date: pass --year YEAR",
                )
            return _day_ms(year, month, int(group("day"))) + _clock_ms(
                group("h"), group("m"), group("s")
            )
        if fmt == "unix":
            return int(group("stamp")) * 1000
        if fmt == "dmesg_t":
            month = _MONTHS.get(group("mon"))
            if month is None:
                return None
            return _day_ms(int(group("year")), month, int(group("day"))) + _clock_ms(
                group("h"), group("m"), group("s")
            )
        if fmt == "bare":
            # No time in the line: when it was observed, if said, else the file's time.
            return ctx.options.at or ctx.mtime_ms
        # raw dmesg: seconds since boot
        boot = ctx.options.boot_time
        if boot is None:
            return Rejected(
                None,
                "raw dmesg counts seconds since boot: pass --boot-time (from `uptime -s`) "
                "or re-export with `dmesg -T`",
            )
        return boot + int(group("stamp")) * 1000
    except ValueError:
        return None


def _syslog_year(ctx: Context, state: _State, month: int) -> int | None:
    if state.year is None:
        if ctx.options.year is not None:
            state.year = ctx.options.year
        elif ctx.mtime_ms is not None:
            year, last_month = _year_month(ctx.mtime_ms)
            # The file was last written in (year, last_month); a first line in a later month
            # must be from the year before.
            state.year = year if month <= last_month else year - 1
        else:
            return None
    elif month + 6 < state.last_month:
        state.year += 1  # Dec → Jan inside the file
    state.last_month = month
    return state.year


def _year_month(ms: int) -> tuple[int, int]:
    parts = time.gmtime(ms / 1000)
    return parts.tm_year, parts.tm_mon


def _record(
    ctx: Context,
    state: _State,
    node: str,
    ts: int,
    msg: str,
    host: str | None,
    ident: str | None,
    line: int | None,
    raw: bytes | None,
) -> Evidence:
    msg = msg.rstrip()
    found = _classify(msg, state, node)
    attrs = found.attrs
    if host is not None and host != node:
        attrs["host"] = host
    if ident is not None and ident not in _KERNEL_IDENTS:
        attrs["ident"] = ident
    return ctx.evidence(
        source=SOURCE,
        native_id=f"{node}\x1f{ts // 1000}\x1f{msg}",
        version=state.occurrence(node, ts, msg),
        ts=ts,
        kind=found.kind,
        message=msg,
        severity=found.severity,
        node=node,
        gpu_uuid=found.gpu_uuid,
        pod_uid=found.pod_uid,
        attrs=attrs,
        raw=raw,
        line=line,
    )


# --- journalctl -o json ---------------------------------------------------------------------


def _journal_state(ctx: Context) -> _State:
    """Journal entries arrive one document at a time; what the file teaches (PCI -> GPU,
    repeated lines) lives in the file's context."""
    state = ctx.memory.get(SOURCE)
    if not isinstance(state, _State):
        state = ctx.memory[SOURCE] = _State()
    return state


def looks_like_journal_json(doc: Any) -> bool:
    """A `journalctl -o json` entry (or a list of them). The cursor is enough, so an entry
    without a wall clock is still routed here and rejected with that reason."""
    if isinstance(doc, list):
        doc = doc[0] if doc else None
    return (
        isinstance(doc, dict)
        and "MESSAGE" in doc
        and ("__REALTIME_TIMESTAMP" in doc or "__CURSOR" in doc)
    )


def _journal_message(value: Any) -> str | None:
    """MESSAGE is a string, or an array of bytes when it is not valid UTF-8."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    return None


def parse_journal_json(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """`journalctl -k -o json` entries: the same records and ids as the text forms."""
    entries = doc if isinstance(doc, list) else [doc]
    state = _journal_state(ctx)
    if state.stopped:
        return
    for entry in entries:
        if not isinstance(entry, Mapping):
            yield Rejected(line, "journal entry is not a JSON object")
            continue
        msg = _journal_message(entry.get("MESSAGE"))
        stamp = entry.get("__REALTIME_TIMESTAMP")
        if msg is None:
            yield Rejected(line, "journal entry without a readable MESSAGE", orjson.dumps(entry))
            continue
        if not (isinstance(stamp, str | int) and str(stamp).isdigit()):
            yield Rejected(line, "journal entry without __REALTIME_TIMESTAMP", orjson.dumps(entry))
            continue
        host = entry.get("_HOSTNAME") if isinstance(entry.get("_HOSTNAME"), str) else None
        node = ctx.options.node or host
        if not node:
            state.stopped = True
            yield Rejected(None, "journal entries without _HOSTNAME: pass --node NODE")
            return
        ident = entry.get("SYSLOG_IDENTIFIER") or entry.get("_COMM")
        if not isinstance(ident, str):
            ident = "kernel" if entry.get("_TRANSPORT") == "kernel" else None
        if msg.startswith("[") and (inner := _INNER_STAMP.match(msg)):
            msg = msg[inner.end() :]
        ts = int(stamp) // 1000
        record = _record(ctx, state, node, ts, msg, host, ident, line, orjson.dumps(entry))
        yield record
        if record.kind == "gpu.identity" and record.gpu_uuid:
            yield Binding("gpu.node", record.gpu_uuid, node, ts, ts, {"pci": record.attrs["pci"]})
