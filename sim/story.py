"""The primitives a scenario is told with: create, schedule, start and end pods; emit events the
way each controller would; change nodes; write kernel lines and GPU faults.

Each primitive does everything Kubernetes itself would do as a side effect (kubelet events with
the right aggregation, pod conditions, snapshots right after a container ends), so a scenario
reads like the incident it describes and cannot forget half of the evidence.
"""

from __future__ import annotations

import random
from typing import Any

from whyjob.sim.clock import MS, SECOND, Clocks
from whyjob.sim.ids import Ids
from whyjob.sim.incident import EventVersion, Incident, KubeEvent, LogLine, ObjRef, Pod, Run
from whyjob.sim.kubectl import render_node, render_pod
from whyjob.sim.world import Node, Taint, World

__all__ = ["Story"]

# Kubelet's container restart back-off: 10 s doubling to 5 min, reset after 10 min of running.
_BACKOFF_START = 10
_BACKOFF_MAX = 300
_BACKOFF_RESET = 600 * SECOND


class Story:
    """One bundle's world, generators, clocks and records, and the verbs that change them."""

    def __init__(
        self,
        world: World,
        rng: random.Random,
        ids: Ids,
        clocks: Clocks,
        incident: Incident,
        *,
        t0: int,
        noise: bool,
    ) -> None:
        self.world = world
        self.rng = rng
        self.ids = ids
        self.clocks = clocks
        self.inc = incident
        self.t0 = t0
        self.noise = noise
        self._events: dict[tuple[Any, ...], KubeEvent] = {}
        self._pulled: set[tuple[str, str]] = set()  # (node, image) already on disk
        self._backoff: dict[str, int] = {}  # pod uid -> current back-off seconds
        self.marking_noise = False  # set while the noise layer writes, so its records are tagged

    # -----------------------------------------------------------------------------------------
    # references

    def pod_ref(self, pod: Pod, *, container: bool = False) -> ObjRef:
        return ObjRef(
            "Pod",
            pod.name,
            pod.namespace,
            pod.uid,
            "v1",
            f"spec.containers{{{pod.container}}}" if container else None,
            pod.created_slot,
        )

    def node_ref(self, node: Node, *, kubelet: bool = False) -> ObjRef:
        """Kubelet refers to its node with uid = node name; controllers use the real uid."""
        return ObjRef(
            "Node", node.name, "", node.name if kubelet else node.uid, "v1" if not kubelet else ""
        )

    # -----------------------------------------------------------------------------------------
    # events

    def event(
        self,
        at: int,
        ref: ObjRef,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        component: str = "kubelet",
        host: str | None = None,
        new_style: bool = False,
        action: str | None = None,
        related: ObjRef | None = None,
        annotations: dict[str, str] | None = None,
        instance: str | None = None,
        namespace: str | None = None,
    ) -> KubeEvent:
        """Record an event, aggregating repeats into UPDATEs of one object as client-go does."""
        namespace = namespace if namespace is not None else (ref.namespace or "default")
        type_ = "Warning" if warning else "Normal"
        key = (ref.uid, ref.field_path, reason, message, component, host, type_, namespace)
        existing = self._events.get(key)
        if existing is not None:
            count = existing.last.count + 1
            existing.versions.append(_version(self.inc, max(at, existing.last.at), count))
            return existing
        if instance is None:
            instance = host or ""
            if component == "default-scheduler":
                instance = f"default-scheduler-{self.world.cloud.control_plane_host}"
        event = KubeEvent(
            namespace=namespace,
            ref=ref,
            reason=reason,
            message=message,
            type=type_,
            component=component,
            host=host,
            reporting_instance=instance,
            uid=self.ids.uid(),
            first=at,
            new_style=new_style,
            action=action,
            related=related,
            annotations=dict(annotations or {}),
            noise=self.marking_noise,
        )
        event.versions.append(_version(self.inc, at, 1))
        self._events[key] = event
        self.inc.events.append(event)
        return event

    def repeat(self, event: KubeEvent, times: list[int]) -> None:
        """Further UPDATEs of an existing event (a watch sees each one)."""
        for at in times:
            event.versions.append(_version(self.inc, at, event.last.count + 1))

    def kubelet_event(
        self, at: int, pod: Pod, reason: str, message: str, *, warning: bool = False
    ) -> KubeEvent:
        assert pod.node is not None
        return self.event(
            at,
            self.pod_ref(pod, container=True),
            reason,
            message,
            warning=warning,
            component="kubelet",
            host=pod.node,
        )

    # -----------------------------------------------------------------------------------------
    # pods

    def create_pod(
        self,
        at: int,
        *,
        name: str,
        namespace: str,
        labels: dict[str, str],
        owner_refs: list[dict[str, Any]],
        spec: dict[str, Any],
        container: str,
        image: str,
        image_id: str,
        qos: str,
        annotations: dict[str, str] | None = None,
        experiment: bool = False,
        rank: str | None = None,
        rank_index: int = 0,
    ) -> Pod:
        pod = Pod(
            name=name,
            namespace=namespace,
            uid=self.ids.uid(),
            created_at=at,
            created_slot=self.inc.versions.slot(at),
            labels=labels,
            annotations=dict(annotations or {}),
            owner_refs=owner_refs,
            spec=spec,
            container=container,
            image=image,
            image_id=image_id,
            qos=qos,
            experiment=experiment,
            rank=rank,
            rank_index=rank_index,
            noise=self.marking_noise,
        )
        self.inc.pods.append(pod)
        return pod

    def schedule(self, pod: Pod, node: Node, at: int) -> None:
        pod.node = node.name
        pod.host_ip = node.internal_ip
        pod.ip = self._pod_ip(node)
        pod.scheduled_at = at
        pod.condition(at, "PodScheduled", "True")
        self.event(
            at,
            self.pod_ref(pod),
            "Scheduled",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node.name}",
            component="default-scheduler",
            new_style=True,
            action="Binding",
        )

    def _pod_ip(self, node: Node) -> str:
        if node.cloud == "gce":
            return f"10.4.{node.internal_ip.split('.')[-1]}.{self.rng.randint(2, 250)}"
        if node.cloud == "azure":
            return f"10.244.{self.rng.randint(0, 63)}.{self.rng.randint(2, 250)}"
        return f"10.0.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}"

    def start(self, pod: Pod, at: int, *, pull_seconds: float | None = None) -> Run:
        """Pull (or find) the image, create and start the container; returns the new run.

        `at` is when the kubelet begins; the run starts once the image is there.
        """
        assert pod.node is not None
        node = self.world.node(pod.node)
        if pod.started_at is None:
            pod.started_at = at
        t = at
        if (node.name, pod.image) in self._pulled:
            self.kubelet_event(
                t, pod, "Pulled", f'Container image "{pod.image}" already present on machine'
            )
        else:
            seconds = pull_seconds if pull_seconds is not None else self.rng.uniform(35, 160)
            self.kubelet_event(t, pod, "Pulling", f'Pulling image "{pod.image}"')
            t += int(seconds * SECOND)
            size = self.rng.randint(9_000_000_000, 24_000_000_000)
            took = _go_duration(seconds)
            self.kubelet_event(
                t,
                pod,
                "Pulled",
                f'Successfully pulled image "{pod.image}" in {took} ({took} including waiting). '
                f"Image size: {size} bytes.",
            )
            self._pulled.add((node.name, pod.image))
        t += self.rng.randint(200, 900) * MS
        self.kubelet_event(t, pod, "Created", f"Created container {pod.container}")
        t += self.rng.randint(100, 600) * MS
        self.kubelet_event(t, pod, "Started", f"Started container {pod.container}")
        restart = len([r for r in pod.runs if not r.pending])
        run = Run(pod=pod, restart=restart, container_id=self.ids.container_id(), started_at=t)
        pod.runs = [r for r in pod.runs if not r.pending]
        pod.runs.append(run)
        pod.waiting = None
        pod.phase = "Running"
        for type_ in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"):
            pod.condition(t, type_, "True")
        return run

    def end_run(
        self,
        run: Run,
        at: int,
        *,
        exit_code: int,
        reason: str,
        message: str | None = None,
        reported_at: int | None = None,
        phase: str | None = None,
        snapshot: bool = True,
    ) -> None:
        """The container exits at true time `at`; the kubelet reports it at `reported_at`."""
        pod = run.pod
        run.true_end = at
        run.finished_at = reported_at if reported_at is not None else at
        run.exit_code = exit_code
        run.reason = reason
        run.message = message
        report = run.finished_at
        pod.condition(
            report,
            "Ready",
            "False",
            "ContainersNotReady" if exit_code else "PodCompleted",
            f"containers with unready status: [{pod.container}]" if exit_code else None,
        )
        pod.condition(
            report,
            "ContainersReady",
            "False",
            "ContainersNotReady" if exit_code else "PodCompleted",
            f"containers with unready status: [{pod.container}]" if exit_code else None,
        )
        if phase is not None:
            pod.phase = phase
        elif exit_code == 0:
            pod.phase = "Succeeded"
        elif pod.spec.get("restartPolicy") == "Never":
            pod.phase = "Failed"
        if pod.phase in ("Succeeded", "Failed"):
            pod.condition(report, "PodReadyToStartContainers", "False")
        if snapshot:
            self.snapshot(pod, report + self.rng.randint(50, 900) * MS)

    def snapshot(self, pod: Pod, at: int) -> None:
        """`kubectl get pod -o json` as a watcher would have stored it at `at`."""
        body = render_pod(pod, self.clocks)
        slot = self.inc.versions.slot(at)
        self.inc.pod_snapshots.append((pod, at, slot, body))
        pod.snapshots += 1

    def back_off(self, pod: Pod, failed_at: int) -> int:
        """CrashLoopBackOff until the next start; returns when the kubelet restarts it."""
        run = pod.last_run
        assert run is not None and run.started_at is not None
        previous = self._backoff.get(pod.uid, 0)
        if run.finished_at is not None and run.finished_at - run.started_at > _BACKOFF_RESET:
            delay = _BACKOFF_START
        else:
            delay = min(_BACKOFF_MAX, previous * 2) if previous else _BACKOFF_START
        self._backoff[pod.uid] = delay
        pod.waiting = (
            "CrashLoopBackOff",
            f"back-off {_go_duration(delay)} restarting failed container={pod.container} "
            f"pod={pod.name}_{pod.namespace}({pod.uid})",
        )
        message = (
            f"Back-off restarting failed container {pod.container} in pod "
            f"{pod.name}_{pod.namespace}({pod.uid})"
        )
        t = failed_at + self.rng.randint(1, 3) * SECOND
        while t < failed_at + delay * SECOND:
            self.kubelet_event(t, pod, "BackOff", message, warning=True)
            t += self.rng.randint(10, 20) * SECOND
        return failed_at + delay * SECOND + self.rng.randint(0, 2) * SECOND

    def delete_pod(self, pod: Pod, at: int, *, grace: int = 30, kill: bool = True) -> int:
        """Graceful deletion: the kubelet sends SIGTERM; returns when the object is gone."""
        if pod.deletion_at is None:
            pod.deletion_at = at
            pod.deletion_grace = grace
        run = pod.last_run
        gone = at + self.rng.randint(2, 6) * SECOND
        if kill and run is not None and run.running and pod.node is not None:
            self.kubelet_event(
                at + self.rng.randint(50, 400) * MS,
                pod,
                "Killing",
                f"Stopping container {pod.container}",
            )
        self.snapshot(pod, at + self.rng.randint(20, 300) * MS)
        pod.deleted_at = gone
        return gone

    # -----------------------------------------------------------------------------------------
    # nodes

    def node_snapshot(self, node: Node, at: int) -> None:
        node.heartbeat(at)
        body = render_node(node, self.world.cloud, self.clocks)
        slot = self.inc.versions.slot(at)
        self.inc.node_snapshots.append((node.name, at, slot, body))

    def cordon(self, node: Node, at: int, *, taint: Taint | None = None) -> None:
        """Mark the node unschedulable (spec.unschedulable and its taint), with an extra taint
        naming who cordoned it when there is one."""
        node.unschedulable = True
        node.add_taint(Taint("node.kubernetes.io/unschedulable", "NoSchedule", at))
        if taint is not None:
            node.add_taint(taint)
        self.event(
            at,
            self.node_ref(node, kubelet=True),
            "NodeNotSchedulable",
            f"Node {node.name} status is now: NodeNotSchedulable",
            host=node.name,
            namespace="default",
        )
        self.node_snapshot(node, at + SECOND)

    def node_lost(self, node: Node, at: int, *, grace: int = 40) -> int:
        """The kubelet stops posting status; the node lifecycle controller notices after
        `grace` seconds, marks every condition Unknown and taints the node unreachable.
        Returns when the node went NotReady."""
        notice = at + grace * SECOND
        for type_ in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
            condition = node.conditions[type_]
            condition.last_heartbeat = min(condition.last_heartbeat, at)
            condition.status = "Unknown"
            condition.reason = "NodeStatusUnknown"
            condition.message = "Kubelet stopped posting node status."
            condition.last_transition = notice
        node.add_taint(Taint("node.kubernetes.io/unreachable", "NoSchedule", notice))
        node.add_taint(Taint("node.kubernetes.io/unreachable", "NoExecute", notice + SECOND))
        self.event(
            notice,
            self.node_ref(node),
            "NodeNotReady",
            f"Node {node.name} status is now: NodeNotReady",
            component="node-controller",
            namespace="default",
        )
        self.inc.node_down.setdefault(node.name, []).append((at, None))
        # The node lifecycle controller marks every pod on the node not ready.
        for pod in self.inc.pods:
            run = pod.last_run
            if (
                pod.node == node.name
                and pod.deleted_at is None
                and run is not None
                and (run.true_end is None or run.true_end > at)
                and not run.pending
            ):
                self.event(
                    notice + SECOND,
                    self.pod_ref(pod),
                    "NodeNotReady",
                    "Node is not ready",
                    warning=True,
                    component="node-controller",
                )
                pod.condition(notice + SECOND, "Ready", "False")
        self.node_snapshot(node, notice + SECOND)
        return notice

    def node_back(self, node: Node, at: int, *, rebooted: bool = True) -> None:
        """The kubelet comes back (after a reboot): new boot id, Ready again."""
        down = self.inc.node_down.get(node.name, [])
        if down and down[-1][1] is None:
            down[-1] = (down[-1][0], at)
        kubelet = self.node_ref(node, kubelet=True)
        if rebooted:
            boot_id = self.ids.boot_id()
            node.reboot(at - self.rng.randint(40, 70) * SECOND, boot_id)
            self.event(
                at, kubelet, "Starting", "Starting kubelet.", host=node.name, namespace="default"
            )
            self.event(
                at + SECOND,
                kubelet,
                "Rebooted",
                f"Node {node.name} has been rebooted, boot id: {boot_id}",
                warning=True,
                host=node.name,
                namespace="default",
            )
        for type_, reason, message in (
            (
                "MemoryPressure",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "KubeletReady", "kubelet is posting ready status"),
        ):
            node.set_condition(
                at + 2 * SECOND, type_, "True" if type_ == "Ready" else "False", reason, message
            )
        node.remove_taint("node.kubernetes.io/unreachable")
        node.remove_taint("node.kubernetes.io/not-ready")
        self.event(
            at + 2 * SECOND,
            kubelet,
            "NodeReady",
            f"Node {node.name} status is now: NodeReady",
            host=node.name,
            namespace="default",
        )
        self.node_snapshot(node, at + 3 * SECOND)

    def delete_node(self, node: Node, at: int, *, component: str = "node-controller") -> None:
        self.node_snapshot(node, at - SECOND)
        node.deleted_at = at
        reason = (
            "DeletingNode" if component == "cloud-node-lifecycle-controller" else "RemovingNode"
        )
        message = (
            f"Deleting node {node.name} because it does not exist in the cloud provider"
            if reason == "DeletingNode"
            else f"Node {node.name} event: Removing Node {node.name} from Controller"
        )
        self.event(
            at, self.node_ref(node), reason, message, component=component, namespace="default"
        )
        down = self.inc.node_down.setdefault(node.name, [])
        if not down or down[-1][1] is not None:
            down.append((at, None))

    def register_node(self, node: Node) -> None:
        """A new node joins: kubelet start-up events and the controller's RegisteredNode."""
        at = node.created_at
        kubelet = self.node_ref(node, kubelet=True)
        self.event(
            at, kubelet, "Starting", "Starting kubelet.", host=node.name, namespace="default"
        )
        for reason in ("NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"):
            self.event(
                at + SECOND,
                kubelet,
                reason,
                f"Node {node.name} status is now: {reason}",
                host=node.name,
                namespace="default",
            )
        self.event(
            at + 2 * SECOND,
            self.node_ref(node),
            "RegisteredNode",
            f"Node {node.name} event: Registered Node {node.name} in Controller",
            component="node-controller",
            namespace="default",
        )
        self.event(
            at + 20 * SECOND,
            kubelet,
            "NodeReady",
            f"Node {node.name} status is now: NodeReady",
            host=node.name,
            namespace="default",
        )

    # -----------------------------------------------------------------------------------------
    # kernel and GPUs

    def kern(self, node: Node | str, at: int, text: str) -> None:
        name = node if isinstance(node, str) else node.name
        self.inc.kern(name, at, text)

    def xid(
        self,
        node: Node,
        gpu_index: int,
        code: int,
        at: int,
        *,
        pid: int | None,
        process: str = "python",
        detail: str,
        identify: bool = True,
    ) -> None:
        """An Xid as the driver logs it (identity lines first), and dcgm's latched gauge."""
        gpu = node.gpu(gpu_index)
        if identify:
            self.kern(node, at, f"NVRM: GPU at PCI:{gpu.pci}: {gpu.uuid}")
            self.kern(node, at, f"NVRM: GPU Board Serial Number: {gpu.serial}")
        who = (
            f"pid={pid}, name={process}, "
            if pid is not None
            else "pid='<unknown>', name=<unknown>, "
        )
        self.kern(node, at, f"NVRM: Xid (PCI:{gpu.pci}): {code}, {who}{detail}")
        self.inc.xids.setdefault((node.name, gpu_index), []).append((at, code))

    def log(self, run: Run, lines: list[LogLine]) -> None:
        run.log.extend(lines)


def _version(incident: Incident, at: int, count: int) -> EventVersion:
    return EventVersion(at, count, incident.versions.slot(at))


def _go_duration(seconds: float) -> str:
    """Go's time.Duration String(): 1m23.456s, 45.2s, 40s."""
    if float(seconds).is_integer() and seconds < 60:
        return f"{int(seconds)}s"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
