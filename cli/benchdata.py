"""Data for the benchmarks: raw Kubernetes events, and a large index around simulated incidents."""

from __future__ import annotations

import random
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import orjson

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, Severity, evidence_id
from whyjob.core.index import Index, SqliteIndex
from whyjob.core.timeutil import format_ts

__all__ = ["build_explain_index", "fill_explain_index", "write_event_list"]

_REASONS = (
    ("Scheduled", "Normal", "default-scheduler", "Successfully assigned {ns}/{pod} to {node}"),
    ("Pulling", "Normal", "kubelet", 'Pulling image "registry.example.com/train:2.4.1"'),
    (
        "Pulled",
        "Normal",
        "kubelet",
        'Successfully pulled image "registry.example.com/train:2.4.1" in 2.1s',
    ),
    ("Created", "Normal", "kubelet", "Created container pytorch"),
    ("Started", "Normal", "kubelet", "Started container pytorch"),
    ("Killing", "Normal", "kubelet", "Stopping container pytorch"),
    (
        "BackOff",
        "Warning",
        "kubelet",
        "Back-off restarting failed container pytorch in pod {pod}_{ns}({uid})",
    ),
    (
        "Unhealthy",
        "Warning",
        "kubelet",
        'Liveness probe failed: Get "http://10.0.3.4:8080/healthz": context deadline exceeded',
    ),
    (
        "FailedScheduling",
        "Warning",
        "default-scheduler",
        "0/64 nodes are available: 64 Insufficient nvidia.com/gpu. preemption: 0/64 nodes are available: 64 No preemption victims found for incoming pod.",
    ),
)
_DAY_MS = 86_400_000
_BASE = 1_772_582_400_000  # 2026-03-04T00:00:00Z


def _pods(rng: random.Random, count: int) -> list[tuple[str, str, str, str]]:
    """(namespace, pod, uid, node): the population events are about, about 20 events a pod."""
    return [
        (
            f"team-{n % 40}",
            f"job-{n // 8}-worker-{n % 8}",
            str(uuid.UUID(int=rng.getrandbits(128))),
            f"ip-10-0-{rng.randrange(256)}-{rng.randrange(256)}.us-west-2.compute.internal",
        )
        for n in range(count)
    ]


def _event(rng: random.Random, n: int, pods: list[tuple[str, str, str, str]]) -> dict[str, object]:
    ns, pod, pod_uid, node = pods[rng.randrange(len(pods))]
    reason, kind, component, template = _REASONS[rng.randrange(len(_REASONS))]
    uid = str(uuid.UUID(int=rng.getrandbits(128)))
    # A day of a busy cluster, as a collector's capture holds it (kubectl itself keeps an hour).
    first = _BASE + rng.randrange(_DAY_MS)
    count = 1 if kind == "Normal" else rng.randrange(1, 20)
    last = first + (count - 1) * 30_000
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "count": count,
        "firstTimestamp": format_ts(first),
        "lastTimestamp": format_ts(last),
        "involvedObject": {
            "apiVersion": "v1",
            "fieldPath": "spec.containers{pytorch}",
            "kind": "Pod",
            "name": pod,
            "namespace": ns,
            "resourceVersion": str(1_000_000 + n),
            "uid": pod_uid,
        },
        "message": template.format(ns=ns, pod=pod, node=node, uid=pod_uid),
        "metadata": {
            "creationTimestamp": format_ts(first),
            "name": f"{pod}.{rng.getrandbits(64):016x}",
            "namespace": ns,
            "resourceVersion": str(2_000_000 + n),
            "uid": uid,
        },
        "reason": reason,
        "reportingComponent": component,
        "reportingInstance": node if component == "kubelet" else "",
        "source": {"component": component, "host": node}
        if component == "kubelet"
        else {"component": component},
        "type": kind,
    }


