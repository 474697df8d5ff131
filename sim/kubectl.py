"""Kubernetes objects as `kubectl get ... -o json|yaml` prints them.

kubectl marshals with Go's encoding/json: keys sorted (objects go through unstructured maps),
four-space indent, `<`, `>` and `&` escaped as \\u003c, \\u003e, \\u0026. Zero `metav1.Time`
fields print as null, not absent. Lists come wrapped in `{"kind": "List", "metadata":
{"resourceVersion": ""}}`. Timestamps are the API server's (`events`) or kubelet's (`kubelet`)
clock, each with its own skew.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from whyjob.sim.clock import Clocks, rfc3339, rfc3339_micro
from whyjob.sim.incident import KubeEvent, ObjRef, Pod, PodCondition, Run
from whyjob.sim.world import Cloud, Node

__all__ = [
    "dumps_json",
    "dumps_yaml",
    "event_core",
    "event_v1",
    "kube_list",
    "reindent",
    "render_node",
    "render_pod",
]

API = "apiserver"  # the clock that stamps metadata (creation, deletion)


def reindent(text: bytes, width: int) -> bytes:
    """orjson indents by two; Go and the AWS CLI by four. JSON strings cannot hold a raw
    newline, so every leading run of spaces is indentation and can simply be widened."""
    if width == 2:
        return text
    factor = width // 2
    lines = text.split(b"\n")
    return b"\n".join(
        b" " * ((len(line) - len(line.lstrip(b" "))) * factor) + line.lstrip(b" ") for line in lines
    )


def dumps_json(obj: Any) -> bytes:
    """Go's json.MarshalIndent as kubectl uses it, with a trailing newline."""
    text = reindent(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS), 4)
    text = text.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")
    return text + b"\n"


# libyaml's emitter when PyYAML was built with it: the same output, many times faster.
_BASE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _KubectlDumper(_BASE_DUMPER):  # type: ignore[misc]
    """Never write anchors and aliases (`&id001`): kubectl repeats shared values in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dumps_yaml(obj: Any) -> bytes:
    """kubectl's YAML: block style, sorted keys, sequences flush with their parent key."""
    text = yaml.dump(
        obj, Dumper=_KubectlDumper, default_flow_style=False, sort_keys=True, allow_unicode=True
    )
    return text.encode()


def kube_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


# ---------------------------------------------------------------------------------------------
# pods

_CONDITION_ORDER = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    "DisruptionTarget",
)


def _condition(c: PodCondition, clocks: Clocks) -> dict[str, Any]:
    out: dict[str, Any] = {
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(clocks.read("kubelet", c.last_transition)),
        "status": c.status,
        "type": c.type,
    }
    if c.reason:
        out["reason"] = c.reason
    if c.message:
        out["message"] = c.message
    return out


def _terminated(run: Run, clocks: Clocks) -> dict[str, Any]:
    out: dict[str, Any] = {"exitCode": run.exit_code, "reason": run.reason}
    if run.timestamps:
        out["containerID"] = run.container_id
        out["startedAt"] = (
            rfc3339(clocks.read("kubelet", run.started_at)) if run.started_at else None
        )
        out["finishedAt"] = (
            rfc3339(clocks.read("kubelet", run.finished_at)) if run.finished_at else None
        )
    else:
        out["startedAt"] = None
        out["finishedAt"] = None
    if run.message:
        out["message"] = run.message
    return out


def _container_status(pod: Pod, clocks: Clocks) -> dict[str, Any]:
    started_runs = [r for r in pod.runs if not r.pending]
    run = started_runs[-1] if started_runs else None
    previous = started_runs[-2] if len(started_runs) > 1 else None
    status: dict[str, Any] = {
        "image": pod.image,
        "imageID": "",
        "lastState": {},
        "name": pod.container,
        "ready": False,
        # The kubelet counts a container it could not find after a node loss as one more
        # restart (kubelet_pods.go: "manually increment the restart count").
        "restartCount": (run.restart + (run.reason == "ContainerStatusUnknown")) if run else 0,
        "started": False,
    }
    if run is None:
        reason, message = pod.waiting or ("ContainerCreating", None)
        waiting: dict[str, Any] = {"reason": reason}
        if message:
            waiting["message"] = message
        status["state"] = {"waiting": waiting}
        return status
    status["imageID"] = pod.image_id
    status["containerID"] = run.container_id
    if run.finished_at is None and run.exit_code is None:
        assert run.started_at is not None
        status["state"] = {
            "running": {"startedAt": rfc3339(clocks.read("kubelet", run.started_at))}
        }
        status["ready"] = True
        status["started"] = True
        if previous is not None:
            status["lastState"] = {"terminated": _terminated(previous, clocks)}
        return status
    if pod.waiting is not None:
        reason, message = pod.waiting
        waiting = {"reason": reason}
        if message:
            waiting["message"] = message
        status["state"] = {"waiting": waiting}
        status["lastState"] = {"terminated": _terminated(run, clocks)}
        return status
    status["state"] = {"terminated": _terminated(run, clocks)}
    if previous is not None:
        status["lastState"] = {"terminated": _terminated(previous, clocks)}
    return status


