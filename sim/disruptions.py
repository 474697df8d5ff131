"""Things that happen *to* a rank from outside its process: host maintenance, spot reclaim,
scale-in, node-pressure eviction, scheduler preemption, a node that stops answering.

Each function writes the whole evidence trail a real incident leaves, in every source that
would hold it (cloud API, Kubernetes events and pod conditions, kernel log), ends the rank's
run with the true category, and returns the root run plus when the job's controller learned of
it. Wording is from the reference (§B2–B12) or the emitting project's source.
"""

from __future__ import annotations

from dataclasses import dataclass

from whyjob.sim.clock import MINUTE, MS, SECOND, imds_ec2, rfc1123, rfc3339
from whyjob.sim.incident import (
    AsgActivity,
    AzureEvent,
    BridgeEvent,
    GceOperation,
    GceUpcoming,
    InstanceEvent,
    ObjRef,
    Run,
)
from whyjob.sim.job import Member, Round
from whyjob.sim.story import Story
from whyjob.sim.world import Node, Taint, asg_arn

__all__ = [
    "Outcome",
    "aws_scheduled_event",
    "aws_spot",
    "azure_preempt",
    "azure_scheduled_event",
    "gce_host_maintenance",
    "gce_preempted",
    "node_not_ready",
    "pressure_eviction",
    "scale_in",
    "scheduler_preemption",
]

_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


@dataclass
class Outcome:
    root: Run
    notice: int  # when the job's controller could first see the rank was gone
    lost_node: bool  # the rank cannot come back on this node


def _nth_annotations(story: Story, node: Node) -> dict[str, str]:
    cloud = story.world.cloud
    return {
        "account-id": cloud.account,
        "availability-zone": node.zone,
        "instance-id": node.instance_id,
        "instance-life-cycle": "spot" if node.capacity_type == "spot" else "on-demand",
        "instance-type": node.instance_type_name,
        "local-hostname": node.name,
        "local-ipv4": node.internal_ip,
        "public-hostname": "",
        "public-ipv4": "",
        "region": node.region,
    }


def _nth_event(story: Story, node: Node, at: int, reason: str, message: str) -> None:
    """NTH in IMDS mode records events on a Node stub (name and namespace only, no uid)."""
    ref = ObjRef("Node", node.name, "default", "", "v1")
    story.event(
        at,
        ref,
        reason,
        message,
        component="aws-node-termination-handler",
        host=node.name,
        annotations=_nth_annotations(story, node),
        namespace="default",
    )


def _evict(story: Story, rnd: Round, member: Member, at: int, *, category: str, note: str) -> Run:
    """Eviction API (drain): DisruptionTarget, then SIGTERM through graceful deletion."""
    member.pod.condition(
        at, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting"
    )
    return rnd.sigterm(member, at + 200 * MS, category=category, note=note, caused_by=None)


def _drain_event(story: Story, node: Node, at: int) -> None:
    _nth_event(story, node, at, "CordonAndDrain", "Node successfully cordoned and drained")


def _health_event(
    story: Story, node: Node, at: int, code: str, start: int, end: int, text: str
) -> None:
    cloud = story.world.cloud
    type_code = {
        "instance-retirement": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "system-maintenance": "AWS_EC2_SYSTEM_MAINTENANCE_EVENT",
        "system-reboot": "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED",
    }[code]
    arn = (
        f"arn:aws:health:{cloud.region}::event/EC2/{type_code}/{type_code}_"
        f"{story.ids.hex(8)}-{story.ids.hex(4)}-{story.ids.hex(4)}"
    )
    story.inc.bridge_events.append(
        BridgeEvent(
            id=story.ids.uid(),
            detail_type="AWS Health Event",
            source="aws.health",
            at=at,
            resources=[node.instance_id],
            detail={
                "eventArn": arn,
                "service": "EC2",
                "eventTypeCode": type_code,
                "eventTypeCategory": "scheduledChange",
                "startTime": rfc1123(story.clocks.read("cloud", start)),
                "endTime": rfc1123(story.clocks.read("cloud", end)),
                "eventDescription": [{"language": "en_US", "latestDescription": text}],
                "affectedEntities": [{"entityValue": node.instance_id}],
            },
        )
    )


# ---------------------------------------------------------------------------------------------
# host maintenance


