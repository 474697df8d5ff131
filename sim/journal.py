"""Kernel logs as `journalctl -k -o short-iso` prints them, one file per node.

`2026-03-04T10:11:12+0000 <hostname> kernel: <message>`, oldest first. Every boot starts with
the kernel's banner and the NVIDIA driver loading (including the `NVRM: GPU at PCI:...: GPU-...`
identity lines that join a PCI address to a GPU UUID); when the capture spans several boots,
journalctl separates them with `-- Boot <id> --`. Times are the node's clock.
"""

from __future__ import annotations

import random
from pathlib import Path

from whyjob.sim.clock import MS, SECOND, Clocks, journal
from whyjob.sim.incident import Incident
from whyjob.sim.world import Node, World

__all__ = ["boot_lines", "render_kernel", "write_kernel"]

_DEVICE_IDS = {
    "NVIDIA H100 80GB HBM3": "2330",
    "NVIDIA A100-SXM4-40GB": "20b0",
    "NVIDIA A100-SXM4-80GB": "20b2",
    "NVIDIA H200": "2335",
}

_DMI = {
    "aws": "DMI: Amazon EC2 {itype}/, BIOS 1.0 10/16/2017",
    "gce": "DMI: Google Google Compute Engine/Google Compute Engine, BIOS Google 10/25/2024",
    "azure": "DMI: Microsoft Corporation Virtual Machine/Virtual Machine, BIOS Hyper-V UEFI "
    "Release v4.1 08/23/2024",
}


def boot_lines(node: Node, boot_at: int, boot_id: str) -> list[tuple[int, str]]:
    """What one boot of `node` writes before anything interesting happens."""
    rng = random.Random(boot_id)
    t = boot_at
    kver = node.kernel_version
    lines = [
        (
            t,
            f"Linux version {kver} (builder@buildhost) (gcc (GCC) 12.3.0, GNU ld (GNU "
            "Binutils) 2.40) #1 SMP PREEMPT_DYNAMIC Mon Dec  9 11:20:15 UTC 2024",
        ),
        (
            t,
            f"Command line: BOOT_IMAGE=/boot/vmlinuz-{kver} root=UUID={node.system_uuid} ro "
            "console=tty0 console=ttyS0,115200n8 nvme_core.io_timeout=4294967295 "
            "intel_iommu=on iommu=pt",
        ),
        (t, _DMI[node.cloud].format(itype=node.instance_type_name)),
        (
            t,
            "Hypervisor detected: KVM"
            if node.cloud != "azure"
            else "Hypervisor detected: Microsoft Hyper-V",
        ),
        (
            t,
            f"Memory: {(node.instance_type.memory_ki if node.instance_type else 64_000_000)}K/"
            f"{(node.instance_type.memory_ki if node.instance_type else 64_000_000) + 9_437_184}K "
            "available",
        ),
    ]
    t += rng.randint(300, 900) * MS
    for gpu in node.gpus:
        device = _DEVICE_IDS.get(node.instance_type.gpu_model if node.instance_type else "", "2330")
        lines.append((t, f"pci {gpu.pci}.0: [10de:{device}] type 00 class 0x030200 PCIe Endpoint"))
    t += rng.randint(2, 5) * SECOND
    lines += [
        (t, "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none."),
        (t, "systemd[1]: systemd 252.23 running in system mode"),
    ]
    if node.gpus:
        t += rng.randint(10, 30) * SECOND
        drv = node.driver_version
        lines += [
            (t, "nvidia: loading out-of-tree module taints kernel."),
            (t, "nvidia: module license 'NVIDIA' taints kernel."),
            (t, "nvidia-nvlink: Nvlink Core is being initialized, major device number 234"),
            (
                t,
                f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {drv}  Tue Nov 26 "
                "21:44:24 UTC 2024",
            ),
            (
                t,
                f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  "
                f"{drv}  Tue Nov 26 21:10:04 UTC 2024",
            ),
            (t, "nvidia-uvm: Loaded the UVM driver, major device number 507."),
        ]
        t += rng.randint(2, 6) * SECOND
        for gpu in node.gpus:
            lines.append((t, f"NVRM: GPU at PCI:{gpu.pci}: {gpu.uuid}"))
            lines.append((t, f"NVRM: GPU Board Serial Number: {gpu.serial}"))
    t += rng.randint(5, 15) * SECOND
    lines.append((t, "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"))
    return lines


def render_kernel(node: Node, incident: Incident, clocks: Clocks) -> bytes:
    boots = sorted(node.boots)
    lines: list[tuple[int, int, str]] = []  # (time, order, text)
    for boot_at, boot_id in boots:
        lines += [(at, 0, text) for at, text in boot_lines(node, boot_at, boot_id)]
    lines += [(at, 1, text) for at, text in incident.kernel.get(node.name, [])]
    lines.sort(key=lambda item: (item[0], item[1]))
    out: list[str] = []
    boot_index = 0
    for at, _order, text in lines:
        while boot_index + 1 < len(boots) and at >= boots[boot_index + 1][0]:
            boot_index += 1
            out.append(f"-- Boot {boots[boot_index][1].replace('-', '')} --")
        out.append(f"{journal(clocks.node(node.name, at))} {node.name} kernel: {text}")
    return ("\n".join(out) + "\n").encode()


def write_kernel(root: Path, world: World, incident: Incident, clocks: Clocks) -> int:
    written = 0
    for node in world.nodes.values():
        if node.created_at > incident.end:
            continue
        path = root / "nodes" / node.name / "kern.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render_kernel(node, incident, clocks))
        written += 1
    return written
