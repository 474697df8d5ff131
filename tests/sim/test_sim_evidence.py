"""Each scenario's bundle holds the evidence that defines it, where a diagnosis would look for it,
tied to the attempt truth.json names as root."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.sim import Truth, plan
from whyjob.sim.truth import AttemptTruth

Bundle = Callable[..., tuple[Path, Truth]]


def _root(truth: Truth) -> AttemptTruth:
    root = truth.root
    assert root is not None
    return root


def _log(files: Any, out: Path, truth: Truth, attempt: AttemptTruth) -> str:
    text: str = files.log_text(
        out,
        truth.experiment["namespace"],
        attempt.pod,
        attempt.pod_uid,
        attempt.container,
        attempt.restart,
    )
    return text


def _reasons(files: Any, out: Path, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in files.events(out) if name is None or e["involvedObject"]["name"] == name]


def _seed_for(scenario: str, cloud: str) -> int:
    return next(seed for seed in range(1, 60) if plan(scenario, seed).cloud == cloud)


def _peers_are_collateral(files: Any, out: Path, truth: Truth, root: AttemptTruth) -> None:
    peers = [a for a in truth.attempts if a.caused_by == root.key]
    assert peers, "the other ranks went down with the root"
    for peer in peers:
        text = _log(files, out, truth, peer)
        assert (
            "Watchdog caught collective operation timeout" in text
            or "Received Signals.SIGTERM death signal" in text
            or "ncclRemoteError" in text
        ), peer.pod


def test_clean(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("clean", 1)
    for attempt in truth.attempts:
        assert attempt.exit_code == 0
        assert "Done waiting for other agents" in _log(files, out, truth, attempt)
        states = files.container_states(out, attempt.pod_uid)
        assert states[-1]["reason"] == "Completed" and states[-1]["exitCode"] == 0


def test_xid79(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("xid79", 1)
    root = _root(truth)
    uuid = re.search(r"GPU-[0-9a-f-]{36}", root.note)
    pci = re.search(r"PCI (\w{4}:\w\w:\w\w)", root.note)
    assert uuid and pci and root.node
    kern = files.kernel(out, root.node)
    assert f"NVRM: GPU at PCI:{pci.group(1)}: {uuid.group(0)}" in kern
    assert f"NVRM: Xid (PCI:{pci.group(1)}): 79, pid=" in kern
    assert "GPU has fallen off the bus." in kern
    text = _log(files, out, truth, root)
    assert re.search(r"RuntimeError: CUDA error: (unspecified launch failure|unknown error)", text)
    latched = [
        line
        for path in (out / "dcgm" / root.node).glob("*.prom")
        for line in path.read_text().splitlines()
        if line.startswith("DCGM_FI_DEV_XID_ERRORS{") and uuid.group(0) in line
    ]
    assert any(re.search(r"\} 79 \d+$", line) for line in latched)
    _peers_are_collateral(files, out, truth, root)


def _check_maintenance(files: Any, out: Path, truth: Truth, root: AttemptTruth) -> None:
    assert root.node
    if truth.cloud == "aws":
        instance = files.instance_id(out, root.node)
        statuses = files.load(out / "aws/instance-status.json")["InstanceStatuses"]
        codes = {
            e["Code"] for s in statuses if s["InstanceId"] == instance for e in s.get("Events", [])
        }
        assert codes & {"system-maintenance", "instance-retirement"}
        nth = [
            e
            for e in _reasons(files, out, root.node)
            if e["source"].get("component") == "aws-node-termination-handler"
        ]
        assert {"ScheduledEvent", "CordonAndDrain"} <= {e["reason"] for e in nth}
        assert nth[0]["metadata"]["annotations"]["instance-id"] == instance
        conditions = [
            c
            for body in files.pod_snapshots(out, root.pod_uid)
            for c in body["status"].get("conditions", [])
        ]
        assert any(
            c["type"] == "DisruptionTarget" and c["reason"] == "EvictionByEvictionAPI"
            for c in conditions
        )
    elif truth.cloud == "gce":
        ops = files.load(out / "gce/operations.json")
        assert any(
            op["operationType"] == "compute.instances.terminateOnHostMaintenance"
            and op["targetLink"].endswith(f"/instances/{root.node}")
            for op in ops
        )
        final = files.pod_snapshots(out, root.pod_uid)[-1]["status"]
        assert final["reason"] == "Terminated"
        assert final["message"] == "Pod was terminated in response to imminent node shutdown."
        upcoming = files.load(out / "gce/upcoming-maintenance" / f"{root.node}.json")
        assert upcoming["maintenance_status"] in ("PENDING", "ONGOING")
    else:
        doc = files.load(out / "azure/scheduled-events" / f"{root.node}.json")
        event = doc["Events"][0]
        assert event["EventType"] in ("Reboot", "Redeploy")
        assert event["Resources"][0] in root.note
        assert {"exitCode": 255, "reason": "Unknown"}.items() <= files.container_states(
            out, root.pod_uid
        )[0].items()


def test_maintenance_on_every_cloud(bundle: Bundle, files: Any) -> None:
    for cloud in ("aws", "gce", "azure"):
        out, truth = bundle("maintenance", _seed_for("maintenance", cloud))
        root = _root(truth)
        assert truth.cloud == cloud and root.category == "node.maintenance"
        _check_maintenance(files, out, truth, root)
        _peers_are_collateral(files, out, truth, root)


def test_spot_on_every_cloud(bundle: Bundle, files: Any) -> None:
    for cloud in ("aws", "gce", "azure"):
        out, truth = bundle("spot", _seed_for("spot", cloud))
        root = _root(truth)
        assert root.node and root.category == "node.spot_interruption"
        if cloud == "aws":
            instance = files.instance_id(out, root.node)
            warnings = [
                e
                for e in files.load(out / "aws/eventbridge.json")
                if e["detail-type"] == "EC2 Spot Instance Interruption Warning"
            ]
            assert [w["detail"]["instance-id"] for w in warnings] == [instance]
            reasons = {e["reason"] for e in _reasons(files, out)}
            assert reasons & {"SpotInterruption", "SpotInterrupted"}
        elif cloud == "gce":
            ops = files.load(out / "gce/operations.json")
            assert any(
                op["operationType"] == "compute.instances.preempted"
                and op["targetLink"].endswith(f"/instances/{root.node}")
                for op in ops
            )
        else:
            doc = files.load(out / "azure/scheduled-events" / f"{root.node}.json")
            assert [e["EventType"] for e in doc["Events"]] == ["Preempt"]


def test_scale_in(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("scale_in", 1)
    root = _root(truth)
    assert root.node
    instance = files.instance_id(out, root.node)
    activities = files.load(out / "aws/scaling-activities.json")["Activities"]
    ours = [a for a in activities if a["Description"] == f"Terminating EC2 instance: {instance}"]
    assert len(ours) == 1 and "taken out of service" in ours[0]["Cause"]
    _peers_are_collateral(files, out, truth, root)


def test_host_oom(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("host_oom", 1)
    root = _root(truth)
    assert root.node
    states = files.container_states(out, root.pod_uid)
    assert {"exitCode": 137, "reason": "OOMKilled"}.items() <= states[0].items()
    kern = files.kernel(out, root.node)
    assert "Memory cgroup out of memory: Killed process" in kern
    assert re.search(
        rf"oom-kill:constraint=CONSTRAINT_MEMCG,.*oom_memcg=/kubepods/burstable/"
        rf"pod{root.pod_uid}/",
        kern,
    )


def test_cuda_oom(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("cuda_oom", 1)
    text = _log(files, out, truth, _root(truth))
    assert re.search(
        r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [\d.]+ "
        r"GiB\. GPU \d has a total capacity of [\d.]+ GiB",
        text,
    )
    assert _root(truth).exit_code == 1


def test_restart_loop(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("restart_loop", 1)
    restarts: dict[str, int] = {}
    for attempt in truth.attempts:
        restarts[attempt.pod_uid] = max(restarts.get(attempt.pod_uid, 0), attempt.restart)
        if attempt.category == "app.exception":
            assert "KeyError: 'input_ids'" in _log(files, out, truth, attempt)
    assert min(restarts.values()) >= 4
    backoffs = [
        e
        for e in files.events(out)
        if e["reason"] == "BackOff"
        and e["message"].startswith("Back-off restarting failed container")
    ]
    assert max(e["count"] for e in backoffs) > 1
    final = files.pod_snapshots(out, _root(truth).pod_uid)[-1]["status"]["containerStatuses"][0]
    assert final["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert any(n.startswith("restart loop") for n in truth.notes)


def test_image_pull(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("image_pull", 1)
    failed = [e["message"] for e in files.events(out) if e["reason"] == "Failed"]
    assert any(re.match(r'Failed to pull image ".+": .* not found$', m) for m in failed)
    assert "Error: ImagePullBackOff" in failed
    for attempt in truth.attempts:
        status = files.pod_snapshots(out, attempt.pod_uid)[-1]["status"]
        assert status["phase"] == "Pending"
        assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"


def test_unschedulable(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("unschedulable", 1)
    nodes = len(files.items(out / "k8s/nodes.json"))
    failed = [e for e in files.events(out) if e["reason"] == "FailedScheduling"]
    assert any(e.get("series", {}).get("count", 1) > 2 for e in failed)
    for event in failed:
        match = re.match(
            r"^0/(\d+) nodes are available: (\d+) Insufficient nvidia\.com/gpu\. "
            r"preemption: 0/(\d+) nodes are available: ",
            event["message"],
        )
        assert match and len(set(match.groups())) == 1 and int(match.group(1)) <= nodes
    for attempt in truth.attempts:
        status = files.pod_snapshots(out, attempt.pod_uid)[-1]["status"]
        (scheduled,) = [c for c in status["conditions"] if c["type"] == "PodScheduled"]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")


def test_eviction(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("eviction", 1)
    root = _root(truth)
    final = files.pod_snapshots(out, root.pod_uid)[-1]
    assert final["status"]["reason"] == "Evicted"
    assert final["status"]["message"].startswith("The node was low on resource: ")
    assert any(
        c["type"] == "DisruptionTarget" and c["reason"] == "TerminationByKubelet"
        for c in final["status"]["conditions"]
    )
    assert any(e["reason"] == "Evicted" for e in _reasons(files, out, root.pod))


def test_preemption(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("preemption", 1)
    root = _root(truth)
    (event,) = [e for e in _reasons(files, out, root.pod) if e["reason"] == "Preempted"]
    assert re.match(
        rf"^Preempted by pod [0-9a-f-]{{36}} on node {re.escape(root.node or '')}$",
        event["message"],
    )
    conditions = files.pod_snapshots(out, root.pod_uid)[-1]["status"]["conditions"]
    assert any(c["reason"] == "PreemptionByScheduler" for c in conditions if c.get("reason"))


def test_nccl_error(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("nccl_error", 1)
    text = _log(files, out, truth, _root(truth))
    assert "ncclRemoteError: A call failed possibly due to a network error" in text
    assert re.search(r"NET/IB : Got completion from peer [\d.]+<\d+> with error 12,", text)


def test_nccl_timeout(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("nccl_timeout", 1)
    root = _root(truth)
    assert "Watchdog caught collective operation timeout" in _log(files, out, truth, root)
    others = [a for a in truth.attempts if a.caused_by == root.key]
    assert others and all((root.failed_at or "") < (a.failed_at or "") for a in others)


def test_segfault(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("segfault", 1)
    root = _root(truth)
    assert root.node
    assert "Fatal Python error: Segmentation fault" in _log(files, out, truth, root)
    assert "Signal 11 (SIGSEGV) received by PID" in _log(files, out, truth, root)
    assert re.search(r"python\[\d+\]: segfault at 0 ip ", files.kernel(out, root.node))


def test_nan_loss(bundle: Bundle, files: Any) -> None:
    for seed in (1, 2):
        out, truth = bundle("nan_loss", seed) if seed == 1 else bundle("nan_loss", 1)
        text = _log(files, out, truth, _root(truth))
        assert (
            "Current loss scale already at minimum - cannot decrease scale anymore. "
            "Exiting run." in text
        ) or "found NaN in local grad norm" in text


def test_checkpoint_error(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("checkpoint_error", 1)
    text = _log(files, out, truth, _root(truth))
    assert "Saving model checkpoint to /ckpt/checkpoint-" in text
    assert re.search(
        r"PytorchStreamWriter failed writing file data/\d+: file write failed"
        r"|Read-only file system",
        text,
    )


def test_storage_io(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("storage_io", 1)
    root = _root(truth)
    assert root.node
    assert re.search(r"nfs: server \S+ not responding", files.kernel(out, root.node))
    assert "OSError: [Errno 5] Input/output error" in _log(files, out, truth, root)


def test_config_error(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("config_error", 1)
    for attempt in truth.attempts:
        waiting = files.pod_snapshots(out, attempt.pod_uid)[-1]["status"]["containerStatuses"][0][
            "state"
        ]["waiting"]
        assert waiting == {
            "message": 'secret "hf-token" not found',
            "reason": "CreateContainerConfigError",
        }


def test_node_lost(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("node_lost", 1)
    root = _root(truth)
    lost = [body for body in files.node_objects(out) if body["metadata"]["name"] == root.node]
    ready = [c for body in lost for c in body["status"]["conditions"] if c["type"] == "Ready"]
    assert any(
        (c["status"], c["reason"], c["message"])
        == ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        for c in ready
    )
    states = files.container_states(out, root.pod_uid)
    assert any(s["reason"] == "ContainerStatusUnknown" and s["exitCode"] == 137 for s in states)
    reasons = {e["reason"] for e in _reasons(files, out, root.pod)}
    assert {"NodeNotReady", "TaintManagerEviction"} <= reasons


def test_cuda_error(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("cuda_error", 1)
    root = _root(truth)
    uuid = re.search(r"GPU-[0-9a-f-]{36}", root.note)
    assert uuid and root.node
    kern = files.kernel(out, root.node)
    (pci,) = re.findall(rf"NVRM: GPU at PCI:(\S+): {uuid.group(0)}", kern)[:1]
    assert f"NVRM: Xid (PCI:{pci}): 31, pid=" in kern
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in _log(
        files, out, truth, root
    )


def test_deleted(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("deleted", 1)
    assert {a.category for a in truth.attempts} == {"pod.deleted"}
    for attempt in truth.attempts:
        assert attempt.exit_code == 143
        assert any(e["reason"] == "Killing" for e in _reasons(files, out, attempt.pod))


def test_maintenance_storm(bundle: Bundle, files: Any) -> None:
    out, truth = bundle("maintenance_storm", 1)
    roots = [a for a in truth.attempts if a.category == "node.maintenance"]
    assert len(roots) >= 3 and len({a.node for a in roots}) == len(roots)
    resumed = set()
    for attempt in truth.attempts:
        text = _log(files, out, truth, attempt)
        resumed |= set(re.findall(r"(?:global step|at iteration) (\d+)$", text, re.M))
    assert len(resumed) <= 1, "every restart resumed from the same checkpoint"