def aws_scheduled_event(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """An EC2 scheduled event; aws-node-termination-handler drains the node at once."""
    node = story.world.node(member.node)
    code = story.rng.choice(("instance-retirement", "system-maintenance"))
    description = {
        "instance-retirement": "The instance is running on degraded hardware",
        "system-maintenance": "Scheduled system maintenance",
    }[code]
    not_before = at + story.rng.randint(25, 90) * MINUTE
    not_after = not_before + 2 * 60 * MINUTE
    event_id = story.ids.aws_event_id()
    deadline = not_before + 7 * 24 * 60 * MINUTE if code == "system-maintenance" else None
    story.inc.instance_events.append(
        InstanceEvent(
            node.instance_id,
            code,
            description,
            event_id,
            not_before,
            not_after if code == "system-maintenance" else None,
            deadline,
        )
    )
    notice = at - story.rng.randint(20, 200) * SECOND
    _health_event(story, node, notice, code, not_before, not_after, description)
    _nth_event(
        story,
        node,
        at,
        "ScheduledEvent",
        f"{code} will occur between {imds_ec2(story.clocks.read('cloud', not_before))} and "
        f"{imds_ec2(story.clocks.read('cloud', not_after))} because {description}\n",
    )
    story.cordon(
        node,
        at + SECOND,
        taint=Taint(
            "aws-node-termination-handler/scheduled-maintenance",
            "NoSchedule",
            at + SECOND,
            event_id,
        ),
    )
    node.extra_labels["aws-node-termination-handler/action"] = "cordon-and-drain"
    root = _evict(
        story,
        rnd,
        member,
        at + 2 * SECOND,
        category="node.maintenance",
        note=f"EC2 {code} {event_id} on {node.instance_id}; node drained by "
        "aws-node-termination-handler",
    )
    _drain_event(story, node, at + story.rng.randint(25, 60) * SECOND)
    story.node_snapshot(node, at + 70 * SECOND)
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=True)


def gce_host_maintenance(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """TERMINATE_ON_HOST_MAINTENANCE: kubelet's graceful node shutdown ends the pod, the VM
    stops, then restarts on a new host."""
    node = story.world.node(member.node)
    window_start = at + 30 * SECOND
    story.inc.gce_upcoming.append(
        GceUpcoming(
            node.name,
            window_start,
            window_start + story.rng.choice((1, 2, 4)) * 60 * MINUTE,
            window_start + 60 * MINUTE,
            ["PLANNED_UPDATE"],
            "ONGOING",
            type=story.rng.choice(("SCHEDULED", "UNSCHEDULED")),
        )
    )
    node.extra_labels["cloud.google.com/scheduled-maintenance-time"] = str(
        story.clocks.read("cloud", window_start) // SECOND
    )
    node.add_taint(
        Taint("cloud.google.com/impending-node-termination", "NoSchedule", at - 20 * SECOND)
    )
    root = _graceful_shutdown(
        story,
        rnd,
        member,
        at,
        category="node.maintenance",
        note=f"GCE terminateOnHostMaintenance on {node.name}",
    )
    story.inc.gce_operations.append(
        GceOperation(
            id=story.ids.gce_numeric_id(),
            name=f"systemevent-{story.clocks.read('cloud', window_start) // MS}-"
            f"{story.ids.hex(13)}-{story.ids.hex(8)}-{story.ids.hex(8)}",
            op_type="compute.instances.terminateOnHostMaintenance",
            instance=node.name,
            zone=node.zone,
            target_id=node.instance_id,
            at=window_start,
            end=window_start,
            status_message="Instance terminated during Compute Engine maintenance.",
        )
    )
    story.node_lost(node, window_start + 5 * SECOND)
    story.node_back(node, window_start + story.rng.randint(6, 14) * MINUTE)
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=True)