def render_pod(pod: Pod, clocks: Clocks) -> dict[str, Any]:
    """The pod as `kubectl get pod -o json` shows it now; metadata.resourceVersion is filled
    in by the caller once every write has its number."""
    metadata: dict[str, Any] = {
        "creationTimestamp": rfc3339(clocks.read(API, pod.created_at)),
        "labels": dict(pod.labels),
        "name": pod.name,
        "namespace": pod.namespace,
        "resourceVersion": "",
        "uid": pod.uid,
    }
    if pod.annotations:
        metadata["annotations"] = dict(pod.annotations)
    if pod.owner_refs:
        metadata["ownerReferences"] = [dict(o) for o in pod.owner_refs]
    if pod.labels.get("batch.kubernetes.io/job-name") and pod.name.count("-") >= 2:
        metadata["generateName"] = pod.name[: pod.name.rfind("-") + 1]
    if "batch.kubernetes.io/job-name" in pod.labels and pod.deleted_at is None:
        # The Job controller holds a finalizer on its pods until it has counted them.
        metadata["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    if pod.deletion_at is not None:
        metadata["deletionTimestamp"] = rfc3339(
            clocks.read(API, pod.deletion_at + (pod.deletion_grace or 0) * 1_000_000)
        )
        metadata["deletionGracePeriodSeconds"] = pod.deletion_grace or 0
    spec = dict(pod.spec)
    if pod.node:
        spec["nodeName"] = pod.node
    status: dict[str, Any] = {"phase": pod.phase, "qosClass": pod.qos}
    conditions = [pod.conditions[t] for t in _CONDITION_ORDER if t in pod.conditions]
    if conditions:
        status["conditions"] = [_condition(c, clocks) for c in conditions]
    if pod.node and (pod.runs or pod.waiting):
        status["containerStatuses"] = [_container_status(pod, clocks)]
    if pod.host_ip:
        status["hostIP"] = pod.host_ip
        status["hostIPs"] = [{"ip": pod.host_ip}]
    if pod.ip and any(not r.pending for r in pod.runs):
        status["podIP"] = pod.ip
        status["podIPs"] = [{"ip": pod.ip}]
    if pod.started_at is not None:
        status["startTime"] = rfc3339(clocks.read("kubelet", pod.started_at))
    if pod.reason:
        status["reason"] = pod.reason
    if pod.message:
        status["message"] = pod.message
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


# ---------------------------------------------------------------------------------------------
# nodes


def _node_labels(node: Node, cloud: Cloud) -> dict[str, str]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": node.instance_type_name,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": node.region,
        "failure-domain.beta.kubernetes.io/zone": node.zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": node.instance_type_name,
        "topology.kubernetes.io/region": node.region,
        "topology.kubernetes.io/zone": node.zone,
    }
    spot = node.capacity_type == "spot"
    if cloud.kind == "aws":
        if node.karpenter:
            labels["karpenter.sh/capacity-type"] = node.capacity_type
            labels["karpenter.sh/nodepool"] = node.group
            labels["karpenter.sh/initialized"] = "true"
            labels["karpenter.sh/registered"] = "true"
            labels["karpenter.k8s.aws/instance-family"] = node.instance_type_name.split(".")[0]
        else:
            labels["eks.amazonaws.com/capacityType"] = "SPOT" if spot else "ON_DEMAND"
            labels["eks.amazonaws.com/nodegroup"] = node.group.split("-", 1)[1].rsplit("-", 5)[0]
            labels["eks.amazonaws.com/nodegroup-image"] = "ami-0" + node.machine_id[:16]
        labels["k8s.io/cloud-provider-aws"] = node.machine_id[16:32]
        labels["topology.k8s.aws/zone-id"] = "usw2-az" + node.zone[-1:].replace("a", "1")
    elif cloud.kind == "gce":
        labels["cloud.google.com/gke-boot-disk"] = "pd-balanced"
        labels["cloud.google.com/gke-container-runtime"] = "containerd"
        labels["cloud.google.com/gke-nodepool"] = node.group
        labels["cloud.google.com/gke-os-distribution"] = "cos"
        labels["cloud.google.com/machine-family"] = node.instance_type_name.split("-")[0]
        labels["cloud.google.com/private-node"] = "false"
        if node.instance_type is not None:
            labels["cloud.google.com/gke-accelerator"] = node.instance_type.gpu_product
            labels["cloud.google.com/gke-gpu-driver-version"] = "latest"
        if spot:
            labels["cloud.google.com/gke-spot"] = "true"
            labels["cloud.google.com/gke-provisioning"] = "spot"
    else:
        labels["agentpool"] = node.group.split("-")[1]
        labels["kubernetes.azure.com/agentpool"] = node.group.split("-")[1]
        labels["kubernetes.azure.com/cluster"] = cloud.resource_group
        labels["kubernetes.azure.com/mode"] = "user" if node.instance_type else "system"
        labels["kubernetes.azure.com/node-image-version"] = (
            "AKSUbuntu-2204gen2containerd-202501.12.0"
        )
        labels["kubernetes.azure.com/os-sku"] = "Ubuntu"
        labels["kubernetes.azure.com/role"] = "agent"
        if node.instance_type is not None:
            labels["kubernetes.azure.com/accelerator"] = "nvidia"
        if spot:
            labels["kubernetes.azure.com/scalesetpriority"] = "spot"
    if node.instance_type is not None:
        labels["nvidia.com/gpu.count"] = str(len(node.gpus))
        labels["nvidia.com/gpu.product"] = node.instance_type.gpu_model.replace(" ", "-")
        labels["nvidia.com/gpu.memory"] = str(node.instance_type.fb_total_mib)
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/cuda.driver.major"] = node.driver_version.split(".")[0]
    labels.update(node.extra_labels)
    return labels


