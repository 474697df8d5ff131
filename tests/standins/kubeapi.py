"""A local Kubernetes API server stand-in that speaks the real list/watch wire protocol.

The unmodified official ``kubernetes`` client (typed APIs, ``kubernetes.watch.Watch`` and raw
``ApiClient.call_api`` streaming) works against it. It serves core/v1 Events, events.k8s.io/v1
Events (the same stored objects, converted like the real API server does), Pods, Nodes and pod
logs, with one etcd-like resourceVersion counter, paginated lists, watches with history,
bookmarks, compaction (410 Expired), throttling (429), dropped connections and bearer-token auth.

Stdlib only. Run ``python -m tests.standins.kubeapi --help`` for the standalone server.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import copy
import gc
import json
import os
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Self
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from kubernetes.client import Configuration

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

_dumps: Final = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, check_circular=False
).encode
_MAX_BATCH: Final = 4096  # watch events per chunk
_MAX_CHUNK: Final = 1 << 20  # bytes per chunk

# ---------------------------------------------------------------------------------------------
# Time helpers


def rfc3339(when: datetime | str | None = None) -> str:
    """Second-precision RFC 3339 in UTC (``metav1.Time``), e.g. ``2026-03-04T10:00:02Z``."""
    if isinstance(when, str):
        return when
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(when: datetime | str | None = None) -> str:
    """Microsecond RFC 3339 in UTC (``metav1.MicroTime``), e.g. ``2026-03-04T09:58:01.412390Z``."""
    if isinstance(when, str):
        return when
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rfc3339_nano(epoch_ns: int) -> str:
    """Fixed-width nanosecond RFC 3339, as kubelet prefixes log lines with ``timestamps=true``."""
    secs, nanos = divmod(epoch_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{nanos:09d}Z"


def _hex(n: int, rng: random.Random | None = None) -> str:
    return f"{(rng or random).getrandbits(4 * n):0{n}x}"


def _uuid4(rng: random.Random) -> str:
    """A random version-4 UUID string, several times cheaper than ``str(uuid.uuid4())``."""
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


# ---------------------------------------------------------------------------------------------
# Payload builders (shapes as a real cluster returns them; see failures-and-formats.md, B1-B4)

_INSTANCE_TYPES: Final[dict[str, tuple[str, str, int, str, int]]] = {
    # instance type: cpu, memory (Ki), GPUs, nvidia.com/gpu.product, EFA devices
    "p5.48xlarge": ("192", "2097146812Ki", 8, "NVIDIA-H100-80GB-HBM3", 32),
    "p5e.48xlarge": ("192", "2097146812Ki", 8, "NVIDIA-H200", 32),
    "p4d.24xlarge": ("96", "1176341012Ki", 8, "NVIDIA-A100-SXM4-40GB", 4),
    "p4de.24xlarge": ("96", "1176341012Ki", 8, "NVIDIA-A100-SXM4-80GB", 4),
    "g5.48xlarge": ("192", "785933548Ki", 8, "NVIDIA-A10G", 1),
    "m5.2xlarge": ("8", "32386524Ki", 0, "", 0),
}


def node_ip(name: str) -> str:
    """The InternalIP encoded in an EC2 private DNS name (``ip-10-0-1-5...``), else a stable one."""
    match = re.match(r"ip-(\d+)-(\d+)-(\d+)-(\d+)", name)
    if match:
        return ".".join(match.groups())
    h = uuid.uuid5(uuid.NAMESPACE_DNS, name).int
    return f"10.{(h >> 16) & 255}.{(h >> 8) & 255}.{h & 255}"


def pod_uid(namespace: str, name: str) -> str:
    """The stable uid ``make_pod`` gives a pod, which event builders also use by default."""
    return str(uuid.UUID(int=random.Random(f"{namespace}/{name}").getrandbits(128), version=4))


def aws_node_name(index: int, region: str = "us-east-1") -> str:
    """An EC2 private DNS node name for a small integer, e.g. ``ip-10-0-1-5.ec2.internal``."""
    ip = f"ip-10-{(index >> 16) & 255}-{(index >> 8) & 255}-{index & 255}"
    return f"{ip}.ec2.internal" if region == "us-east-1" else f"{ip}.{region}.compute.internal"


def make_node(
    name: str,
    *,
    instance_type: str = "p5.48xlarge",
    zone: str = "us-east-1a",
    ready: str = "True",
    taints: Sequence[Mapping[str, Any]] = (),
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
    instance_id: str | None = None,
    nodegroup: str = "gpu-p5",
    created: datetime | str | None = None,
    heartbeat: datetime | str | None = None,
) -> Obj:
    """An EKS GPU Node as ``GET /api/v1/nodes/{name}`` returns it.

    ``ready`` is the Ready condition status: ``"True"``, ``"False"`` (kubelet reports not
    ready) or ``"Unknown"`` (node lifecycle controller: kubelet stopped posting status).
    """
    cpu, memory, gpus, product, efa = _INSTANCE_TYPES.get(
        instance_type, _INSTANCE_TYPES["p5.48xlarge"]
    )
    region = zone[:-1]
    rng = random.Random(name)
    instance_id = instance_id or f"i-{_hex(17, rng)}"
    created_s = rfc3339(created or datetime.now(UTC) - timedelta(days=3))
    beat = rfc3339(heartbeat)
    node_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": nodegroup,
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": _hex(32, rng),
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.k8s.aws/zone-id": f"use1-az{1 + ord(zone[-1]) - ord('a')}",
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
    }
    if gpus:
        node_labels |= {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.machine": instance_type,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
        }
    node_labels |= labels or {}
    capacity = {"cpu": cpu, "ephemeral-storage": "3708852856Ki", "hugepages-1Gi": "0"}
    capacity |= {"hugepages-2Mi": "0", "memory": memory, "pods": "100"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    if efa:
        capacity["vpc.amazonaws.com/efa"] = str(efa)
    allocatable = dict(capacity)
    allocatable["cpu"] = (
        f"{int(cpu) * 1000 - 1030}m" if int(cpu) > 8 else f"{int(cpu) * 1000 - 80}m"
    )
    allocatable["ephemeral-storage"] = "3416828634305"
    allocatable["memory"] = f"{int(memory[:-2]) - 9000000}Ki"
    spec: Obj = {"providerID": f"aws:///{zone}/{instance_id}"}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    ip = node_ip(name)
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "creationTimestamp": created_s,
            "labels": node_labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": _node_conditions(ready, created_s, beat),
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _hex(32, rng),
                "systemUUID": "ec2" + _hex(5, rng) + "-" + _hex(4, rng) + "-" + _hex(4, rng),
                "bootID": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "kernelVersion": "6.1.134-152.225.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.7.20250428",
                "containerRuntimeVersion": "containerd://1.7.27",
                "kubeletVersion": "v1.31.7-eks-473151a",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def _node_conditions(ready: str, since: str, beat: str) -> list[Obj]:
    rows = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "KubeletReady", "kubelet is posting ready status"),
    ]
    out = []
    for kind, reason, message in rows:
        status = "True" if kind == "Ready" else "False"
        transition = since
        if ready == "Unknown":
            status, reason, message = (
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
            transition = beat
        elif ready == "False" and kind == "Ready":
            status, reason, transition = "False", "KubeletNotReady", beat
            message = (
                "PLEG is not healthy: pleg was last seen active 3m0.512s ago; threshold is 3m0s"
            )
        out.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": beat,
                "lastTransitionTime": transition,
                "reason": reason,
                "message": message,
            }
        )
    return out


def make_pod(
    namespace: str,
    name: str,
    node: str | None,
    labels: Mapping[str, str] | None = None,
    *,
    job: str | None = None,
    replica_type: str = "worker",
    replica_index: int | None = None,
    container: str = "pytorch",
    image: str = "nvcr.io/nvidia/pytorch:24.07-py3",
    gpus: int = 8,
    phase: str = "Running",
    restart_count: int = 0,
    waiting: tuple[str, str] | None = None,
    terminated: Mapping[str, Any] | None = None,
    last_terminated: Mapping[str, Any] | None = None,
    disruption: tuple[str, str] | None = None,
    reason: str | None = None,
    message: str | None = None,
    uid: str | None = None,
    created: datetime | str | None = None,
) -> Obj:
    """A PyTorchJob replica pod (Kubeflow training-operator) as ``GET .../pods/{name}`` returns it.

    The container is running unless ``waiting`` (reason, message) or ``terminated`` (fields of
    ``ContainerStateTerminated``; ``exitCode`` and ``reason`` at least) is given.
    ``last_terminated`` fills ``lastState.terminated``. ``disruption`` (reason, message) adds the
    ``DisruptionTarget`` condition; ``reason``/``message`` set the pod-level status fields.
    """
    match = re.fullmatch(r"(.+)-(master|worker)-(\d+)", name)
    job = job or (match.group(1) if match else name)
    if replica_index is None:
        replica_index = int(match.group(3)) if match else 0
    if match:
        replica_type = match.group(2)
    rng = random.Random(f"{namespace}/{name}")
    rng.getrandbits(128)  # pod_uid(namespace, name)
    uid = uid or pod_uid(namespace, name)
    created_dt = (
        datetime.fromisoformat(created.replace("Z", "+00:00"))
        if isinstance(created, str)
        else created or datetime.now(UTC) - timedelta(hours=1)
    )
    t0 = rfc3339(created_dt)
    t1 = rfc3339(created_dt + timedelta(seconds=1))
    t_run = rfc3339(created_dt + timedelta(seconds=40))
    pod_labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-index": str(replica_index),
        "training.kubeflow.org/replica-type": replica_type,
    }
    if replica_type == "master":
        pod_labels["training.kubeflow.org/job-role"] = "master"
    pod_labels |= labels or {}
    resources = {"cpu": "90", "memory": "1800Gi"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    container_id = f"containerd://{_hex(64, rng)}"
    state: Obj
    running = waiting is None and terminated is None
    if terminated is not None:
        state = {"terminated": _terminated(terminated, container_id, t_run)}
    elif waiting is not None:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    else:
        state = {"running": {"startedAt": t_run}}
    last: Obj = {}
    if last_terminated is not None:
        last_id = container_id if waiting is not None else f"containerd://{_hex(64, rng)}"
        last = {"terminated": _terminated(last_terminated, last_id, t_run)}
    status_row = {
        "name": container,
        "state": state,
        "lastState": last,
        "ready": running,
        "restartCount": restart_count,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{_hex(64, rng)}",
        "started": running,
    }
    if waiting is None or last_terminated is not None:
        status_row["containerID"] = container_id
    unready = {
        "reason": "ContainersNotReady",
        "message": f"containers with unready status: [{container}]",
    }
    conditions: list[Obj] = []
    if node:
        conditions = [
            _cond("PodReadyToStartContainers", "True", t1),
            _cond("Initialized", "True", t1),
            _cond("Ready", "True" if running else "False", t_run, **({} if running else unready)),
            _cond(
                "ContainersReady",
                "True" if running else "False",
                t_run,
                **({} if running else unready),
            ),
            _cond("PodScheduled", "True", t0),
        ]
    else:
        conditions = [
            _cond(
                "PodScheduled",
                "False",
                t0,
                reason="Unschedulable",
                message="0/12 nodes are available: 12 Insufficient nvidia.com/gpu. preemption: "
                "0/12 nodes are available: 12 No preemption victims found for incoming pod.",
            )
        ]
    if disruption is not None:
        conditions.insert(
            0,
            _cond(
                "DisruptionTarget", "True", rfc3339(), reason=disruption[0], message=disruption[1]
            ),
        )
    spec: Obj = {
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {
                "name": f"kube-api-access-{_hex(5, rng)}",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
                    ],
                    "defaultMode": 420,
                },
            },
        ],
        "containers": [
            {
                "name": container,
                "image": image,
                "command": ["torchrun", "--nnodes=4", "--nproc-per-node=8", "train.py"],
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
                "env": [
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "MASTER_PORT", "value": "23456"},
                    {"name": "MASTER_ADDR", "value": f"{job}-master-0"},
                    {"name": "WORLD_SIZE", "value": "4"},
                    {"name": "RANK", "value": str(replica_index + (replica_type == "worker"))},
                    {"name": "PET_NNODES", "value": "4"},
                    {"name": "PET_NPROC_PER_NODE", "value": "8"},
                ],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node:
        spec["nodeName"] = node
    status: Obj = {"phase": phase, "conditions": conditions}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    if node:
        host_ip = node_ip(node)
        pod_ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        status |= {
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": t1,
            "containerStatuses": [status_row],
        }
    status["qosClass"] = "Guaranteed"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": t0,
            "labels": pod_labels,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": job,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{job}")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def _cond(kind: str, status: str, when: str, **extra: str) -> Obj:
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": when,
    } | extra


def _terminated(fields: Mapping[str, Any], container_id: str, started: str) -> Obj:
    out: Obj = {"exitCode": 0, "reason": "Completed"}
    out |= fields
    out.setdefault("startedAt", started)
    out.setdefault("finishedAt", rfc3339())
    out.setdefault("containerID", container_id)
    return out


def _event_name(involved: str, when_ns: int) -> str:
    """``<involved name>.<hex unix nanos>``, as client-go's recorders name events."""
    return f"{involved}.{when_ns:x}"