def announce_maintenance(
    story: Story, member: Member, at: int, start: int
) -> tuple[int, int | None]:
    """The cloud announces maintenance of a running rank's host at `at`, for a window opening at
    `start`; nothing happens to the node yet. Returns the window (an Azure event has no end)."""
    node = story.world.node(member.node)
    kind = story.world.cloud.kind
    if kind == "aws":
        end = start + 2 * 60 * MINUTE
        code = story.rng.choice(("system-reboot", "system-maintenance", "instance-retirement"))
        description = {
            "system-reboot": "scheduled reboot",
            "system-maintenance": "Scheduled system maintenance",
            "instance-retirement": "The instance is running on degraded hardware",
        }[code]
        story.inc.instance_events.append(
            InstanceEvent(node.instance_id, code, description, story.ids.aws_event_id(), start,
                          end if code != "instance-retirement" else None)
        )  # fmt: skip
        _health_event(story, node, at, code, start, end, description)
        return start, end if code != "instance-retirement" else None
    if kind == "gce":
        end = start + story.rng.choice((1, 2, 4)) * 60 * MINUTE
        story.inc.gce_upcoming.append(
            GceUpcoming(node.name, start, end, start + 60 * MINUTE, ["PLANNED_UPDATE"], "PENDING")
        )
        node.extra_labels["cloud.google.com/scheduled-maintenance-time"] = str(
            story.clocks.read("cloud", start) // SECOND
        )
        story.node_snapshot(node, at)
        return start, end
    event_id, incarnation = story.ids.upper_uuid(), story.rng.randint(2, 9)
    event_type = story.rng.choice(("Redeploy", "Reboot"))
    for holder in _scale_set_peers(story, node):
        story.inc.azure_events.append(
            AzureEvent(node=holder.name, event_id=event_id, event_type=event_type,
                       status="Scheduled", resources=[node.group_instance], not_before=start,
                       description="Host server is undergoing maintenance.", source="Platform",
                       duration=-1 if event_type == "Redeploy" else 0, incarnation=incarnation)
        )  # fmt: skip
    return start, None


def _graceful_shutdown(
    story: Story, rnd: Round, member: Member, at: int, *, category: str, note: str
) -> Run:
    node = story.world.node(member.node)
    story.event(
        at - 2 * SECOND,
        story.node_ref(node, kubelet=True),
        "Shutdown",
        "Shutdown manager detected shutdown event",
        host=node.name,
        namespace="default",
    )
    member.pod.condition(at, "DisruptionTarget", "True", "TerminationByKubelet", _SHUTDOWN_MESSAGE)
    member.pod.reason = "Terminated"
    member.pod.message = _SHUTDOWN_MESSAGE
    return rnd.sigterm(
        member, at, category=category, note=note, caused_by=None, delete=False, phase="Failed"
    )


def azure_scheduled_event(
    story: Story, rnd: Round, member: Member, at: int, event_type: str | None = None
) -> Outcome:
    """A Platform Reboot/Redeploy: the VM goes down at NotBefore; after it comes back the
    kubelet reports the lost container as exit 255, reason Unknown."""
    node = story.world.node(member.node)
    event_type = event_type or story.rng.choice(("Redeploy", "Reboot"))
    event_id = story.ids.upper_uuid()
    incarnation = story.rng.randint(2, 9)
    for holder in _scale_set_peers(story, node):
        story.inc.azure_events.append(
            AzureEvent(
                node=holder.name,
                event_id=event_id,
                event_type=event_type,
                status="Scheduled",
                resources=[node.group_instance],
                not_before=at,
                description="Host server is undergoing maintenance.",
                source="Platform",
                duration=-1 if event_type == "Redeploy" else 0,
                incarnation=incarnation,
            )
        )
    story.kern(
        node,
        at - 3 * SECOND,
        "reboot: Restarting system" if event_type == "Reboot" else "reboot: Power down",
    )
    story.node_lost(node, at)
    back = at + story.rng.randint(6, 12) * MINUTE
    story.node_back(node, back)
    run = member.run
    run.category = "node.maintenance"
    run.note = f"Azure scheduled event {event_type} {event_id} on {node.group_instance}"
    reported = back + story.rng.randint(3, 9) * SECOND
    restart_never = member.pod.spec.get("restartPolicy") == "Never"
    rnd.end(
        member,
        at,
        exit_code=255,
        reason="Unknown",
        category="node.maintenance",
        note=run.note,
        reported_at=reported,
        phase="Failed" if restart_never else None,
        root=True,
    )
    return Outcome(run, reported, lost_node=False)


def _scale_set_peers(story: Story, node: Node) -> list[Node]:
    """Every VM in a scale set sees the set's events (the reference's filtering trap)."""
    same = [
        n
        for n in story.world.nodes.values()
        if n.group == node.group and n.name != node.name and n.exists_at(story.t0)
    ]
    return [node, *same[:2]]


