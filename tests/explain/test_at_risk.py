"""A running experiment on a node the cloud is about to take is at risk, before the fall."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.render import render_text
from whyjob.explain.ruleset import load_rules

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "core" / "schema" / "explanation.v1.json").read_text()
)
NOW = 1_772_625_600_000
HOUR = 3_600_000
NODES = ("gpu-node-1", "gpu-node-2")
INSTANCE = "i-0abc123def4567890"


def _running(index: SqliteIndex) -> None:
    """A two-rank job, running for three hours, each rank with 8 GPUs; rank 1 saved a
    checkpoint 40 minutes ago."""
    pods = [
        PodRecord(f"uid-{n}", "ml", f"llama-ft-worker-{n}", seen=NOW - 60_000, experiment="llama-ft",
                  launcher="PyTorchJob", rank=f"worker-{n}", node=node, created=NOW - 3 * HOUR,
                  phase="Running", gpus=8)
        for n, node in enumerate(NODES)
    ]  # fmt: skip
    index.upsert_pods(pods)
    index.bind([Binding("pod.node", p.uid, p.node or "", NOW - 3 * HOUR, NOW) for p in pods])
    index.bind([Binding("node.instance", NODES[0], INSTANCE, NOW - 10 * HOUR, NOW)])
    index.write(
        [
            Evidence(evidence_id("k8s.pod", p.uid, "running"), NOW - 3 * HOUR, "k8s.pod",
                     "container.running", "Container pytorch running (restart 0)", namespace="ml",
                     pod=p.name, pod_uid=p.uid, container="pytorch", node=p.node, attrs={"restart": 0})
            for p in pods
        ]
        + [
            Evidence(evidence_id("log", "uid-1", "ckpt"), NOW - 40 * 60_000, "log", "log.checkpoint",
                     "Saving model checkpoint to /ckpt/checkpoint-1200", namespace="ml",
                     pod="llama-ft-worker-1", pod_uid="uid-1", container="pytorch",
                     attrs={"phase": "saved", "step": 1200, "restart": 0})
        ]
    )  # fmt: skip


def _maintenance(start: int) -> Evidence:
    return Evidence(evidence_id("aws.ec2", INSTANCE, str(start)), start, "aws.ec2", "maintenance.scheduled",
                    f"EC2 system-reboot scheduled for {INSTANCE}", ts_end=start + 2 * HOUR,
                    instance_id=INSTANCE, attrs={"provider": "aws", "code": "system-reboot", "state": "scheduled"})  # fmt: skip


def test_maintenance_ahead_of_a_running_rank_is_a_warning_with_the_work_at_stake(
    index: SqliteIndex,
) -> None:
    _running(index)
    index.write([_maintenance(NOW + 40 * 60_000)])
    explanation = explain_experiment(index, load_rules(), "llama-ft", "ml", now=NOW)
    (risk,) = explanation.at_risk
    assert (risk.node, risk.ranks) == ("gpu-node-1", ["worker-0"])
    assert risk.starts == NOW + 40 * 60_000
    assert risk.last_checkpoint == NOW - 40 * 60_000
    # If the node goes when the window opens: rank 0 since its start (3h 40m x 8 GPUs), rank 1
    # since its checkpoint (1h 20m x 8 GPUs); a collective job loses both.
    assert round(risk.gpu_hours, 2) == round((220 + 80) / 60 * 8, 2)
    jsonschema.validate(explanation.to_json(), SCHEMA)
    document = explanation.to_json()["at_risk"][0]
    assert document["in"] == "40m 00s" and document["reasons"][0]["code"] == "notice.maintenance"
    text = render_text(explanation, color=False)
    assert "At risk: gpu-node-1 (running worker-0): scheduled maintenance, in 40m 00s" in text
    assert "cordon and drain gpu-node-1" in text


def test_a_window_beyond_the_hour_or_a_fault_before_the_run_is_no_warning(
    index: SqliteIndex,
) -> None:
    _running(index)
    index.write([_maintenance(NOW + 5 * HOUR)])
    index.write([Evidence(evidence_id("kernel", NODES[1], "xid"), NOW - 5 * HOUR, "kernel", "gpu.xid",
                          "NVRM: Xid (PCI:0000:3b:00): 79", node=NODES[1], attrs={"xid": 79})])  # fmt: skip
    explanation = explain_experiment(index, load_rules(), "llama-ft", "ml", now=NOW)
    assert explanation.at_risk == []
    assert explanation.to_json()["at_risk"] == []
    index.write([Evidence(evidence_id("kernel", NODES[1], "xid2"), NOW - HOUR, "kernel", "gpu.xid",
                          "NVRM: Xid (PCI:0000:3b:00): 79", node=NODES[1], attrs={"xid": 79})])  # fmt: skip
    (risk,) = explain_experiment(index, load_rules(), "llama-ft", "ml", now=NOW).at_risk
    assert risk.node == "gpu-node-2" and "cordon gpu-node-2 and move its ranks" in risk.advice