_name_lock = threading.Lock()
_last_ns = 0


def _unique_ns() -> int:
    global _last_ns
    with _name_lock:
        _last_ns = max(_last_ns + 1, time.time_ns())
        return _last_ns


def _object_ref(
    kind: str, namespace: str, name: str, uid: str | None, api_version: str, field_path: str | None
) -> Obj:
    ref: Obj = {"kind": kind}
    if kind != "Node":
        ref["namespace"] = namespace
    if not uid:  # the kubelet refers to its Node by name; pods get make_pod's uid
        uid = (
            name
            if kind == "Node"
            else pod_uid(namespace, name)
            if kind == "Pod"
            else str(uuid.uuid4())
        )
    ref |= {"name": name, "uid": uid}
    if api_version:
        ref["apiVersion"] = api_version
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def make_core_event(
    namespace: str,
    involved_name: str,
    reason: str,
    message: str,
    *,
    kind: str = "Pod",
    involved_uid: str | None = None,
    type: str = "Normal",
    component: str = "kubelet",
    host: str | None = None,
    field_path: str | None = None,
    first: datetime | str | None = None,
    last: datetime | str | None = None,
    count: int = 1,
    name: str | None = None,
    reporting_instance: str | None = None,
    involved_api_version: str = "v1",
) -> Obj:
    """A core/v1 Event as an old-style recorder (kubelet, controllers) writes it.

    For ``kind="Node"`` the reference has no namespace and its uid is the node name, as the
    kubelet records it; such events live in ``namespace`` (usually ``default``).
    """
    first_s = rfc3339(first)
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": name or _event_name(involved_name, _unique_ns()),
            "namespace": namespace,
            "creationTimestamp": first_s,
        },
        "involvedObject": _object_ref(
            kind,
            namespace,
            involved_name,
            involved_uid,
            "" if kind == "Node" else involved_api_version,
            field_path,
        ),
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": host} if host else {"component": component},
        "firstTimestamp": first_s,
        "lastTimestamp": rfc3339(last) if last else first_s,
        "count": count,
        "type": type,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": reporting_instance if reporting_instance is not None else host or "",
    }