# ---------------------------------------------------------------------------------------------
# spot


def aws_spot(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """Two-minute spot warning; NTH (IMDS) or Karpenter drains; the instance terminates."""
    node = story.world.node(member.node)
    cloud = story.world.cloud
    terminate_at = at + 120 * SECOND
    arn = f"arn:aws:ec2:{cloud.region}:{cloud.account}:instance/{node.instance_id}"
    story.inc.bridge_events.append(
        BridgeEvent(
            id=story.ids.uid(),
            detail_type="EC2 Spot Instance Interruption Warning",
            source="aws.ec2",
            at=at,
            resources=[arn],
            detail={"instance-id": node.instance_id, "instance-action": "terminate"},
        )
    )
    note = f"EC2 spot interruption of {node.instance_id}"
    if node.karpenter:
        claim = ObjRef(
            "NodeClaim",
            f"{node.group}-{story.ids.k8s_suffix()}",
            "",
            story.ids.uid(),
            "karpenter.sh/v1",
        )
        detect = at + story.rng.randint(2, 9) * SECOND
        message = "Spot interruption warning was triggered"
        for ref in (claim, story.node_ref(node), story.pod_ref(member.pod)):
            story.event(
                detect,
                ref,
                "SpotInterrupted",
                message,
                warning=True,
                component="karpenter",
                namespace=ref.namespace or "default",
            )
        for ref, what in ((claim, "NodeClaim"), (story.node_ref(node), "Node")):
            story.event(
                detect + SECOND,
                ref,
                "TerminatingOnInterruption",
                f"Interruption triggered termination for the {what}",
                warning=True,
                component="karpenter",
                namespace="default",
            )
        story.cordon(
            node,
            detect + SECOND,
            taint=Taint("karpenter.sh/disrupted", "NoSchedule", detect + SECOND),
        )
        root = _evict(
            story,
            rnd,
            member,
            detect + 3 * SECOND,
            category="node.spot_interruption",
            note=note + "; drained by Karpenter",
        )
    else:
        detect = at + story.rng.randint(1, 5) * SECOND
        _nth_event(
            story,
            node,
            detect,
            "SpotInterruption",
            "Spot ITN received. Instance will be interrupted at "
            f"{rfc3339(story.clocks.read('cloud', terminate_at))} \n",
        )
        story.cordon(
            node,
            detect + SECOND,
            taint=Taint(
                "aws-node-termination-handler/spot-itn",
                "NoSchedule",
                detect + SECOND,
                rfc3339(terminate_at).replace(":", "_"),
            ),
        )
        root = _evict(
            story,
            rnd,
            member,
            detect + 2 * SECOND,
            category="node.spot_interruption",
            note=note + "; drained by aws-node-termination-handler",
        )
        _drain_event(story, node, detect + story.rng.randint(20, 50) * SECOND)
    story.inc.bridge_events.append(
        BridgeEvent(
            id=story.ids.uid(),
            detail_type="EC2 Instance State-change Notification",
            source="aws.ec2",
            at=terminate_at,
            resources=[arn],
            detail={"instance-id": node.instance_id, "state": "shutting-down"},
        )
    )
    story.node_lost(node, terminate_at)
    if not node.karpenter:
        _asg_replace(
            story,
            node,
            terminate_at + 35 * SECOND,
            "an instance was taken out of service in response to a EC2 health check "
            "indicating it has been terminated or stopped.",
        )
    story.delete_node(
        node,
        terminate_at + story.rng.randint(60, 150) * SECOND,
        component="cloud-node-lifecycle-controller",
    )
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=True)


def gce_preempted(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    node = story.world.node(member.node)
    root = _graceful_shutdown(
        story,
        rnd,
        member,
        at,
        category="node.spot_interruption",
        note=f"GCE preempted {node.name} (spot)",
    )
    story.inc.gce_operations.append(
        GceOperation(
            id=story.ids.gce_numeric_id(),
            name=f"systemevent-{story.clocks.read('cloud', at) // MS}-{story.ids.hex(13)}-"
            f"{story.ids.hex(8)}-{story.ids.hex(8)}",
            op_type="compute.instances.preempted",
            instance=node.name,
            zone=node.zone,
            target_id=node.instance_id,
            at=at + 2 * SECOND,
            end=at + 2 * SECOND,
            status_message="Instance was preempted.",
        )
    )
    story.node_lost(node, at + 30 * SECOND)
    story.node_back(node, at + story.rng.randint(3, 9) * MINUTE)
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=True)


