"""Benchmark of the Kubernetes collector: sustained events/s through watch into the index, and
resident memory, against the API server stand-in (tests/standins/kubeapi.py) run as its own
process with a 5,000-node cluster's objects and a firehose of realistic Events.

    ./scripts/bench-collect [--rate 5000] [--seconds 30] [--nodes 5000]

`--rate 0` asks the firehose for as many events as it can make: the figure then is what the
collector keeps up with. The collector is the real `whyjob collect` in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb(pid: int) -> tuple[float, float]:
    """Current and peak resident memory of a process, in MB."""
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _stored(index: Path) -> int:
    if not index.exists():
        return 0
    with sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=30) as db:
        return int(
            db.execute("SELECT count(*) FROM evidence WHERE kind = 'k8s.event'").fetchone()[0]
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rate", type=float, default=5000, help="firehose events/s (0: as fast as it can)"
    )
    parser.add_argument("--seconds", type=float, default=30, help="how long to measure")
    parser.add_argument("--nodes", type=int, default=5000, help="nodes (and one training pod each)")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="whyjob-bench-collect-") as tmp:
        work = Path(tmp)
        kubeconfig, index = work / "kubeconfig", work / "index.sqlite"
        api = subprocess.Popen(
            [python, "-m", "tests.standins.kubeapi", "--kubeconfig", str(kubeconfig), "--nodes", str(args.nodes),
             "--seed", "--firehose", str(args.rate), "--bookmark-interval", "5"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert api.stdout is not None
            json.loads(api.stdout.readline())  # the server is up
            config = work / "config.yaml"
            config.write_text(
                f"index: {index}\nmetrics: {{listen: 'off'}}\ncollectors:\n"
                f"  kubernetes:\n    kubeconfig: {kubeconfig}\n    capture: false\n"
            )
            collector = subprocess.Popen(
                [str(Path(python).parent / "whyjob"), "--config", str(config), "collect"],
                stderr=subprocess.DEVNULL,
            )
            try:
                # Warm up: the initial list of 5,000 nodes and pods, then the watch catches up.
                time.sleep(8)
                start_count, started = _stored(index), time.monotonic()
                peak = 0.0
                samples = []
                while time.monotonic() - started < args.seconds:
                    time.sleep(1)
                    rss, hwm = _rss_mb(collector.pid)
                    peak = max(peak, hwm)
                    samples.append(rss)
                elapsed = time.monotonic() - started
                count = _stored(index) - start_count
                cpu = _cpu_seconds(collector.pid)
            finally:
                collector.terminate()
                collector.wait(30)
        finally:
            api.terminate()
            api.wait(30)
    print(
        f"collector: {count:,} events stored in {elapsed:.1f} s = {count / elapsed:,.0f} events/s "
        f"(firehose asked {'max' if args.rate <= 0 else f'{args.rate:,.0f}/s'}, {args.nodes:,} nodes and pods); "
        f"collector CPU {cpu:.1f} s in all"
    )
    print(f"collector RSS: {sum(samples) / len(samples):.0f} MB average, {peak:.0f} MB peak")
    return 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