def _resources(node: Node, allocatable: bool) -> dict[str, str]:
    itype = node.instance_type
    cpu = itype.cpu if itype else 16
    memory_ki = itype.memory_ki if itype else 64_000_000
    if allocatable:
        out = {
            "cpu": f"{cpu * 1000 - 1930}m" if node.cloud != "azure" else f"{cpu * 1000 - 2100}m",
            "ephemeral-storage": "1879116436666" if itype else "95551679124",
            "memory": f"{memory_ki - 27_000_000 if itype else memory_ki - 3_500_000}Ki",
            "pods": "250" if node.cloud != "azure" else "110",
        }
    else:
        out = {
            "cpu": str(cpu),
            "ephemeral-storage": "2043937152Ki" if itype else "104845292Ki",
            "memory": f"{memory_ki}Ki",
            "pods": "250" if node.cloud != "azure" else "110",
        }
    out["hugepages-1Gi"] = "0"
    out["hugepages-2Mi"] = "0"
    if itype is not None:
        gpus = len(node.gpus)
        if allocatable and node.allocatable_gpus is not None:
            gpus = node.allocatable_gpus
        out["nvidia.com/gpu"] = str(gpus)
        if itype.efa:
            out["vpc.amazonaws.com/efa"] = str(itype.efa)
    return out