def azure_preempt(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """Spot eviction with policy Delete: 30 s notice, the VM and then the Node disappear; pod GC
    fails the pod without any word from the kubelet."""
    node = story.world.node(member.node)
    event_id = story.ids.upper_uuid()
    story.inc.azure_events.append(
        AzureEvent(
            node=node.name,
            event_id=event_id,
            event_type="Preempt",
            status="Scheduled",
            resources=[node.group_instance],
            not_before=at + 30 * SECOND,
            description="",
            source="Platform",
            duration=-1,
            incarnation=story.rng.randint(2, 6),
        )
    )
    gone = at + 30 * SECOND
    story.node_lost(node, gone)
    deleted = gone + story.rng.randint(2, 5) * MINUTE
    story.delete_node(node, deleted, component="cloud-node-lifecycle-controller")
    root = _pod_gc(
        story,
        rnd,
        member,
        gone,
        deleted,
        category="node.spot_interruption",
        note=f"Azure Preempt {event_id} on {node.group_instance}",
    )
    return Outcome(root, deleted + 2 * SECOND, lost_node=True)


def _pod_gc(
    story: Story, rnd: Round, member: Member, died: int, deleted: int, *, category: str, note: str
) -> Run:
    """The pod's node is gone: PodGC marks it Failed and deletes it; the container status was
    never updated, so it still reads running."""
    pod = member.pod
    at = deleted + story.rng.randint(20, 40) * SECOND
    pod.condition(at, "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists")
    pod.phase = "Failed"
    run = member.run
    run.category = category
    run.note = note
    run.true_end = died
    run.failed_at = died
    rnd.ended.add(member.index)
    story.inc.roots.append(run)
    story.delete_pod(pod, at + SECOND, grace=0, kill=False)
    return run


# ---------------------------------------------------------------------------------------------
# scale-in


def _asg_replace(story: Story, node: Node, at: int, cause_clause: str) -> None:
    ids = story.ids
    stamp = rfc3339(story.clocks.read("cloud", at))
    subnet = f"subnet-0{ids.hex(16)}"
    story.inc.asg_activities.append(
        AsgActivity(
            activity_id=ids.uid(),
            asg=node.group,
            description=f"Terminating EC2 instance: {node.instance_id}",
            cause=f"At {stamp} {cause_clause}",
            start=at,
            end=at + 3 * MINUTE,
            status="Successful",
            details={"Subnet ID": subnet, "Availability Zone": node.zone},
        )
    )
    new_id = ids.instance_id()
    story.inc.asg_activities.append(
        AsgActivity(
            activity_id=ids.uid(),
            asg=node.group,
            description=f"Launching a new EC2 instance: {new_id}",
            cause=f"At {rfc3339(story.clocks.read('cloud', at + 40 * SECOND))} an instance was launched "
            "in response to an unhealthy instance needing to be replaced.",
            start=at + 42 * SECOND,
            end=at + 42 * SECOND + story.rng.randint(30, 90) * SECOND,
            status="Successful",
            details={"Subnet ID": subnet, "Availability Zone": node.zone},
        )
    )


def scale_in(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """The ASG shrinks and picks this rank's instance: by a desired-capacity change (no drain),
    a lifecycle hook drained by NTH, or cluster-autoscaler's scale-down."""
    node = story.world.node(member.node)
    variant = story.rng.choice(("desired", "lifecycle", "autoscaler"))
    size = story.rng.randint(len(story.world.nodes) // 2 + 2, len(story.world.nodes) + 2)
    ids = story.ids
    subnet = f"subnet-0{ids.hex(16)}"
    if variant == "autoscaler":
        ca = "cluster-autoscaler"
        story.event(
            at,
            story.node_ref(node),
            "ScaleDown",
            "marked the node as toBeDeleted/unschedulable",
            component=ca,
            namespace="default",
        )
        node.add_taint(
            Taint(
                "ToBeDeletedByClusterAutoscaler",
                "NoSchedule",
                at,
                str(story.clocks.read("cloud", at) // SECOND),
            )
        )
        node.unschedulable = True
        pod = member.pod
        status_ref = ObjRef(
            "ConfigMap", "cluster-autoscaler-status", "kube-system", story.ids.uid(), "v1"
        )
        gpu_util = story.rng.choice(("0", "0.125", "0.25"))
        story.event(
            at - SECOND,
            status_ref,
            "ScaleDown",
            f"Scale-down: removing node {node.name}, utilization: {{0.41 0.57 {gpu_util} "
            f"nvidia.com/gpu {gpu_util}}}, pods to reschedule: {pod.namespace}/{pod.name}",
            component=ca,
        )
        story.event(
            at + SECOND,
            story.pod_ref(pod),
            "ScaleDown",
            "deleting pod for node scale down",
            component=ca,
        )
        root = _evict(
            story,
            rnd,
            member,
            at + 2 * SECOND,
            category="node.scale_in",
            note=f"cluster-autoscaler scale-down removed {node.name}",
        )
        terminate = at + story.rng.randint(40, 90) * SECOND
        cause = (
            f"At {rfc3339(story.clocks.read('cloud', terminate))} instance "
            f"{node.instance_id} was taken out of service in response to a user request, "
            f"shrinking the capacity from {size} to {size - 1}."
        )
        notice_at = root.finished_at or terminate
    else:
        t1 = at - story.rng.randint(5, 40) * SECOND
        c1 = rfc3339(story.clocks.read("cloud", t1))
        c2 = rfc3339(story.clocks.read("cloud", t1 + SECOND))
        cause = (
            f"At {c1} a user request update of AutoScalingGroup constraints to min: 0, max: "
            f"{size + 4}, desired: {size - 1} changing the desired capacity from {size} to "
            f"{size - 1}.  At {c2} an instance was taken out of service in response to a "
            f"difference between desired and actual capacity, shrinking the capacity from "
            f"{size} to {size - 1}.  At {c2} instance {node.instance_id} was selected for "
            "termination."
        )
        terminate = at
        if variant == "lifecycle":
            hook = "nth-termination-hook"
            story.inc.bridge_events.append(
                BridgeEvent(
                    id=ids.uid(),
                    detail_type="EC2 Instance-terminate Lifecycle Action",
                    source="aws.autoscaling",
                    at=t1 + 2 * SECOND,
                    resources=[asg_arn(story.world.cloud, node.group)],
                    detail={
                        "LifecycleActionToken": ids.uid(),
                        "AutoScalingGroupName": node.group,
                        "LifecycleHookName": hook,
                        "EC2InstanceId": node.instance_id,
                        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
                        "Origin": "AutoScalingGroup",
                        "Destination": "EC2",
                    },
                )
            )
            _nth_event(
                story,
                node,
                at,
                "ASGLifecycle",
                "ASG Lifecycle Termination event received. Instance will be interrupted "
                f"at {_go_time(story.clocks.read('cloud', t1 + 2 * SECOND))} \n",
            )
            story.cordon(
                node,
                at + SECOND,
                taint=Taint(
                    "aws-node-termination-handler/asg-lifecycle-termination",
                    "NoSchedule",
                    at + SECOND,
                    ids.hex(24),
                ),
            )
            root = _evict(
                story,
                rnd,
                member,
                at + 2 * SECOND,
                category="node.scale_in",
                note=f"ASG {node.group} scale-in terminated {node.instance_id}; "
                "drained by aws-node-termination-handler",
            )
            _drain_event(story, node, at + 30 * SECOND)
            terminate = at + story.rng.randint(60, 120) * SECOND
            notice_at = root.finished_at or terminate
        else:
            root = member.run  # ended below by pod GC
            notice_at = 0
    story.inc.asg_activities.append(
        AsgActivity(
            activity_id=ids.uid(),
            asg=node.group,
            description=f"Terminating EC2 instance: {node.instance_id}",
            cause=cause,
            start=terminate,
            end=terminate + story.rng.randint(60, 240) * SECOND,
            status="Successful",
            details={"Subnet ID": subnet, "Availability Zone": node.zone},
        )
    )
    story.node_lost(node, terminate + 15 * SECOND)
    deleted = terminate + story.rng.randint(90, 200) * SECOND
    story.delete_node(node, deleted, component="cloud-node-lifecycle-controller")
    if variant == "desired":
        root = _pod_gc(
            story,
            rnd,
            member,
            terminate + 15 * SECOND,
            deleted,
            category="node.scale_in",
            note=f"ASG {node.group} scale-in terminated {node.instance_id} (no drain)",
        )
        notice_at = deleted + 2 * SECOND
    return Outcome(root, notice_at, lost_node=True)


def _go_time(us: int) -> str:
    """Go's time.Time String(): `2022-07-17 20:20:42.702 +0000 UTC`."""
    text = rfc3339(us).replace("T", " ").replace("Z", "")
    return f"{text}.{(us // MS) % 1000:03d} +0000 UTC"


# ---------------------------------------------------------------------------------------------
# kubelet and scheduler


def pressure_eviction(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """kubelet hard eviction under memory or disk pressure: SIGKILL, pod Failed/Evicted."""
    node = story.world.node(member.node)
    pod = member.pod
    exp = story.world.experiment
    resource = story.rng.choice(("memory", "memory", "ephemeral-storage"))
    kubelet = story.node_ref(node, kubelet=True)
    if resource == "memory":
        node.set_condition(
            at - 20 * SECOND,
            "MemoryPressure",
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
        node.add_taint(Taint("node.kubernetes.io/memory-pressure", "NoSchedule", at - 19 * SECOND))
        story.event(
            at - 20 * SECOND,
            kubelet,
            "NodeHasInsufficientMemory",
            f"Node {node.name} status is now: NodeHasInsufficientMemory",
            host=node.name,
            namespace="default",
        )
        using = int(exp.memory_request_gi * story.rng.uniform(1.3, 1.9) * 1024 * 1024)
        message = (
            f"The node was low on resource: memory. Threshold quantity: 100Mi, available: "
            f"{story.rng.randint(20000, 99000)}Ki. Container {pod.container} was using "
            f"{using}Ki, request is {exp.memory_request_gi}Gi, has larger consumption of "
            "memory. "
        )
        condition, recover = (
            "MemoryPressure",
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                "NodeHasSufficientMemory",
            ),
        )
    else:
        node.set_condition(
            at - 20 * SECOND,
            "DiskPressure",
            "True",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
        )
        node.add_taint(Taint("node.kubernetes.io/disk-pressure", "NoSchedule", at - 19 * SECOND))
        story.event(
            at - 20 * SECOND,
            kubelet,
            "NodeHasDiskPressure",
            f"Node {node.name} status is now: NodeHasDiskPressure",
            host=node.name,
            namespace="default",
        )
        using = story.rng.randint(900, 1700) * 1024 * 1024
        message = (
            f"The node was low on resource: ephemeral-storage. Threshold quantity: "
            f"204387430Ki, available: {story.rng.randint(150_000_000, 200_000_000)}Ki. "
            f"Container {pod.container} was using {using}Ki, request is 0, has larger "
            "consumption of ephemeral-storage. "
        )
        condition, recover = (
            "DiskPressure",
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"),
        )
    story.event(
        at - 5 * SECOND,
        kubelet,
        "EvictionThresholdMet",
        f"Attempting to reclaim {resource}",
        warning=True,
        host=node.name,
        namespace="default",
    )
    story.node_snapshot(node, at - 4 * SECOND)
    story.kubelet_event(at, pod, "Evicted", message, warning=True)
    story.kubelet_event(at + 100 * MS, pod, "Killing", f"Stopping container {pod.container}")
    pod.condition(at, "DisruptionTarget", "True", "TerminationByKubelet", message)
    pod.reason = "Evicted"
    pod.message = message
    root = rnd.end(
        member,
        at + 2 * SECOND,
        exit_code=137,
        reason="Error",
        category="node.eviction",
        note=f"kubelet evicted the pod under {condition} ({resource})",
        phase="Failed",
        root=True,
    )
    back = at + story.rng.randint(2, 6) * MINUTE
    reason, text, event_reason = recover
    node.set_condition(back, condition, "False", reason, text)
    node.remove_taint("node.kubernetes.io/memory-pressure")
    node.remove_taint("node.kubernetes.io/disk-pressure")
    story.event(
        back,
        kubelet,
        event_reason,
        f"Node {node.name} status is now: {event_reason}",
        host=node.name,
        namespace="default",
    )
    story.node_snapshot(node, back + SECOND)
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=False)


def scheduler_preemption(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """A higher-priority pod from another team needs the node; the scheduler evicts the rank."""
    from whyjob.sim.podspec import simple_spec

    node = story.world.node(member.node)
    pod = member.pod
    gpus = len(node.gpus)
    preemptor = story.create_pod(
        at - 3 * SECOND,
        name=f"llm-serve-{story.ids.k8s_suffix(10)}-{story.ids.k8s_suffix()}",
        namespace="inference",
        labels={"app": "llm-serve", "pod-template-hash": story.ids.k8s_suffix(10)},
        owner_refs=[
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": "llm-serve",
                "uid": story.ids.uid(),
            }
        ],
        spec=simple_spec(
            container="server",
            image="nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3",
            sa_suffix=story.ids.k8s_suffix(),
            cpu="32",
            memory="256Gi",
            gpus=gpus,
            priority=1000000,
            priority_class="production-critical",
        ),
        container="server",
        image="nvcr.io/nvidia/tritonserver:24.12-trtllm-python-py3",
        image_id=f"nvcr.io/nvidia/tritonserver@{story.ids.sha256()}",
        qos="Guaranteed",
    )
    story.event(
        at,
        story.pod_ref(pod),
        "Preempted",
        f"Preempted by pod {preemptor.uid} on node {node.name}",
        component="default-scheduler",
        new_style=True,
        action="Preempting",
        related=story.pod_ref(preemptor),
    )
    pod.condition(
        at,
        "DisruptionTarget",
        "True",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    root = rnd.sigterm(
        member,
        at + 300 * MS,
        category="pod.preempted",
        note=f"preempted by inference/{preemptor.name} (priority 1000000)",
        caused_by=None,
    )
    assert pod.deleted_at is not None
    story.schedule(preemptor, node, pod.deleted_at + 2 * SECOND)
    story.start(preemptor, pod.deleted_at + 3 * SECOND)
    assert root.finished_at is not None
    return Outcome(root, root.finished_at, lost_node=True)


def node_not_ready(story: Story, rnd: Round, member: Member, at: int) -> Outcome:
    """The node hangs and stops reporting; taint eviction marks the pod for deletion after
    300 s; when the node reboots the kubelet finds the container gone."""
    node = story.world.node(member.node)
    pod = member.pod
    if story.rng.random() < 0.5:
        for i in range(3):
            story.kern(
                node,
                at - (90 - 30 * i) * SECOND,
                f"watchdog: BUG: soft lockup - CPU#{story.rng.randint(0, 95)} stuck for "
                f"{story.rng.randint(22, 26)}s! [python:{story.rng.randint(20000, 90000)}]",
            )
    else:
        for i in range(2):
            story.kern(
                node,
                at - (120 - 60 * i) * SECOND,
                f"INFO: task kworker/u{story.rng.choice((192, 384))}:"
                f"{story.rng.randint(1, 9)}:{story.rng.randint(300, 9000)} blocked for more "
                f"than {122 + 61 * i} seconds.",
            )
            story.kern(
                node,
                at - (120 - 60 * i) * SECOND,
                f"      Tainted: P           OE     {node.kernel_version} #1",
            )
            story.kern(
                node,
                at - (120 - 60 * i) * SECOND,
                '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
            )
    notice = story.node_lost(node, at)
    evict_at = notice + 300 * SECOND
    story.event(
        evict_at,
        story.pod_ref(pod),
        "TaintManagerEviction",
        f"Marking for deletion Pod {pod.namespace}/{pod.name}",
        component="taint-eviction-controller",
    )
    pod.condition(
        evict_at,
        "DisruptionTarget",
        "True",
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    pod.deletion_at = evict_at
    pod.deletion_grace = 30
    story.snapshot(pod, evict_at + SECOND)
    back = at + story.rng.randint(14, 26) * MINUTE
    story.node_back(node, back)
    root = rnd.end(
        member,
        at,
        exit_code=137,
        reason="ContainerStatusUnknown",
        message="The container could not be located when the pod was terminated",
        category="node.not_ready",
        note=f"{node.name} stopped reporting (kubelet stopped posting node status)",
        reported_at=back + 5 * SECOND,
        phase="Failed",
        root=True,
        timestamps=False,
    )
    story.delete_pod(pod, back + 8 * SECOND, grace=0, kill=False)
    return Outcome(root, evict_at + 2 * SECOND, lost_node=True)
