"""Container logs as the kubelet keeps them: `/var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log`.

The CRI log format (containerd, CRI-O) is one record per line:
`<RFC 3339 nanosecond time> <stdout|stderr> <P|F> <text>`. The runtime cuts lines longer than
16 KiB into partial (`P`) records, the last piece tagged full (`F`); a reader must join them.
Times are the node's clock.
"""

from __future__ import annotations

from pathlib import Path

from whyjob.sim.clock import Clocks, cri
from whyjob.sim.incident import Incident, Run

__all__ = ["MAX_LINE", "render_log", "write_logs"]

MAX_LINE = 16 * 1024  # containerd's default max_container_log_line_size


def render_log(run: Run, node: str, clocks: Clocks) -> bytes:
    out: list[bytes] = []
    lines = sorted(run.log, key=lambda line: line.at)
    previous = 0
    for index, line in enumerate(lines):
        # The runtime stamps a line when it reads it, a little after the process wrote it, and
        # never earlier than the line before.
        nanos = clocks.node(node, line.at) * 1000 + 20_000 + (index * 7919) % 400_000
        if nanos <= previous:
            nanos = previous + 1_000 + (index * 31) % 9_000
        previous = nanos
        stamp = cri(nanos // 1000, nanos % 1000).encode()
        stream = line.stream.encode()
        body = line.text.encode()
        chunks = [body[i : i + MAX_LINE] for i in range(0, len(body), MAX_LINE)] or [b""]
        for number, chunk in enumerate(chunks):
            tag = b"F" if number == len(chunks) - 1 else b"P"
            out.append(b"%s %s %s %s\n" % (stamp, stream, tag, chunk))
    return b"".join(out)


def write_logs(root: Path, incident: Incident, clocks: Clocks) -> int:
    """Write every run's log file; returns how many files were written."""
    written = 0
    for pod in incident.pods:
        if pod.node is None:
            continue
        folder = root / "var" / "log" / "pods" / f"{pod.namespace}_{pod.name}_{pod.uid}"
        for run in pod.runs:
            if run.pending or not run.log:
                continue
            path = folder / pod.container / f"{run.restart}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render_log(run, pod.node, clocks))
            written += 1
    return written