def render_node(node: Node, cloud: Cloud, clocks: Clocks) -> dict[str, Any]:
    annotations = {
        "alpha.kubernetes.io/provided-node-ip": node.internal_ip,
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    if cloud.kind == "gce":
        annotations["container.googleapis.com/instance_id"] = node.instance_id
    if cloud.kind == "aws" and node.karpenter:
        annotations["karpenter.sh/nodepool-hash"] = node.machine_id[:19]
    metadata = {
        "annotations": annotations,
        "creationTimestamp": rfc3339(clocks.read(API, node.created_at)),
        "labels": _node_labels(node, cloud),
        "name": node.name,
        "resourceVersion": "",
        "uid": node.uid,
    }
    spec: dict[str, Any] = {"providerID": node.provider_id}
    if node.taints:
        taints = []
        for taint in node.taints:
            item: dict[str, Any] = {"effect": taint.effect, "key": taint.key}
            if taint.value is not None:
                item["value"] = taint.value
            if taint.time_added is not None:
                item["timeAdded"] = rfc3339(clocks.read(API, taint.time_added))
            taints.append(item)
        spec["taints"] = taints
    if node.unschedulable:
        spec["unschedulable"] = True
    if cloud.kind == "gce":
        octet = int(node.internal_ip.split(".")[-1])
        spec["podCIDR"] = f"10.4.{octet}.0/24"
        spec["podCIDRs"] = [spec["podCIDR"]]
    addresses = [{"address": node.internal_ip, "type": "InternalIP"}]
    if cloud.kind == "aws":
        addresses.append({"address": node.name, "type": "InternalDNS"})
    addresses.append({"address": node.name, "type": "Hostname"})
    conditions = []
    for type_ in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
        c = node.conditions[type_]
        conditions.append(
            {
                "lastHeartbeatTime": rfc3339(clocks.read("kubelet", c.last_heartbeat)),
                "lastTransitionTime": rfc3339(clocks.read("kubelet", c.last_transition)),
                "message": c.message,
                "reason": c.reason,
                "status": c.status,
                "type": c.type,
            }
        )
    status = {
        "addresses": addresses,
        "allocatable": _resources(node, allocatable=True),
        "capacity": _resources(node, allocatable=False),
        "conditions": conditions,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": node.boot_id,
            "containerRuntimeVersion": node.runtime_version,
            "kernelVersion": node.kernel_version,
            "kubeProxyVersion": node.kubelet_version,
            "kubeletVersion": node.kubelet_version,
            "machineID": node.machine_id,
            "operatingSystem": "linux",
            "osImage": node.os_image,
            "systemUUID": node.system_uuid,
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


# ---------------------------------------------------------------------------------------------
# events


def _ref(ref: ObjRef) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": ref.kind, "name": ref.name}
    if ref.uid:
        out["uid"] = ref.uid
    if ref.api_version:
        out["apiVersion"] = ref.api_version
    if ref.namespace:
        out["namespace"] = ref.namespace
    if ref.field_path:
        out["fieldPath"] = ref.field_path
    if ref.resource_version is not None:
        out["resourceVersion"] = str(ref.resource_version)
    return out


def event_name(event: KubeEvent) -> str:
    """client-go names events `<object>.<hex of the creation time in ns>`."""
    nanos = event.first * 1000 + (int(event.uid[:4], 16) % 1000)
    return f"{event.ref.name}.{nanos:x}"


def _metadata(event: KubeEvent, index: int, clocks: Clocks) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "creationTimestamp": rfc3339(clocks.read("events", event.first)),
        "name": event_name(event),
        "namespace": event.namespace,
        "resourceVersion": str(event.versions[index].slot),
        "uid": event.uid,
    }
    if event.annotations:
        meta["annotations"] = dict(event.annotations)
    return meta


def event_core(event: KubeEvent, index: int, clocks: Clocks) -> dict[str, Any]:
    """One version of an event as `kubectl get events -o json` (core/v1) shows it."""
    version = event.versions[index]
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "involvedObject": _ref(event.ref),
        "kind": "Event",
        "message": event.message,
        "metadata": _metadata(event, index, clocks),
        "reason": event.reason,
        "reportingComponent": event.component,
        "reportingInstance": event.reporting_instance,
        "type": event.type,
    }
    if event.new_style:
        out["eventTime"] = rfc3339_micro(clocks.read("events", event.first))
        out["firstTimestamp"] = None
        out["lastTimestamp"] = None
        out["source"] = {}
        if version.count > 1:
            out["series"] = {
                "count": version.count,
                "lastObservedTime": rfc3339_micro(clocks.read("events", version.at)),
            }
    else:
        out["count"] = version.count
        out["eventTime"] = None
        out["firstTimestamp"] = rfc3339(clocks.read("events", event.first))
        out["lastTimestamp"] = rfc3339(clocks.read("events", version.at))
        source: dict[str, str] = {"component": event.component}
        if event.host:
            source["host"] = event.host
        out["source"] = source
    if event.action:
        out["action"] = event.action
    if event.related is not None:
        out["related"] = _ref(event.related)
    return out


def event_v1(event: KubeEvent, index: int, clocks: Clocks) -> dict[str, Any]:
    """The same version through events.k8s.io/v1 (`kubectl get events.v1.events.k8s.io`)."""
    version = event.versions[index]
    out: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": _metadata(event, index, clocks),
        "note": event.message,
        "reason": event.reason,
        "regarding": _ref(event.ref),
        "reportingController": event.component,
        "reportingInstance": event.reporting_instance,
        "type": event.type,
    }
    if event.new_style:
        out["eventTime"] = rfc3339_micro(clocks.read("events", event.first))
        if version.count > 1:
            out["series"] = {
                "count": version.count,
                "lastObservedTime": rfc3339_micro(clocks.read("events", version.at)),
            }
    else:
        out["eventTime"] = None
        out["deprecatedCount"] = version.count
        out["deprecatedFirstTimestamp"] = rfc3339(clocks.read("events", event.first))
        out["deprecatedLastTimestamp"] = rfc3339(clocks.read("events", version.at))
        source: dict[str, str] = {"component": event.component}
        if event.host:
            source["host"] = event.host
        out["deprecatedSource"] = source
    if event.action:
        out["action"] = event.action
    if event.related is not None:
        out["related"] = _ref(event.related)
    return out
