"""dcgm-exporter scrapes in Prometheus text format: `dcgm/<node>/<unix-seconds>.prom`.

Metric names, types and HELP text are dcgm-exporter's default-counters.csv. Labels come in the
exporter's order (gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION,
container, namespace, pod); the pod labels are empty when no pod holds the GPU. Each sample
carries a millisecond timestamp, as a federating Prometheus would keep it. `DCGM_FI_DEV_XID_ERRORS`
is a latch: it shows the last Xid seen on that GPU, however long ago. A GPU that fell off the
bus reports only that latch afterwards.
"""

from __future__ import annotations

import random
from pathlib import Path

from whyjob.sim.clock import MS, SECOND, Clocks
from whyjob.sim.incident import Incident, Pod
from whyjob.sim.world import Node, World

__all__ = ["METRICS", "render_scrape", "write_dcgm"]

METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
)


def _holder(incident: Incident, node: Node, at: int) -> Pod | None:
    """The pod whose container holds this node's GPUs at `at` (GPU pods take all of them)."""
    for pod in incident.pods:
        if pod.node != node.name or not pod.runs:
            continue
        gpus = pod.spec["containers"][0]["resources"]["limits"].get("nvidia.com/gpu")
        if not gpus:
            continue
        for run in pod.runs:
            if run.pending or run.started_at is None or run.started_at > at:
                continue
            end = run.true_end if run.true_end is not None else incident.end
            if at < end:
                return pod
    return None


def _is_up(incident: Incident, node: Node, at: int) -> bool:
    if not node.exists_at(at) or at < node.created_at + 60 * SECOND:
        return False
    for down, up in incident.node_down.get(node.name, []):
        if down <= at and (up is None or at < up + 60 * SECOND):
            return False
    return True


def render_scrape(node: Node, at: int, incident: Incident, clocks: Clocks) -> bytes:
    rng = random.Random(f"{node.name}/{at}")
    stamp = clocks.read("dcgm", at) // MS
    holder = _holder(incident, node, at)
    itype = node.instance_type
    assert itype is not None
    rows: dict[str, list[str]] = {name: [] for name, _, _ in METRICS}
    for gpu in node.gpus:
        pod = holder
        labels = (
            f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
            f'device="nvidia{gpu.index}",modelName="{itype.gpu_model}",Hostname="{node.name}",'
            f'DCGM_FI_DRIVER_VERSION="{node.driver_version}",'
            f'container="{pod.container if pod else ""}",'
            f'namespace="{pod.namespace if pod else ""}",pod="{pod.name if pod else ""}"'
        )
        seen = sorted(x for x in incident.xids.get((node.name, gpu.index), []) if x[0] <= at)
        latched = seen[-1][1] if seen else 0
        dead_at = incident.dead_gpus.get((node.name, gpu.index))
        if dead_at is not None and dead_at <= at:
            rows["DCGM_FI_DEV_XID_ERRORS"].append(
                f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {latched} {stamp}"
            )
            continue
        busy = pod is not None
        util = rng.randint(88, 100) if busy else 0
        fb_used = int(itype.fb_total_mib * rng.uniform(0.78, 0.97)) if busy else 0
        power = (
            rng.uniform(520, 690)
            if busy and itype.fb_total_mib > 50000
            else (rng.uniform(280, 390) if busy else rng.uniform(62, 75))
        )
        uptime_s = max(1, (at - node.boot_at) // SECOND)
        values = {
            "DCGM_FI_DEV_SM_CLOCK": 1980 if busy else 345,
            "DCGM_FI_DEV_MEM_CLOCK": 2619 if itype.fb_total_mib > 50000 else 1215,
            "DCGM_FI_DEV_MEMORY_TEMP": rng.randint(44, 62) if busy else rng.randint(28, 34),
            "DCGM_FI_DEV_GPU_TEMP": rng.randint(52, 74) if busy else rng.randint(27, 33),
            "DCGM_FI_DEV_POWER_USAGE": f"{power:.3f}",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(uptime_s * (power + 40) * 1000),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_GPU_UTIL": util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": rng.randint(25, 60) if busy else 0,
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": latched,
            "DCGM_FI_DEV_FB_FREE": itype.fb_total_mib - fb_used - 512,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": uptime_s
            * (rng.randint(9000, 40000) if busy else 3),
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{rng.uniform(0.85, 0.99) if busy else 0:.6f}",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": f"{rng.uniform(0.3, 0.6) if busy else 0:.6f}",
            "DCGM_FI_PROF_DRAM_ACTIVE": f"{rng.uniform(0.3, 0.7) if busy else 0:.6f}",
        }
        for name, value in values.items():
            rows[name].append(f"{name}{{{labels}}} {value} {stamp}")
    out: list[str] = []
    for name, kind, text in METRICS:
        if not rows[name]:
            continue
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(rows[name])
    return ("\n".join(out) + "\n").encode()


def write_dcgm(root: Path, world: World, incident: Incident, clocks: Clocks) -> int:
    written = 0
    for at in sorted(set(incident.dcgm_times)):
        if at > incident.end:
            continue
        for node in world.nodes.values():
            if not node.has_gpus or not _is_up(incident, node, at):
                continue
            seconds = clocks.read("dcgm", at) // SECOND
            path = root / "dcgm" / node.name / f"{seconds}.prom"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render_scrape(node, at, incident, clocks))
            written += 1
    return written