def write_event_list(path: Path, count: int, seed: int) -> None:
    """`kubectl get events -A -o json` with `count` realistic, distinct events."""
    rng = random.Random(seed)
    pods = _pods(rng, max(1, count // 20))
    items = [_event(rng, n, pods) for n in range(count)]
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def _filler(
    rng: random.Random, count: int, nodes: list[str], starts: list[int], first: int = 0
) -> list[Evidence]:
    """Records from many other experiments and nodes, over the 30 days around an incident
    picked at random for each."""
    out: list[Evidence] = []
    pods = [
        (f"team-{i % 40}", f"exp-{i // 8}-worker-{i % 8}", str(uuid.UUID(int=rng.getrandbits(128))))
        for i in range(4000)
    ]
    for n in range(first, first + count):  # n numbers every filler record: distinct ids
        ts = starts[rng.randrange(len(starts))] - 15 * _DAY_MS + rng.randrange(30 * _DAY_MS)
        roll = rng.random()
        node = nodes[rng.randrange(len(nodes))]
        if roll < 0.45:
            ns, pod, uid = pods[rng.randrange(len(pods))]
            line = f"step {n % 100000} loss {rng.random() * 3:.4f} lr 3.0e-4 tokens/s {rng.randrange(90000, 120000)}"
            kind = "log.progress" if n % 4 else "log.line"
            out.append(
                Evidence(
                    evidence_id("log", uid, str(n)),
                    ts,
                    "log",
                    kind,
                    line,
                    Severity.INFO,
                    namespace=ns,
                    pod=pod,
                    pod_uid=uid,
                    container="pytorch",
                    node=node,
                    attrs={"restart": 0, "seq": n},
                )
            )
        elif roll < 0.75:
            ns, pod, uid = pods[rng.randrange(len(pods))]
            reason = ("Started", "Pulled", "Created", "BackOff", "Killing")[n % 5]
            out.append(
                Evidence(
                    evidence_id("k8s.event", uid, str(n)),
                    ts,
                    "k8s.event",
                    "k8s.event",
                    f"{reason}: container pytorch",
                    Severity.INFO,
                    namespace=ns,
                    pod=pod,
                    pod_uid=uid,
                    node=node,
                    attrs={"reason": reason, "object_kind": "Pod", "count": 1},
                )
            )
        elif roll < 0.9:
            out.append(
                Evidence(
                    evidence_id("kernel", node, str(n)),
                    ts,
                    "kernel",
                    "kernel.line",
                    f"IPv4: martian source 10.0.{n % 256}.{n % 200} from 10.0.3.4, on dev eth0",
                    Severity.INFO,
                    node=node,
                )
            )
        else:
            gpu = f"GPU-{uuid.UUID(int=hash((node, n % 8)) & ((1 << 128) - 1))}"
            out.append(
                Evidence(
                    evidence_id("dcgm", gpu, str(n)),
                    ts,
                    "dcgm",
                    "gpu.status",
                    f"{gpu} on {node}: temp 61 C, util 97 %",
                    Severity.DEBUG,
                    node=node,
                    gpu_uuid=gpu,
                    attrs={"metrics": {"DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_GPU_UTIL": 97}},
                )
            )
    return out


def build_explain_index(
    path: Path, records: int, scenarios: Sequence[str] = ("xid79",)
) -> list[tuple[str, str]]:
    """Simulated incidents (one per scenario) inside `records` filler records in the SQLite
    file at `path`; returns their (name, namespace), the first scenario's first. Reused when
    already built with as much."""
    wanted = "v2:" + ",".join(scenarios)  # v2: the filler spread over every incident
    if path.exists():
        with SqliteIndex(path) as index:
            marker = index.checkpoint("bench.experiments")
            if marker and index.counts()["evidence"] >= records:
                built = orjson.loads(marker)
                if built["scenarios"] == wanted:
                    return [(name, namespace) for name, namespace in built["experiments"]]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with SqliteIndex(path) as index:
        return fill_explain_index(index, records, scenarios)


def fill_explain_index(
    index: Index, records: int, scenarios: Sequence[str] = ("xid79",)
) -> list[tuple[str, str]]:
    """The incidents and their filler, into an open index of any backend."""
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor
    from whyjob.sim import simulate

    wanted = "v2:" + ",".join(scenarios)
    rng = random.Random(42)
    experiments: list[tuple[str, str]] = []
    for number, scenario in enumerate(scenarios):
        with tempfile.TemporaryDirectory(prefix="whyjob-bench-bundle-") as bundle:
            truth = simulate(scenario, 7 + number, Path(bundle), noise=True)
            Ingestor(index, IngestOptions()).ingest([bundle])
        if (truth.experiment_name, truth.experiment_namespace) not in experiments:
            experiments.append((truth.experiment_name, truth.experiment_namespace))
    # The filler shares the incidents' nodes and times: every explain wades through it.
    own_nodes: set[str] = set()
    starts: list[int] = []
    for name, namespace in experiments:
        pods_of = index.experiment_pods(name, namespace)
        own_nodes |= {
            b.object for p in pods_of for b in index.bindings("pod.node", subjects=[p.uid])
        }
        starts.append(min((p.created or p.seen) for p in pods_of))
    start = starts[0]
    nodes = sorted(own_nodes) + [
        f"ip-10-1-{i // 250}-{i % 250}.us-west-2.compute.internal" for i in range(500)
    ]
    pods = [
        PodRecord(
            uid=str(uuid.UUID(int=rng.getrandbits(128))),
            namespace=f"team-{i % 40}",
            name=f"exp-{i // 8}-worker-{i % 8}",
            seen=start,
            experiment=f"exp-{i // 8}",
            launcher="PyTorchJob",
            label="training.kubeflow.org/job-name",
            rank=f"worker-{i % 8}",
        )
        for i in range(4000)
    ]
    index.upsert_pods(pods)
    index.bind(
        Binding("pod.node", p.uid, nodes[i % len(nodes)], start, start) for i, p in enumerate(pods)
    )
    written = 0
    while written < records:
        batch = _filler(rng, min(50_000, records - written), nodes, starts, written)
        index.write(batch)
        written += len(batch)
    built = {"scenarios": wanted, "experiments": experiments}
    index.set_checkpoint("bench.experiments", orjson.dumps(built).decode())
    return experiments