def make_events_v1_event(
    namespace: str,
    regarding_name: str,
    reason: str,
    note: str,
    *,
    kind: str = "Pod",
    regarding_uid: str | None = None,
    type: str = "Normal",
    action: str = "Binding",
    reporting_controller: str = "default-scheduler",
    reporting_instance: str | None = None,
    event_time: datetime | str | None = None,
    series_count: int | None = None,
    series_last_observed: datetime | str | None = None,
    related: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Obj:
    """An events.k8s.io/v1 Event as a new-style recorder (kube-scheduler) writes it."""
    when = rfc3339_micro(event_time)
    event: Obj = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {
            "name": name or _event_name(regarding_name, _unique_ns()),
            "namespace": namespace,
            "creationTimestamp": when[:19] + "Z",
        },
        "eventTime": when,
    }
    if series_count:
        event["series"] = {
            "count": series_count,
            "lastObservedTime": rfc3339_micro(series_last_observed),
        }
    event |= {
        "reportingController": reporting_controller,
        "reportingInstance": reporting_instance or f"{reporting_controller}-ip-10-0-0-10",
        "action": action,
        "reason": reason,
        "regarding": _object_ref(
            kind, namespace, regarding_name, regarding_uid, "" if kind == "Node" else "v1", None
        ),
    }
    if related:
        event["related"] = dict(related)
    event |= {
        "note": note,
        "type": type,
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": None,
        "deprecatedLastTimestamp": None,
    }
    return event


# Conversions between the two Event representations (pkg/apis/events/v1/conversion.go).


def _core_to_events_v1(ev: Obj) -> Obj:
    out: Obj = {"metadata": ev["metadata"], "eventTime": ev.get("eventTime")}
    if ev.get("series"):
        out["series"] = ev["series"]
    for src, dst in (
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    ):
        if ev.get(src):
            out[dst] = ev[src]
    out["regarding"] = ev.get("involvedObject") or {}
    if ev.get("related"):
        out["related"] = ev["related"]
    if ev.get("message"):
        out["note"] = ev["message"]
    if ev.get("type"):
        out["type"] = ev["type"]
    out["deprecatedSource"] = ev.get("source") or {}
    out["deprecatedFirstTimestamp"] = ev.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = ev.get("lastTimestamp")
    if ev.get("count"):
        out["deprecatedCount"] = ev["count"]
    return out


def _events_v1_to_core(ev: Mapping[str, Any]) -> Obj:
    out: Obj = {"metadata": ev.get("metadata", {}), "involvedObject": ev.get("regarding") or {}}
    for src, dst in (("reason", "reason"), ("note", "message")):
        if ev.get(src):
            out[dst] = ev[src]
    out["source"] = ev.get("deprecatedSource") or {}
    out["firstTimestamp"] = ev.get("deprecatedFirstTimestamp")
    out["lastTimestamp"] = ev.get("deprecatedLastTimestamp")
    if ev.get("deprecatedCount"):
        out["count"] = ev["deprecatedCount"]
    if ev.get("type"):
        out["type"] = ev["type"]
    out["eventTime"] = ev.get("eventTime")
    for key in ("series", "action", "related"):
        if ev.get(key):
            out[key] = ev[key]
    out["reportingComponent"] = ev.get("reportingController") or ""
    out["reportingInstance"] = ev.get("reportingInstance") or ""
    return out


def _normalize_core_event(ev: Obj) -> Obj:
    """Fill the fields a real server always returns for a core/v1 Event."""
    for key, default in (
        ("involvedObject", {}),
        ("source", {}),
        ("firstTimestamp", None),
        ("lastTimestamp", None),
        ("eventTime", None),
        ("reportingComponent", ""),
        ("reportingInstance", ""),
    ):
        ev.setdefault(key, default)
    return ev


# ---------------------------------------------------------------------------------------------
# Resources and selectors


@dataclass(frozen=True)
class _View:
    """How one stored resource is served at one API path."""

    name: str
    store: str
    kind: str
    api_version: str
    plural: str
    namespaced: bool
    group: str = ""
    render: Callable[[Obj], Obj] | None = None
    field_aliases: Mapping[str, str] = field(default_factory=dict)
    bookmark_body: Obj = field(default_factory=dict)


_EVENT_ZERO: Final[Obj] = {
    "involvedObject": {},
    "source": {},
    "firstTimestamp": None,
    "lastTimestamp": None,
    "eventTime": None,
    "reportingComponent": "",
    "reportingInstance": "",
}
_NODE_INFO_ZERO: Final = dict.fromkeys(
    [
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
    ],
    "",
)
_VIEWS: Final = {
    v.name: v
    for v in (
        _View(
            "events",
            "events",
            "Event",
            "v1",
            "events",
            True,
            field_aliases={"source": "source.component"},
            bookmark_body=_EVENT_ZERO,
        ),
        _View(
            "events.k8s.io",
            "events",
            "Event",
            "events.k8s.io/v1",
            "events",
            True,
            group="events.k8s.io",
            render=_core_to_events_v1,
            bookmark_body={"eventTime": None, "regarding": {}, "deprecatedSource": {}}
            | {"deprecatedFirstTimestamp": None, "deprecatedLastTimestamp": None},
        ),
        _View(
            "pods",
            "pods",
            "Pod",
            "v1",
            "pods",
            True,
            bookmark_body={"spec": {"containers": None}, "status": {}},
        ),
        _View(
            "nodes",
            "nodes",
            "Node",
            "v1",
            "nodes",
            False,
            bookmark_body={
                "spec": {},
                "status": {
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                    "nodeInfo": _NODE_INFO_ZERO,
                },
            },
        ),
    )
}
_ROUTES: Final = {(v.group, v.plural): v for v in _VIEWS.values()}
_STORES: Final = ("events", "pods", "nodes")


def _view(resource: str) -> _View:
    try:
        return _VIEWS[resource]
    except KeyError:
        raise ValueError(f"unknown resource {resource!r}; one of {sorted(_VIEWS)}") from None


class _BadRequest(Exception):
    """A malformed request parameter (HTTP 400)."""


class _Selector:
    """A parsed fieldSelector plus labelSelector, evaluated against the served representation."""

    def __init__(self, view: _View, field_selector: str, label_selector: str) -> None:
        self.fields: list[tuple[list[str], bool, str]] = []
        for term in filter(None, (t.strip() for t in field_selector.split(","))):
            m = re.fullmatch(r"([^!=]+?)\s*(==|!=|=)\s*(.*)", term)
            if not m:
                raise _BadRequest(
                    f"invalid selector: '{field_selector}'; can't understand '{term}'"
                )
            path = view.field_aliases.get(m.group(1), m.group(1))
            self.fields.append((path.split("."), m.group(2) != "!=", m.group(3)))
        self.labels: list[tuple[str, str, frozenset[str]]] = []
        for term in filter(None, (t.strip() for t in re.split(r",(?![^()]*\))", label_selector))):
            self.labels.append(_parse_label_term(term))
        self.empty = not self.fields and not self.labels
        self.render = view.render if self.fields else None

    def __call__(self, obj: Obj) -> bool:
        if self.empty:
            return True
        if self.render is not None:
            obj = self.render(obj)
        for path, equal, want in self.fields:
            value: Any = obj
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            got = (
                ""
                if value is None
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
            )
            if (got == want) != equal:
                return False
        labels = obj.get("metadata", {}).get("labels") or {}
        for key, op, values in self.labels:
            present = key in labels
            ok = {
                "exists": present,
                "!exists": not present,
                "in": present and labels[key] in values,
                "notin": not present or labels[key] not in values,
            }[op]
            if not ok:
                return False
        return True


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _parse_label_term(term: str) -> tuple[str, str, frozenset[str]]:
    if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
        return m.group(1), m.group(2), frozenset(v.strip() for v in m.group(3).split(","))
    if m := re.fullmatch(r"([^!=\s]+)\s*(==|!=|=)\s*(\S*)", term):
        return m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset([m.group(3)])
    if m := re.fullmatch(r"!\s*(\S+)", term):
        return m.group(1), "!exists", frozenset()
    if re.fullmatch(r"[\w./-]+", term):
        return term, "exists", frozenset()
    raise _BadRequest(f"unable to parse requirement: {term!r}")


