"""Kubernetes exports: events in both API groups, pods and nodes, JSON and YAML."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.core.index import SqliteIndex

Ingest = Callable[..., Any]
K8S = Path(__file__).parent.parent / "fixtures" / "k8s"
WORKER1 = "5d1c9a2b-7e3f-4c1a-9b2d-0f6e8a7c4b31"
NODE = "ip-10-0-12-34.us-west-2.compute.internal"


def test_core_v1_events_keep_every_update_of_a_repeated_event(
    ingest: Ingest, index: SqliteIndex
) -> None:
    summary = ingest(K8S / "events.json")
    assert (summary.total("read"), summary.total("stored"), summary.total("rejected")) == (5, 5, 0)
    pod_records = index.pod_evidence([WORKER1], 0, 2**62)
    backoffs = [ev for ev in pod_records if ev.attrs["reason"] == "BackOff"]
    assert sorted(ev.attrs["count"] for ev in backoffs) == [1, 4]  # both versions kept
    latest = max(backoffs, key=lambda ev: ev.ts)
    assert (
        latest.attrs["first_ts"] < latest.ts
        and latest.container == "pytorch"
        and latest.node == NODE
    )
    assert latest.message.startswith("BackOff: Back-off restarting failed container")
    node_events = index.entity_evidence("node", [NODE], 0, 2**62)
    assert [ev.attrs["reason"] for ev in node_events] == ["NodeNotReady"]
    job = index.entity_evidence("experiment", ["gpt2-run7"], 0, 2**62)
    assert [ev.attrs["reason"] for ev in job] == ["SuccessfulCreatePod"]
    # Events alone make the pod and where it ran known.
    assert [p.name for p in index.pods_named_like("gpt2-run7")] == ["gpt2-run7-worker-1"]
    assert [b.object for b in index.bindings("pod.node", subjects=[WORKER1])] == [NODE]


def test_reingest_stores_nothing_new(ingest: Ingest, index: SqliteIndex) -> None:
    ingest(K8S / "events.json")
    again = ingest(K8S / "events.json")
    assert (again.total("stored"), again.total("duplicate")) == (0, 5)
    assert index.counts()["evidence"] == 5


def test_events_k8s_io_v1(ingest: Ingest, index: SqliteIndex) -> None:
    summary = ingest(K8S / "events.k8s.io.json")
    assert summary.total("stored") == 2
    (scheduling,) = index.pod_evidence(["1f2e3d4c-5b6a-4789-9a0b-c1d2e3f4a5b6"], 0, 2**62)
    assert scheduling.attrs["reason"] == "FailedScheduling" and scheduling.attrs["count"] == 3
    assert (
        scheduling.attrs["component"] == "default-scheduler"
        and scheduling.attrs["action"] == "Scheduling"
    )
    assert "Insufficient nvidia.com/gpu" in scheduling.message
    (pulling,) = index.pod_evidence([WORKER1], 0, 2**62)
    assert (
        pulling.node == NODE and pulling.container == "pytorch"
    )  # eventTime null, deprecated times used


def test_pod_snapshot_yields_termination_facts(ingest: Ingest, index: SqliteIndex) -> None:
    ingest(K8S / "pod-crashloop.json")
    records = {ev.kind: ev for ev in index.pod_evidence([WORKER1], 0, 2**62)}
    terminated = records["container.terminated"]
    assert terminated.attrs["reason"] == "OOMKilled" and terminated.attrs["exit_code"] == 137
    # Waiting in CrashLoopBackOff: the dead run in lastState is the newest, restart == restartCount.
    assert terminated.attrs["restart"] == 1
    assert records["container.waiting"].attrs["reason"] == "CrashLoopBackOff"
    snapshot = records["pod.snapshot"]
    assert snapshot.attrs["gpus"] == 8 and snapshot.attrs["owner"] == {
        "kind": "PyTorchJob",
        "name": "gpt2-run7",
    }
    assert index.raw(snapshot.id) is not None
    (pod,) = index.experiment_pods("gpt2-run7", "ml-research")
    assert (pod.rank, pod.launcher, pod.node, pod.gpus) == ("worker-1", "PyTorchJob", NODE, 8)


def test_pod_yaml_list_eviction_and_pending(ingest: Ingest, index: SqliteIndex) -> None:
    summary = ingest(K8S / "pods.yaml")
    assert summary.files[0].fmt == "k8s" and summary.total("rejected") == 0
    evicted = index.pod_evidence(["6e5d4c3b-2a19-4807-b6f5-e4d3c2b1a090"], 0, 2**62)
    kinds = {ev.kind: ev for ev in evicted}
    assert kinds["pod.status"].attrs["reason"] == "Evicted"
    assert kinds["pod.disruption"].attrs["reason"] == "TerminationByKubelet"
    assert kinds["container.terminated"].attrs["restart"] == 0
    pending = {
        ev.kind for ev in index.pod_evidence(["1f2e3d4c-5b6a-4789-9a0b-c1d2e3f4a5b6"], 0, 2**62)
    }
    assert pending == {"pod.snapshot", "pod.unschedulable"}
    assert {e.name for e in index.experiments()} == {"sweep-lr", "gpt2-run7"}


def test_snapshots_of_one_pod_add_each_fact_once(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    text = (K8S / "pod-crashloop.json").read_text()
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "b.json").write_text(
        text.replace('"resourceVersion": "816034"', '"resourceVersion": "816999"')
    )
    ingest(tmp_path)
    kinds = [ev.kind for ev in index.pod_evidence([WORKER1], 0, 2**62)]
    assert kinds.count("container.terminated") == 1 and kinds.count("pod.snapshot") == 2


def test_nodes_give_conditions_taints_and_the_instance(ingest: Ingest, index: SqliteIndex) -> None:
    ingest(K8S / "nodes.json")
    records = index.entity_evidence("node", [NODE], 0, 2**62)
    ready = [ev for ev in records if ev.kind == "node.condition"]
    assert [(ev.attrs["condition"], ev.attrs["status"]) for ev in ready] == [("Ready", "Unknown")]
    assert sorted(ev.attrs["effect"] for ev in records if ev.kind == "node.taint") == [
        "NoExecute",
        "NoSchedule",
    ]
    assert [b.object for b in index.bindings("node.instance", subjects=[NODE])] == [
        "i-0a1b2c3d4e5f60718"
    ]


def test_other_kinds_in_a_list_are_counted_as_ignored(ingest: Ingest, tmp_path: Path) -> None:
    source = tmp_path / "all.json"
    source.write_text(
        '{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}]}'
    )
    summary = ingest(source)
    assert summary.files[0].ignored == {"Service": 1} and summary.total("rejected") == 0


def test_fixture_folder_imports_cleanly(ingest: Ingest, tmp_path: Path) -> None:
    shutil.copytree(K8S, tmp_path / "k8s")
    summary = ingest(tmp_path)
    assert summary.total("rejected") == 0 and summary.total("stored") > 10


def test_provider_ids_name_the_instance_as_cloud_notices_do() -> None:
    from whyjob.collector.ingest.k8s_objects import instance_from_provider_id as instance

    assert instance("aws:///us-west-2a/i-0a1b2c3d4e5f60718") == "i-0a1b2c3d4e5f60718"
    assert instance("gce://proj/us-central1-a/gke-pool-1a2b3c4d-x7k2") == "gke-pool-1a2b3c4d-x7k2"
    vmss = "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-gpupool-12345678-vmss/virtualMachines/3"
    assert instance(vmss) == "aks-gpupool-12345678-vmss_3"  # Scheduled Events' resource name
    assert (
        instance(
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/gpu-vm-1"
        )
        == "gpu-vm-1"
    )
    assert instance("kind://docker/kind/kind-control-plane") is None


def test_events_about_a_launcher_object_belong_to_its_experiment(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    """The controllers' own events (LeaderWorkerSet, an Argo Workflow, MXJob) name the object
    whose name is the experiment's."""
    events = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"e{n}", "namespace": "ml"},
            "involvedObject": {
                "kind": kind,
                "name": name,
                "namespace": "ml",
                "apiVersion": version,
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "lastTimestamp": "2026-03-01T10:00:00Z",
            "count": 1,
        }
        for n, (kind, version, name, reason, message) in enumerate(
            [
                ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "vllm-70b", "GroupsProgressing", "Creating revision"),
                ("Workflow", "argoproj.io/v1alpha1", "sweep-7", "WorkflowRunning", "Workflow Running"),
                ("MXJob", "kubeflow.org/v1", "mx-1", "MXJobCreated", "MXJob mx-1 is created."),
                ("Workflow", "example.com/v1", "not-argo", "Started", "some other Workflow"),
            ]
        )
    ]  # fmt: skip
    (tmp_path / "events.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": events})
    )
    assert ingest(tmp_path / "events.json").total("stored") == 4
    for name in ("vllm-70b", "sweep-7", "mx-1"):
        assert len(index.entity_evidence("experiment", [name], 0, 2**62)) == 1, name
    assert not index.entity_evidence("experiment", ["not-argo"], 0, 2**62)  # another group's