# ---------------------------------------------------------------------------------------------
# The store


class _Entry:
    """One change in the watch history."""

    __slots__ = ("lines", "obj", "prev", "rv", "store", "type")

    def __init__(self, rv: int, type_: str, store: str, obj: Obj, prev: Obj | None) -> None:
        self.rv = rv
        self.type = type_
        self.store = store
        self.obj = obj
        self.prev = prev
        self.lines: dict[tuple[str, str], bytes] = {}


def _key(obj: Mapping[str, Any], namespaced: bool) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if namespaced else str(meta["name"])


def _status(
    code: int, reason: str, message: str, details: Obj | None = None, meta: Obj | None = None
) -> Obj:
    """A ``metav1.Status`` failure body."""
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": meta or {}, "status": "Failure"}
    body |= {"message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class Request(NamedTuple):
    """One HTTP request the stand-in received."""

    method: str
    path: str
    query: dict[str, str]


@dataclass
class _Watch:
    """An open watch connection."""

    connection: socket.socket
    drop: str | None = None  # "reset" or "close" once drop_watches() asked for it


class KubeAPI:
    """A Kubernetes API server stand-in on 127.0.0.1 (see the module docstring).

    Use as a context manager or call :meth:`start` / :meth:`stop`. Controls (``create``,
    ``update``, ``delete``, ``compact``, ``drop_watches``, ``throttle``, ``set_log``) are
    thread-safe and take effect at once for lists and open watches.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        token: str | None = "standin-token",
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
    ) -> None:
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._port = port
        self._cond = threading.Condition()
        self._rv = 1
        self._floor = 1  # history holds every change with rv > floor
        self._history: list[_Entry] = []
        self._objects: dict[str, dict[str, Obj]] = {s: {} for s in _STORES}
        self.leases: dict[tuple[str, str], Obj] = {}  # (namespace, name) -> Lease
        self._watches: list[_Watch] = []
        self._logs: dict[tuple[str, str, str, bool], list[tuple[int, str]]] = {}
        self._requests: list[Request] = []
        self._throttle = 0
        self._failing: dict[str, list[int]] = {}  # path suffix -> statuses still to answer
        self._retry_after = 1
        self._stopping = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a background thread."""
        if self._server is not None:
            return self
        self._stopping = False
        self._server = _Server(("127.0.0.1", self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="kubeapi",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End every watch cleanly, close every connection and stop serving."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        server.shutdown()
        server.close_all()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._server is None:
            raise RuntimeError("KubeAPI is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (http server, bearer-token user, one context) and return its path."""
        user: Obj = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": user}],
            "contexts": [
                {
                    "name": "standin",
                    "context": {"cluster": "standin", "user": "standin", "namespace": "default"},
                }
            ],
            "current-context": "standin",
            "preferences": {},
        }
        out = Path(path)
        out.write_text(json.dumps(config, indent=2) + "\n")
        return out

    def client_configuration(self) -> Configuration:
        """A ``kubernetes.client.Configuration`` for this server (not installed as default)."""
        from kubernetes.client import Configuration

        config = Configuration(host=self.url)
        if self.token:
            config.api_key = {"BearerToken": f"Bearer {self.token}"}
        return config

    # -- controls -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        with self._cond:
            return self._rv

    @property
    def requests(self) -> list[Request]:
        """A copy of every request received so far, in order."""
        with self._cond:
            return list(self._requests)

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._cond:
            self._requests.clear()

    def create(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Store a new object (``resource``: events, events.k8s.io, pods or nodes); ADDED."""
        view = _view(resource)
        stored = self._prepare(view, obj)
        with self._cond:
            key = _key(stored, view.namespaced)
            if key in self._objects[view.store]:
                raise ValueError(f'{view.plural} "{stored["metadata"]["name"]}" already exists')
            self._commit([("ADDED", view.store, stored)])
        return copy.deepcopy(self._render(view, stored))

    def update(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Replace a stored object; MODIFIED. Missing uid/creationTimestamp are kept."""
        view = _view(resource)
        stored = self._prepare(view, obj)
        with self._cond:
            old = self._objects[view.store].get(_key(stored, view.namespaced))
            if old is None:
                raise KeyError(f'{view.plural} "{stored["metadata"]["name"]}" not found')
            meta = stored["metadata"]
            meta["uid"] = obj.get("metadata", {}).get("uid") or old["metadata"]["uid"]
            meta["creationTimestamp"] = (
                obj.get("metadata", {}).get("creationTimestamp")
                or old["metadata"]["creationTimestamp"]
            )
            self._commit([("MODIFIED", view.store, stored)])
        return copy.deepcopy(self._render(view, stored))

    def delete(self, resource: str, namespace: str | None, name: str) -> Obj:
        """Delete a stored object; DELETED (carrying the deletion's resourceVersion)."""
        view = _view(resource)
        key = f"{namespace}/{name}" if view.namespaced else name
        with self._cond:
            old = self._objects[view.store].get(key)
            if old is None:
                raise KeyError(f'{view.plural} "{name}" not found')
            gone = dict(old, metadata=dict(old["metadata"]))
            self._commit([("DELETED", view.store, gone)])
        return copy.deepcopy(self._render(view, gone))

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """The stored object as the API serves it (with kind/apiVersion), or None."""
        view = _view(resource)
        with self._cond:
            obj = self._objects[view.store].get(f"{namespace}/{name}" if view.namespaced else name)
        return None if obj is None else copy.deepcopy(self._render(view, obj))

    def compact(self, upto_rv: int | None = None) -> int:
        """Drop watch history up to ``upto_rv`` (default: now); older watches get 410 Expired."""
        with self._cond:
            floor = min(self._rv, self._rv if upto_rv is None else upto_rv)
            if floor > self._floor:
                del self._history[: floor - self._floor]
                self._floor = floor
            return self._floor

    def drop_watches(self, *, reset: bool = True, timeout: float = 5.0) -> int:
        """Abruptly cut every open watch mid-stream, without the final chunk; returns how many.

        ``reset=True`` sends a TCP RST (as a load balancer that drops the flow), ``False``
        a plain FIN. Waits until the server has closed them.
        """
        with self._cond:
            victims = list(self._watches)
            for w in victims:
                w.drop = "reset" if reset else "close"
            self._cond.notify_all()
            self._cond.wait_for(lambda: not any(w in self._watches for w in victims), timeout)
        return len(victims)

    def throttle(self, n: int, retry_after: int = 1) -> None:
        """Answer the next ``n`` requests with 429 TooManyRequests and ``Retry-After``."""
        with self._cond:
            self._throttle = n
            self._retry_after = retry_after

    def fail(self, path_suffix: str, statuses: list[int]) -> None:
        """Answer the next requests whose path ends with ``path_suffix`` with these statuses
        in turn (a 500 on a LIST, a 503 on a pod's /log), then serve them again."""
        with self._cond:
            self._failing[path_suffix] = list(statuses)

    def set_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        text: str,
        previous: bool = False,
        *,
        start: datetime | None = None,
    ) -> None:
        """Register the log of a container (``previous``: its last terminated instance).

        Each line gets a timestamp (1 ms apart from ``start``, default now) for
        ``timestamps=true``.
        """
        base = int((start or datetime.now(UTC)).timestamp() * 1e9)
        lines = [(base + i * 1_000_000, line) for i, line in enumerate(text.splitlines())]
        with self._cond:
            self._logs[(namespace, pod, container, previous)] = lines

    @property
    def watch_count(self) -> int:
        """How many watches are open."""
        with self._cond:
            return len(self._watches)

    def wait_for_watchers(self, n: int, timeout: float = 5.0) -> None:
        """Block until at least ``n`` watches are open; TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._watches) >= n, timeout):
                raise TimeoutError(f"{len(self._watches)} watches open, wanted {n}")

    def firehose(
        self,
        rate_per_s: float,
        duration_s: float,
        nodes: int = 5000,
        *,
        namespace: str = "ml-training",
        keep_events: int = 50_000,
        history: int | None = None,
        seed: bool = False,
    ) -> Firehose:
        """Start a :class:`Firehose` thread of realistic core/v1 events; returns it."""
        return Firehose(
            self,
            rate_per_s,
            duration_s,
            nodes,
            namespace=namespace,
            keep_events=keep_events,
            history=history,
            seed=seed,
        ).start()

    # -- store internals ----------------------------------------------------------------------

    @staticmethod
    def _prepare(view: _View, obj: Mapping[str, Any]) -> Obj:
        stored: Obj = copy.deepcopy(dict(obj))
        stored.pop("kind", None)
        stored.pop("apiVersion", None)
        if view.name == "events.k8s.io":
            stored = _events_v1_to_core(stored)
        if view.store == "events":
            _normalize_core_event(stored)
        meta = stored.setdefault("metadata", {})
        if "name" not in meta:
            raise ValueError("metadata.name is required")
        if view.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        return stored

    def _commit(self, changes: Iterable[tuple[str, str, Obj]]) -> None:
        """Apply changes (type, store, object); the caller holds ``self._cond``."""
        objects, history = self._objects, self._history
        for type_, store, obj in changes:
            self._rv += 1
            meta = obj["metadata"]
            meta["resourceVersion"] = str(self._rv)
            if "uid" not in meta:
                meta["uid"] = str(uuid.uuid4())
            if "creationTimestamp" not in meta:
                meta["creationTimestamp"] = rfc3339()
            key = _key(obj, store != "nodes")
            table = objects[store]
            prev = table.get(key)
            if type_ == "DELETED":
                del table[key]
            else:
                table[key] = obj
            history.append(_Entry(self._rv, type_, store, obj, prev))
        self._cond.notify_all()

    @staticmethod
    def _render(view: _View, obj: Obj, typed: bool = True) -> Obj:
        body = view.render(obj) if view.render else obj
        return {"kind": view.kind, "apiVersion": view.api_version} | body if typed else dict(body)

    def _snapshot(self, store: str, at_rv: int) -> dict[str, Obj]:
        """The objects of ``store`` as they were at ``at_rv``; the caller holds ``self._cond``."""
        table = dict(self._objects[store])
        namespaced = store != "nodes"
        for entry in reversed(self._history[max(0, at_rv - self._floor) :]):
            if entry.store != store:
                continue
            key = _key(entry.obj, namespaced)
            if entry.prev is None:
                table.pop(key, None)
            else:
                table[key] = entry.prev
        return table


# ---------------------------------------------------------------------------------------------
# HTTP


class _Dropped(Exception):
    """The watch was cut by drop_watches()."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: KubeAPI) -> None:
        self.api = api
        self._conns: set[socket.socket] = set()
        self._conn_threads: set[threading.Thread] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name="kubeapi-conn",
            daemon=True,
        )
        with self._conns_lock:
            self._conns.add(request)
            self._conn_threads.add(thread)
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._conns_lock:
                self._conns.discard(request)
                self._conn_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def close_all(self) -> None:
        """Shut every client connection so keep-alive handler threads exit, then join them."""
        with self._conns_lock:
            conns, threads = list(self._conns), list(self._conn_threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-standin/1.31"
    disable_nagle_algorithm = True
    server: _Server

    def version_string(self) -> str:
        """The ``Server`` header, without the Python version."""
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests assert on ``KubeAPI.requests`` instead."""

    def _record(self) -> tuple[str, dict[str, str]]:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        with self.server.api._cond:
            self.server.api._requests.append(Request(self.command, url.path, query))
        return url.path, query

    def do_GET(self) -> None:
        api = self.server.api
        path, query = self._record()
        with api._cond:
            throttled = api._throttle > 0
            authorized = not api.token or self.headers.get("Authorization") == f"Bearer {api.token}"
            if authorized and throttled:
                api._throttle -= 1
            retry_after = api._retry_after
            failure = next(
                (
                    codes.pop(0)
                    for suffix, codes in api._failing.items()
                    if codes and path.endswith(suffix)
                ),
                None,
            )
        try:
            if not authorized:
                self._send_json(401, _status(401, "Unauthorized", "Unauthorized"))
            elif failure is not None:
                reason = {500: "InternalError", 503: "ServiceUnavailable"}.get(failure, "Failure")
                self._send_json(failure, _status(failure, reason, "injected by the test"))
            elif throttled:
                body = _status(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    {"retryAfterSeconds": retry_after},
                )
                self._send_json(429, body, {"Retry-After": str(retry_after)})
            else:
                self._route(path, query)
        except _Dropped:
            self.close_connection = True
        except _BadRequest as exc:
            self._send_json(400, _status(400, "BadRequest", str(exc)))

    def _not_allowed(self) -> None:
        """Writes are not served: tests change state through KubeAPI's controls."""
        self._record()
        self.close_connection = True
        self._send_json(
            405,
            _status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                {},
            ),
        )

    do_DELETE = _not_allowed

    # -- coordination.k8s.io/v1 Leases: enough for leader election ---------------------------

    _LEASES = "/apis/coordination.k8s.io/v1/namespaces/"

    def _lease_path(self, path: str) -> tuple[str, str | None] | None:
        """(namespace, name or None) of a Lease path, else None."""
        if not path.startswith(self._LEASES):
            return None
        parts = path[len(self._LEASES) :].strip("/").split("/")
        if len(parts) == 2 and parts[1] == "leases":
            return parts[0], None
        if len(parts) == 3 and parts[1] == "leases":
            return parts[0], parts[2]
        return None

    def _lease_missing(self, name: str) -> None:
        details = {"name": name, "group": "coordination.k8s.io", "kind": "leases"}
        message = f'leases.coordination.k8s.io "{name}" not found'
        self._send_json(404, _status(404, "NotFound", message, details))

    def _lease_body(self) -> Obj:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def do_POST(self) -> None:
        api = self.server.api
        path, _ = self._record()
        where = self._lease_path(path)
        if where is None or where[1] is not None:
            return self._not_allowed()
        lease = self._lease_body()
        name = lease.get("metadata", {}).get("name", "")
        with api._cond:
            if (where[0], name) in api.leases:
                return self._send_json(
                    409, _status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists', {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
                )  # fmt: skip
            api.leases[(where[0], name)] = stored = self._stored_lease(api, where[0], lease)
        self._send_json(201, stored)

    def do_PUT(self) -> None:
        api = self.server.api
        path, _ = self._record()
        where = self._lease_path(path)
        if where is None or where[1] is None:
            return self._not_allowed()
        lease = self._lease_body()
        namespace, name = where[0], where[1]
        with api._cond:
            held = api.leases.get((namespace, name))
            if held is None:
                return self._lease_missing(name)
            wanted = lease.get("metadata", {}).get("resourceVersion")
            if str(wanted) != held["metadata"]["resourceVersion"]:
                return self._send_json(
                    409, _status(409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been modified; please apply your changes to the latest version and try again', {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
                )  # fmt: skip
            api.leases[(namespace, name)] = stored = self._stored_lease(api, namespace, lease, held)
        self._send_json(200, stored)

    @staticmethod
    def _stored_lease(api: KubeAPI, namespace: str, lease: Obj, held: Obj | None = None) -> Obj:
        api._rv += 1
        meta = dict(lease.get("metadata") or {})
        meta.update(
            namespace=namespace,
            resourceVersion=str(api._rv),
            uid=(held or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()),
            creationTimestamp=(held or {}).get("metadata", {}).get("creationTimestamp")
            or rfc3339(),
        )
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": dict(lease.get("spec") or {}),
        }

    _PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")

    def do_PATCH(self) -> None:
        """PATCH of a node, as the API server answers it: a strategic merge or JSON merge patch
        (for a Node's labels, annotations and taints both merge maps key by key, null deletes,
        and lists are replaced whole), a resourceVersion in the patch that is not the stored one
        a 409 Conflict, MODIFIED to watchers. Other resources and patch types are refused as
        the server would refuse them."""
        api = self.server.api
        path, _ = self._record()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        parts = [p for p in path.split("/") if p]
        if self.headers.get("Authorization") != f"Bearer {api.token}" and api.token:
            return self._send_json(401, _status(401, "Unauthorized", "Unauthorized"))
        if parts[:3] != ["api", "v1", "nodes"] or len(parts) != 4:
            return self._not_allowed()
        if kind not in self._PATCH_TYPES:
            return self._send_json(
                415, _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: {', '.join(self._PATCH_TYPES)}")
            )  # fmt: skip
        try:
            patch = json.loads(body)
        except ValueError as exc:
            return self._send_json(400, _status(400, "BadRequest", f"error decoding patch: {exc}"))
        name = parts[3]
        with api._cond:
            stored = api._objects["nodes"].get(name)
            if stored is None:
                return self._missing(_view("nodes"), name)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            current = stored["metadata"].get("resourceVersion")
            if wanted is not None and str(wanted) != str(current):
                return self._send_json(
                    409, _status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; please apply your changes to the latest version and try again', {"name": name, "kind": "nodes"})
                )  # fmt: skip
            merged = _merge_patch(copy.deepcopy(stored), patch)
            merged["metadata"].pop("resourceVersion", None)
        self._send_json(200, api.update("nodes", merged))

    # -- routing ------------------------------------------------------------------------------

    def _route(self, path: str, query: dict[str, str]) -> None:
        if (lease := self._lease_path(path)) is not None and lease[1] is not None:
            with self.server.api._cond:
                held = self.server.api.leases.get(lease)
            if held is None:
                return self._lease_missing(lease[1])
            return self._send_json(200, held)
        parts = [p for p in path.split("/") if p]
        group = ""
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:3] == ["apis", "events.k8s.io", "v1"]:
            group, rest = "events.k8s.io", parts[3:]
        elif parts == ["version"]:
            self._send_json(
                200,
                {
                    "major": "1",
                    "minor": "31",
                    "gitVersion": "v1.31.7-eks-standin",
                    "platform": "linux/amd64",
                },
            )
            return
        else:
            return self._not_found()
        if rest[:1] == ["watch"]:  # legacy /api/v1/watch/... paths
            rest, query = rest[1:], query | {"watch": "true"}
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        view = _ROUTES.get((group, rest[0])) if rest else None
        if view is None or (namespace is not None and not view.namespaced) or len(rest) > 3:
            return self._not_found()
        if len(rest) == 1:
            if query.get("watch", "").lower() in ("1", "true"):
                return self._watch(view, namespace, query)
            return self._list(view, namespace, query)
        name = rest[1]
        if view.namespaced and namespace is None:
            return self._not_found()
        if len(rest) == 3:
            if view.name == "pods" and rest[2] == "log":
                return self._log(namespace or "", name, query)
            return self._not_found()
        obj = self.server.api.get(view.name, namespace, name)
        if obj is None:
            return self._missing(view, name)
        self._send_json(200, obj)

    def _not_found(self) -> None:
        self._send_json(
            404, _status(404, "NotFound", "the server could not find the requested resource", {})
        )

    def _missing(self, view: _View, name: str) -> None:
        details: Obj = {"name": name}
        if view.group:
            details["group"] = view.group
        details["kind"] = view.plural
        self._send_json(404, _status(404, "NotFound", f'{view.plural} "{name}" not found', details))

    # -- responses ------------------------------------------------------------------------

    def _send(
        self, code: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, code: int, obj: Obj, headers: Mapping[str, str] | None = None) -> None:
        self._send(code, _dumps(obj).encode() + b"\n", "application/json", headers)

    # -- list -----------------------------------------------------------------------------

    def _list(self, view: _View, namespace: str | None, query: dict[str, str]) -> None:
        api = self.server.api
        select = _Selector(view, query.get("fieldSelector", ""), query.get("labelSelector", ""))
        limit = _int_param(query, "limit", 0)
        token = query.get("continue", "")
        expired = ""
        with api._cond:
            if token:
                at_rv, start = _decode_continue(token)
                if at_rv < api._floor:
                    expired = _encode_continue(api._rv, start)
                table = api._snapshot(view.store, at_rv) if not expired else {}
            else:
                at_rv, start = api._rv, ""
                table = dict(api._objects[view.store])
        if expired:
            body = _status(410, "Expired", _CONTINUE_EXPIRED, meta={"continue": expired})
            return self._send_json(410, body)
        prefix = f"{namespace}/" if namespace is not None else ""
        keys = sorted(k for k in table if k >= start and k.startswith(prefix))
        items: list[Obj] = []
        more, remaining = False, 0
        for i, key in enumerate(keys):
            obj = table[key]
            if not select(obj):
                continue
            if limit and len(items) == limit:
                more, remaining = True, len(keys) - i
                break
            items.append(api._render(view, obj, typed=False))
        meta: Obj = {"resourceVersion": str(at_rv)}
        if more:
            meta["continue"] = _encode_continue(at_rv, _key(items[-1], view.namespaced) + "\x00")
            if select.empty:
                meta["remainingItemCount"] = remaining
        body = {
            "kind": f"{view.kind}List",
            "apiVersion": view.api_version,
            "metadata": meta,
            "items": items,
        }
        self._send_json(200, body)

    # -- watch ------------------------------------------------------------------------------

    def _watch(self, view: _View, namespace: str | None, query: dict[str, str]) -> None:
        api = self.server.api
        select = _Selector(view, query.get("fieldSelector", ""), query.get("labelSelector", ""))
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("1", "true")
        initial_events = query.get("sendInitialEvents", "").lower() in ("1", "true")
        timeout = float(_int_param(query, "timeoutSeconds", 0)) or api.watch_timeout
        rv_param = query.get("resourceVersion", "")
        if rv_param and not rv_param.isdigit():
            raise _BadRequest(f"invalid resource version: {rv_param}")
        prefix = f"{namespace}/" if namespace is not None else ""

        def wanted(obj: Obj) -> bool:
            return (not prefix or _key(obj, True).startswith(prefix)) and select(obj)

        self.send_response(200)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sock = self.connection
        me = _Watch(sock)
        out = bytearray()
        with api._cond:
            floor = api._floor
            if rv_param in ("", "0") or initial_events:
                cursor = api._rv
                for key in sorted(api._objects[view.store]):
                    obj = api._objects[view.store][key]
                    if wanted(obj):
                        out += _event_line("ADDED", api._render(view, obj))
                expired = False
            else:
                cursor = int(rv_param)
                expired = cursor < floor
            if not expired:
                api._watches.append(me)
                api._cond.notify_all()
        if initial_events and bookmarks:
            out += self._bookmark(view, cursor, initial_end=True)
        if expired:
            message = f"too old resource version: {cursor} ({floor})"
            out += _event_line("ERROR", _status(410, "Expired", message))
            _send_chunk(sock, out)
            _send_chunk(sock, b"")
            return
        try:
            self._stream(view, me, wanted, cursor, out, timeout, bookmarks)
        finally:
            with api._cond:
                api._watches.remove(me)
                api._cond.notify_all()

    def _stream(
        self,
        view: _View,
        me: _Watch,
        wanted: Callable[[Obj], bool],
        cursor: int,
        out: bytearray,
        timeout: float,
        bookmarks: bool,
    ) -> None:
        api = self.server.api
        sock = me.connection
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + api.bookmark_interval if bookmarks else float("inf")
        while True:
            if out:
                _send_chunk(sock, out)
                out = bytearray()
            with api._cond:
                while api._rv <= cursor and me.drop is None and not api._stopping:
                    now = time.monotonic()
                    if now >= min(deadline, next_bookmark):
                        break
                    api._cond.wait(min(deadline, next_bookmark) - now)
                if me.drop is not None:
                    self._drop(me.drop)
                if api._stopping:
                    break
                if cursor < api._floor:  # compacted while this watch lagged
                    message = f"too old resource version: {cursor} ({api._floor})"
                    out += _event_line("ERROR", _status(410, "Expired", message))
                    break
                start = cursor - api._floor
                batch = api._history[start : start + _MAX_BATCH]
            for entry in batch:
                line = _transition_line(view, entry, wanted)
                if line is not None:
                    out += line
                    if len(out) >= _MAX_CHUNK:
                        _send_chunk(sock, out)
                        out = bytearray()
            if batch:
                cursor = batch[-1].rv
                continue
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_bookmark:
                out += self._bookmark(view, cursor)
                next_bookmark = now + api.bookmark_interval
        if out:
            _send_chunk(sock, out)
        _send_chunk(sock, b"")  # the final zero-length chunk: a clean end of the stream

    @staticmethod
    def _bookmark(view: _View, rv: int, initial_end: bool = False) -> bytes:
        meta: Obj = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _event_line(
            "BOOKMARK",
            {"kind": view.kind, "apiVersion": view.api_version, "metadata": meta}
            | view.bookmark_body,
        )

    def _drop(self, how: str) -> None:
        sock = self.connection
        try:
            if how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # linger 0: the kernel answers with RST, discarding unsent data
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise _Dropped

    # -- logs -----------------------------------------------------------------------------

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        api = self.server.api
        pod = api.get("pods", namespace, name)
        if pod is None:
            return self._missing(_VIEWS["pods"], name)
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = query.get("container", "")
        if not container:
            if len(names) != 1:
                raise _BadRequest(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
                )
            container = names[0]
        if container not in names:
            raise _BadRequest(f"container {container} is not valid for pod {name}")
        previous = query.get("previous", "").lower() in ("1", "true")
        with api._cond:
            log = api._logs.get((namespace, name, container, previous))
        if log is None and previous:
            raise _BadRequest(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        lines = log or []
        if "sinceSeconds" in query:
            cutoff = time.time_ns() - _int_param(query, "sinceSeconds", 0) * 1_000_000_000
            lines = [(ts, text) for ts, text in lines if ts >= cutoff]
        if "tailLines" in query:
            tail = _int_param(query, "tailLines", 0)
            lines = lines[-tail:] if tail else []
        stamps = query.get("timestamps", "").lower() in ("1", "true")
        body = "".join(
            f"{_rfc3339_nano(ts)} {text}\n" if stamps else f"{text}\n" for ts, text in lines
        ).encode()
        if "limitBytes" in query:
            body = body[: _int_param(query, "limitBytes", len(body))]
        self._send(200, body, "text/plain")


_CONTINUE_EXPIRED: Final = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadRequest(f"invalid {name}: {raw!r}") from None
    if value < 0:
        raise _BadRequest(f"{name} must be non-negative")
    return value


def _encode_continue(rv: int, start: str) -> str:
    """A continue token shaped like the real one: base64url JSON of version, rv and start key."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise _BadRequest(f"continue key is not valid: {exc}") from None


def _event_line(type_: str, obj: Obj) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + _dumps(obj).encode() + b"}\n"


def _transition_line(view: _View, entry: _Entry, wanted: Callable[[Obj], bool]) -> bytes | None:
    """The watch event one history entry means for one watcher (selectors move objects in/out)."""
    if entry.store != view.store:
        return None
    type_, obj = entry.type, entry.obj
    if type_ == "MODIFIED":
        now, before = wanted(obj), entry.prev is not None and wanted(entry.prev)
        if not now and not before:
            return None
        if not now:
            type_ = "DELETED"
        elif not before:
            type_ = "ADDED"
    elif not wanted(obj):
        return None
    cache_key = (view.name, type_)
    line = entry.lines.get(cache_key)
    if line is None:
        if type_ != entry.type and type_ == "DELETED" and entry.prev is not None:
            obj = dict(
                entry.prev, metadata=dict(entry.prev["metadata"], resourceVersion=str(entry.rv))
            )
        line = entry.lines[cache_key] = _event_line(type_, KubeAPI._render(view, obj))
    return line


def _send_chunk(sock: socket.socket, data: bytes | bytearray) -> None:
    if data:
        sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
    else:
        sock.sendall(b"0\r\n\r\n")


# ---------------------------------------------------------------------------------------------
# Firehose


_IMAGE: Final = "nvcr.io/nvidia/pytorch:24.07-py3"
_KUBELET_EVENTS: Final[tuple[tuple[str, str, str, bool], ...]] = (
    # reason, type, message, about the container (has a fieldPath)
    ("Pulling", "Normal", f'Pulling image "{_IMAGE}"', True),
    ("Pulled", "Normal", f'Container image "{_IMAGE}" already present on machine', True),
    ("Created", "Normal", "Created container pytorch", True),
    ("Started", "Normal", "Started container pytorch", True),
    ("Killing", "Normal", "Stopping container pytorch", True),
    (
        "BackOff",
        "Warning",
        "Back-off restarting failed container pytorch in pod {pod}_{ns}({pod_uid})",
        True,
    ),
    (
        "Unhealthy",
        "Warning",
        'Readiness probe failed: Get "http://{ip}:8080/healthz": dial tcp {ip}:8080: connect: connection refused',
        True,
    ),
    (
        "FailedMount",
        "Warning",
        'MountVolume.SetUp failed for volume "fsx-data" : rpc error: code = DeadlineExceeded desc = context deadline exceeded',
        False,
    ),
)


def _kubelet_shape(v: Mapping[str, str], reason: str, type_: str, on_container: bool) -> Obj:
    ref = {
        "kind": "Pod",
        "namespace": v["ns"],
        "name": v["pod"],
        "uid": v["pod_uid"],
        "apiVersion": "v1",
    }
    if on_container:
        ref["fieldPath"] = "spec.containers{pytorch}"
    return {
        "metadata": {
            "name": v["name"],
            "namespace": v["ns"],
            "uid": v["uid"],
            "creationTimestamp": v["stamp"],
        },
        "involvedObject": ref,
        "reason": reason,
        "message": v["message"],
        "source": {"component": "kubelet", "host": v["node"]},
        "firstTimestamp": v["stamp"],
        "lastTimestamp": v["stamp"],
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": "kubelet",
        "reportingInstance": v["node"],
    }


def _scheduler_shape(v: Mapping[str, str]) -> Obj:
    """kube-scheduler writes through events.k8s.io: no source, no timestamps, eventTime set."""
    return {
        "metadata": {
            "name": v["name"],
            "namespace": v["ns"],
            "uid": v["uid"],
            "creationTimestamp": v["stamp"],
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": v["ns"],
            "name": v["pod"],
            "uid": v["pod_uid"],
            "apiVersion": "v1",
        },
        "reason": "Scheduled",
        "message": v["message"],
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Normal",
        "eventTime": v["micro"],
        "action": "Binding",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-ip-10-0-0-10",
    }


def _node_controller_shape(v: Mapping[str, str]) -> Obj:
    return {
        "metadata": {
            "name": v["name"],
            "namespace": v["ns"],
            "uid": v["uid"],
            "creationTimestamp": v["stamp"],
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": v["ns"],
            "name": v["pod"],
            "uid": v["pod_uid"],
            "apiVersion": "v1",
        },
        "reason": "NodeNotReady",
        "message": v["message"],
        "source": {"component": "node-controller"},
        "firstTimestamp": v["stamp"],
        "lastTimestamp": v["stamp"],
        "count": 1,
        "type": "Warning",
        "eventTime": None,
        "reportingComponent": "node-controller",
        "reportingInstance": "",
    }


_SHAPE_FIELDS: Final = ("name", "ns", "uid", "stamp", "micro", "pod", "pod_uid", "node", "message")


def _line_format(shape: Callable[[Mapping[str, str]], Obj]) -> str:
    """A %-format of the ADDED watch line of core/v1 events built by ``shape``.

    Rendered once with the generic encoder from marker values, so pre-rendered lines are
    byte-identical to what the watch would serialize itself.
    """
    sample = shape({k: f"\x01{k}\x01" for k in _SHAPE_FIELDS})
    sample["metadata"]["resourceVersion"] = "\x01rv\x01"  # _commit appends it last
    line = _event_line("ADDED", KubeAPI._render(_VIEWS["events"], sample)).decode()
    return re.sub(r"\\u0001(\w+)\\u0001", r"%(\1)s", line.replace("%", "%%"))


class Firehose:
    """A thread creating realistic core/v1 Events at a steady rate (for benchmarks).

    Most changes are new Events (ADDED) from the kubelet, the scheduler (written through
    events.k8s.io, so ``source`` is empty and ``eventTime`` set) and the node lifecycle
    controller about PyTorchJob pods spread over ``nodes`` nodes; about one in ten bumps the
    ``count`` of a recent BackOff Event (MODIFIED), as kubelet aggregation does. Watch history
    is compacted to ``history`` entries and the oldest firehose Events beyond ``keep_events``
    expire silently, so memory stays bounded. ``rate_per_s <= 0`` means as fast as possible.
    ADDED watch lines are pre-rendered from templates, so serving them costs almost nothing.
    """

    def __init__(
        self,
        api: KubeAPI,
        rate_per_s: float,
        duration_s: float,
        nodes: int = 5000,
        *,
        namespace: str = "ml-training",
        keep_events: int = 50_000,
        history: int | None = None,
        seed: bool = False,
    ) -> None:
        self.api = api
        self.rate = rate_per_s
        self.duration = duration_s
        self.namespace = namespace
        self.keep_events = keep_events
        self.history = history or max(100_000, int(rate_per_s * 30))
        self.seed = seed
        self.emitted = 0
        self._stop = threading.Event()
        self._rng = random.Random(0)
        self._nodes = [aws_node_name(i + 256) for i in range(max(1, nodes))]
        self._pods = [
            (f"llm-pretrain-{i // 8:04d}-worker-{i % 8}", _uuid4(self._rng), node)
            for i, node in enumerate(self._nodes)
        ]
        self._shapes: list[tuple[Callable[[Mapping[str, str]], Obj], str, str]] = []
        for reason, type_, message, on_container in _KUBELET_EVENTS:

            def shape(
                v: Mapping[str, str], r: str = reason, t: str = type_, c: bool = on_container
            ) -> Obj:
                return _kubelet_shape(v, r, t, c)

            self._shapes += [(shape, _line_format(shape), message)] * 9  # kubelet: 72 in 80
        self._shapes += [
            (
                _scheduler_shape,
                _line_format(_scheduler_shape),
                "Successfully assigned {ns}/{pod} to {node}",
            )
        ] * 6
        self._shapes += [
            (_node_controller_shape, _line_format(_node_controller_shape), "Node is not ready")
        ] * 2
        self._live: deque[str] = deque()
        self._backoffs: deque[str] = deque(maxlen=512)
        self._thread = threading.Thread(target=self._run, name="kubeapi-firehose", daemon=True)

    def start(self) -> Self:
        """Start the thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop early and wait for the thread."""
        self._stop.set()
        self.join()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to finish."""
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the thread is still emitting."""
        return self._thread.is_alive()

    def _run(self) -> None:
        api = self.api
        if self.seed:
            self._seed()
        t0 = time.monotonic()
        while not self._stop.is_set():
            elapsed = time.monotonic() - t0
            if elapsed >= self.duration:
                break
            due = 2000 if self.rate <= 0 else min(2000, int(self.rate * elapsed) - self.emitted)
            if due <= 0:
                time.sleep(0.005)
                continue
            now = datetime.now(UTC)
            stamp, micro = rfc3339(now), rfc3339_micro(now)
            with api._cond:
                events = api._objects["events"]
                made = [self._change(events, stamp, micro) for _ in range(due)]
                api._commit((type_, "events", obj) for type_, obj, _ in made)
                for entry, (_, _, line) in zip(api._history[-due:], made, strict=True):
                    if line is not None:
                        entry.lines[("events", "ADDED")] = (
                            line[0] % (line[1] | {"rv": entry.rv})
                        ).encode()
                while len(self._live) > self.keep_events:
                    events.pop(self._live.popleft(), None)
                if len(api._history) > 2 * self.history:
                    api.compact(api._rv - self.history)
            self.emitted += due

    def _seed(self) -> None:
        for name, uid, node in self._pods:
            if self._stop.is_set():
                return
            self.api.create("nodes", make_node(node))
            self.api.create("pods", make_pod(self.namespace, name, node, uid=uid))

    def _change(
        self, events: dict[str, Obj], stamp: str, micro: str
    ) -> tuple[str, Obj, tuple[str, dict[str, str]] | None]:
        """One change: (type, object, (line format, its values) for pre-rendering or None)."""
        rng, ns = self._rng, self.namespace
        if rng.random() < 0.1 and self._backoffs:
            key = self._backoffs[int(rng.random() * len(self._backoffs))]
            old = events.get(key)
            if old is not None:
                meta = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
                return (
                    "MODIFIED",
                    old | {"metadata": meta, "count": old["count"] + 1, "lastTimestamp": stamp},
                    None,
                )
        pod, pod_uid, node = self._pods[int(rng.random() * len(self._pods))]
        shape, fmt, message = self._shapes[int(rng.random() * len(self._shapes))]
        name = f"{pod}.{_unique_ns():x}"
        v = {"name": name, "ns": ns, "uid": _uuid4(rng), "stamp": stamp, "micro": micro}
        v |= {"pod": pod, "pod_uid": pod_uid, "node": node}
        if "{" in message:
            message = message.format(pod=pod, ns=ns, pod_uid=pod_uid, node=node, ip=node_ip(node))
        v["message"] = message
        event = shape(v)
        if event["reason"] == "BackOff":
            self._backoffs.append(f"{ns}/{name}")
        self._live.append(f"{ns}/{name}")
        return "ADDED", event, (fmt, v | {"message": _dumps(message)[1:-1]})


# ---------------------------------------------------------------------------------------------
# Command line


def tune_gc() -> None:
    """Stop full cyclic-GC passes in a benchmark process (young generations still run).

    The watch history holds millions of acyclic dicts that refcounting frees; rescanning them
    in full collections otherwise costs more CPU than serving the watch. ``main`` calls this.
    """
    gc.set_threshold(700, 10, 1_000_000)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in in the foreground until SIGINT/SIGTERM.

    Prints one JSON line ``{"url", "port", "pid"}`` once it is serving.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tests.standins.kubeapi", description="A Kubernetes API server stand-in."
    )
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)"
    )
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for this server here")
    parser.add_argument(
        "--token", default="standin-token", help="bearer token to require ('' for none)"
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, help="seconds between BOOKMARKs"
    )
    parser.add_argument(
        "--firehose", type=float, metavar="RATE", help="create this many events per second"
    )
    parser.add_argument(
        "--nodes", type=int, default=5000, help="nodes the firehose spreads pods over"
    )
    parser.add_argument("--duration", type=float, default=float("inf"), help="firehose seconds")
    parser.add_argument(
        "--seed", action="store_true", help="create the firehose's nodes and pods first"
    )
    args = parser.parse_args(argv)
    tune_gc()
    signal.signal(signal.SIGTERM, _interrupt)
    api = KubeAPI(
        port=args.port, token=args.token or None, bookmark_interval=args.bookmark_interval
    )
    with api:
        if args.kubeconfig:
            api.write_kubeconfig(args.kubeconfig)
        hose = (
            api.firehose(args.firehose, args.duration, args.nodes, seed=args.seed)
            if args.firehose is not None
            else None
        )
        print(json.dumps({"url": api.url, "port": api.port, "pid": os.getpid()}), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            if hose is not None:
                hose.stop()
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
