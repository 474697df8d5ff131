"""Everything else happening on the cluster while the experiment runs.

Real bundles are mostly about other things: another team's pod OOMKilled on another node, image
pulls hitting a rate limit, an application Xid on a GPU nobody in this experiment uses, an ASG
scaling out, a memory-pressure blip on one of the experiment's own nodes an hour before the
incident. A diagnosis that blames any of these is wrong, and the simulator's job is to make
that mistake possible. All of it is drawn from its own generator, so turning noise off leaves
the experiment's story byte-for-byte the same apart from the records removed.
"""

from __future__ import annotations

import random

from whyjob.sim import logs
from whyjob.sim.clock import HOUR, MINUTE, MS, SECOND, rfc3339
from whyjob.sim.ids import Ids
from whyjob.sim.incident import (
    AsgActivity,
    AzureEvent,
    BridgeEvent,
    GceOperation,
    InstanceEvent,
    LogLine,
    ObjRef,
)
from whyjob.sim.podspec import simple_spec
from whyjob.sim.story import Story
from whyjob.sim.world import Node, World, make_node, make_pool

__all__ = ["add_noise", "add_noise_nodes"]


def add_noise_nodes(world: World, rng: random.Random, ids: Ids, t0: int) -> None:
    """Other node groups: a second GPU pool and a few CPU nodes, plus one that joins later."""
    cloud = world.cloud
    gpu_pool = make_pool(cloud, rng, ids, gpu=True, suffix="2")
    cpu_pool = make_pool(cloud, rng, ids, gpu=False)
    for _ in range(rng.randint(2, 4)):
        created = t0 - rng.randint(2 * 60, 20 * 24 * 60) * MINUTE
        world.add(make_node(cloud, gpu_pool, rng, ids, created_at=created, noise=True))
    for _ in range(rng.randint(1, 3)):
        created = t0 - rng.randint(6 * 60, 30 * 24 * 60) * MINUTE
        world.add(make_node(cloud, cpu_pool, rng, ids, created_at=created, noise=True))
    late = make_node(
        cloud, gpu_pool, rng, ids, created_at=t0 + rng.randint(20, 70) * MINUTE, noise=True
    )
    late.extra_labels["whyjob.sim/late"] = "true"
    world.add(late)


def add_noise(story: Story) -> None:
    """Write the other tenants' activity into the incident (story.rng is the noise generator)."""
    story.marking_noise = True
    world = story.world
    noise_nodes = [n for n in world.nodes.values() if n.noise]
    gpu_nodes = [n for n in noise_nodes if n.has_gpus and n.created_at <= story.t0]
    cpu_nodes = [n for n in noise_nodes if not n.has_gpus]
    late = [n for n in noise_nodes if n.extra_labels.pop("whyjob.sim/late", None)]
    start = story.t0 - 2 * HOUR
    end = max(story.inc.end, story.t0 + HOUR)
    if len(gpu_nodes) >= 2:
        _other_experiment(story, gpu_nodes[:2], start)
    if len(gpu_nodes) >= 3:
        _oom_batch_job(story, gpu_nodes[2], start, end)
    if cpu_nodes:
        _inference(story, cpu_nodes, start)
        _rate_limited_pull(story, cpu_nodes[-1], start, end)
    for node in gpu_nodes:
        _app_xids(story, node, start, end)
    _own_node_noise(story)
    for node in late:
        story.register_node(node)
        _scale_out(story, node)
    _cloud_noise(story, noise_nodes, start, end)
    for node in world.nodes.values():
        _ordinary_kernel(story, node, start, end)
    story.marking_noise = False


# ---------------------------------------------------------------------------------------------
# pods


def _other_experiment(story: Story, nodes: list[Node], start: int) -> None:
    """Another team's healthy PyTorchJob: a second experiment the explainer must not merge."""
    name = story.rng.choice(("bert-large-ft", "whisper-med-asr", "sd-xl-lora", "clip-vit-l"))
    namespace = story.rng.choice(("nlp-apps", "speech", "genai-lab"))
    image = "nvcr.io/nvidia/pytorch:24.10-py3"
    job_uid = story.ids.uid()
    created = start - story.rng.randint(5, 100) * MINUTE
    for index, node in enumerate(nodes):
        kind, replica = ("master", 0) if index == 0 else ("worker", index - 1)
        pod = story.create_pod(
            created + index * 150 * MS,
            name=f"{name}-{kind}-{replica}",
            namespace=namespace,
            labels={
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-index": str(replica),
                "training.kubeflow.org/replica-type": kind,
            },
            owner_refs=[
                {
                    "apiVersion": "kubeflow.org/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "PyTorchJob",
                    "name": name,
                    "uid": job_uid,
                }
            ],
            spec=simple_spec(
                container="pytorch",
                image=image,
                sa_suffix=story.ids.k8s_suffix(),
                cpu="32",
                memory="256Gi",
                gpus=len(node.gpus),
                restart_policy="OnFailure",
                command=["torchrun", f"--nproc-per-node={len(node.gpus)}", "finetune.py"],
            ),
            container="pytorch",
            image=image,
            image_id=f"nvcr.io/nvidia/pytorch@{story.ids.sha256()}",
            qos="Burstable",
        )
        story.schedule(pod, node, pod.created_at + SECOND)
        run = story.start(pod, pod.created_at + 2 * SECOND)
        assert run.started_at is not None
        voice = logs.Voice(
            host=pod.name,
            node_rank=index,
            nproc=len(node.gpus),
            world=len(nodes) * len(node.gpus),
            framework="hf",
            script="finetune.py",
            ip=pod.ip or "10.0.0.9",
            network="socket",
            rng=story.rng,
        )
        story.log(run, logs.startup_lines(voice, run.started_at))
        if index == 0:
            t = run.started_at + 3 * MINUTE
            for step in range(50, 50 * 12, 50):
                story.log(
                    run,
                    [
                        logs.progress_line(
                            t, "hf", step, 20000, 3.1 - step / 1000, 2100.0, voice.world
                        )
                    ],
                )
                t += story.rng.randint(90, 150) * SECOND


def _oom_batch_job(story: Story, node: Node, start: int, end: int) -> None:
    """team-vision's preprocessing pod, OOMKilled on a node the experiment never touches."""
    name = "imagenet-shard-prep"
    job_uid = story.ids.uid()
    created = start + story.rng.randint(10, 60) * MINUTE
    image = "python:3.11-slim"
    pod = story.create_pod(
        created,
        name=f"{name}-{story.ids.k8s_suffix()}",
        namespace="team-vision",
        labels={
            "batch.kubernetes.io/controller-uid": job_uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": job_uid,
            "job-name": name,
        },
        owner_refs=[
            {
                "apiVersion": "batch/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "Job",
                "name": name,
                "uid": job_uid,
            }
        ],
        spec=simple_spec(
            container="prep",
            image=image,
            sa_suffix=story.ids.k8s_suffix(),
            cpu="8",
            memory="32Gi",
            gpus=1,
            restart_policy="Never",
            command=["python", "prep.py"],
        ),
        container="prep",
        image=image,
        image_id=f"docker.io/library/python@{story.ids.sha256()}",
        qos="Guaranteed",
    )
    job_ref = ObjRef("Job", name, "team-vision", job_uid, "batch/v1")
    story.event(
        created, job_ref, "SuccessfulCreate", f"Created pod: {pod.name}", component="job-controller"
    )
    story.schedule(pod, node, created + SECOND)
    run = story.start(pod, created + 2 * SECOND)
    assert run.started_at is not None
    story.log(
        run,
        [
            LogLine(
                run.started_at + 4 * SECOND,
                "stdout",
                "loading shard index from /data/imagenet/index.parquet",
            )
        ],
    )
    died = min(end - MINUTE, run.started_at + story.rng.randint(8, 50) * MINUTE)
    pid = story.rng.randint(12_000, 98_000)
    memcg = f"/kubepods/pod{pod.uid}/{run.container_id.removeprefix('containerd://')}"
    story.kern(
        node,
        died,
        "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-997",
    )
    story.kern(
        node,
        died,
        f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset="
        f"{run.container_id[-64:]},mems_allowed=0-1,oom_memcg={memcg},task_memcg={memcg},"
        f"task=python,pid={pid},uid=0",
    )
    story.kern(
        node,
        died,
        f"Memory cgroup out of memory: Killed process {pid} (python) total-vm:"
        "35871244kB, anon-rss:33521664kB, file-rss:10240kB, shmem-rss:0kB, UID:0 "
        "pgtables:66012kB oom_score_adj:-997",
    )
    run.category = "container.oom_killed"
    story.end_run(run, died + SECOND, exit_code=137, reason="OOMKilled", phase="Failed")
    story.event(
        died + 5 * SECOND,
        job_ref,
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
        warning=True,
        component="job-controller",
    )


def _inference(story: Story, nodes: list[Node], start: int) -> None:
    rs = story.ids.k8s_suffix(10)
    image = "ghcr.io/huggingface/text-embeddings-inference:cpu-1.5"
    for node in nodes[:2]:
        created = start - story.rng.randint(10, 110) * MINUTE
        pod = story.create_pod(
            created,
            name=f"embeddings-api-{rs}-{story.ids.k8s_suffix()}",
            namespace="inference",
            labels={"app": "embeddings-api", "pod-template-hash": rs},
            owner_refs=[
                {
                    "apiVersion": "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "ReplicaSet",
                    "name": f"embeddings-api-{rs}",
                    "uid": story.ids.uid(),
                }
            ],
            spec=simple_spec(
                container="server",
                image=image,
                sa_suffix=story.ids.k8s_suffix(),
                cpu="4",
                memory="8Gi",
            ),
            container="server",
            image=image,
            image_id=f"ghcr.io/huggingface/text-embeddings-inference@{story.ids.sha256()}",
            qos="Guaranteed",
        )
        story.schedule(pod, node, created + SECOND)
        story.start(pod, created + 2 * SECOND)
        t = start + story.rng.randint(5, 90) * MINUTE
        probe = story.kubelet_event(
            t,
            pod,
            "Unhealthy",
            f'Readiness probe failed: Get "http://{pod.ip}:8080/health": context deadline '
            "exceeded (Client.Timeout exceeded while awaiting headers)",
            warning=True,
        )
        story.repeat(probe, [t + k * 10 * SECOND for k in range(1, story.rng.randint(2, 6))])


def _rate_limited_pull(story: Story, node: Node, start: int, end: int) -> None:
    image = "docker.io/library/redis:7.4-alpine"
    created = start + story.rng.randint(30, 100) * MINUTE
    created = min(created, end - 10 * MINUTE)
    pod = story.create_pod(
        created,
        name="feature-cache-0",
        namespace="data-eng",
        labels={
            "app": "feature-cache",
            "apps.kubernetes.io/pod-index": "0",
            "statefulset.kubernetes.io/pod-name": "feature-cache-0",
        },
        owner_refs=[
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "StatefulSet",
                "name": "feature-cache",
                "uid": story.ids.uid(),
            }
        ],
        spec=simple_spec(
            container="redis", image=image, sa_suffix=story.ids.k8s_suffix(), cpu="1", memory="2Gi"
        ),
        container="redis",
        image=image,
        image_id=f"docker.io/library/redis@{story.ids.sha256()}",
        qos="Guaranteed",
    )
    story.schedule(pod, node, created + SECOND)
    t = created + 2 * SECOND
    story.kubelet_event(t, pod, "Pulling", f'Pulling image "{image}"')
    story.kubelet_event(
        t + 2 * SECOND,
        pod,
        "Failed",
        f'Failed to pull image "{image}": failed to pull and unpack image "{image}": failed to '
        "copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io"
        f"/v2/library/redis/manifests/{story.ids.sha256()}: 429 Too Many Requests - Server "
        "message: toomanyrequests: You have reached your pull rate limit. You may increase the "
        "limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
        warning=True,
    )
    story.kubelet_event(t + 2 * SECOND, pod, "Failed", "Error: ErrImagePull", warning=True)
    story.kubelet_event(t + 4 * SECOND, pod, "BackOff", f'Back-off pulling image "{image}"')
    story.kubelet_event(t + 4 * SECOND, pod, "Failed", "Error: ImagePullBackOff", warning=True)
    story.start(pod, t + 40 * SECOND, pull_seconds=6.2)


# ---------------------------------------------------------------------------------------------
# nodes and GPUs


def _app_xids(story: Story, node: Node, start: int, end: int) -> None:
    """Application Xids (13, 31, 43) on GPUs outside the experiment."""
    if story.rng.random() < 0.4:
        return
    gpu = story.rng.randrange(len(node.gpus))
    at = story.rng.randint(start, end - MINUTE)
    pid = story.rng.randint(12_000, 98_000)
    code = story.rng.choice((13, 31, 43))
    detail = {
        13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address",
        31: "Ch 00000018, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        "0x7f3a_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        43: "Ch 00000008",
    }[code]
    story.xid(node, gpu, code, at, pid=pid, detail=detail)
    if code != 43:
        story.xid(node, gpu, 43, at + SECOND, pid=pid, detail="Ch 00000018", identify=False)


def _own_node_noise(story: Story) -> None:
    """Harmless things on the experiment's own nodes: an old application Xid 43 on one of its
    GPUs, and a memory-pressure blip an hour before the incident."""
    world = story.world
    nodes = [world.node(n) for n in world.rank_nodes]
    if not nodes:
        return
    old = story.rng.choice(nodes)
    if old.has_gpus:
        at = story.t0 - story.rng.randint(3, 9) * HOUR
        at = max(at, old.boot_at + 10 * MINUTE)
        story.xid(
            old,
            story.rng.randrange(len(old.gpus)),
            43,
            at,
            pid=story.rng.randint(12_000, 98_000),
            detail="Ch 00000010",
        )
    roots = [r.true_end for r in story.inc.roots if r.true_end is not None]
    incident = min(roots) if roots else story.t0 + 2 * HOUR
    flap = story.rng.choice(nodes)
    at = max(story.t0 + 5 * MINUTE, incident - story.rng.randint(50, 70) * MINUTE)
    kubelet = story.node_ref(flap, kubelet=True)
    story.event(
        at,
        kubelet,
        "NodeHasInsufficientMemory",
        f"Node {flap.name} status is now: NodeHasInsufficientMemory",
        host=flap.name,
        namespace="default",
    )
    back = at + story.rng.randint(40, 150) * SECOND
    story.event(
        back,
        kubelet,
        "NodeHasSufficientMemory",
        f"Node {flap.name} status is now: NodeHasSufficientMemory",
        host=flap.name,
        namespace="default",
    )
    flap.set_condition(
        at,
        "MemoryPressure",
        "True",
        "KubeletHasInsufficientMemory",
        "kubelet has insufficient memory available",
    )
    flap.set_condition(
        back,
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    )


def _ordinary_kernel(story: Story, node: Node, start: int, end: int) -> None:
    """The kernel's everyday chatter: CNI interfaces coming and going."""
    lo = max(start, node.created_at)
    hi = end if node.deleted_at is None else min(end, node.deleted_at - MINUTE)
    if hi <= lo:
        return
    for _ in range(story.rng.randint(2, 6)):
        at = story.rng.randint(lo, hi)
        if _is_down(story, node.name, at):
            continue
        iface = {"aws": "eni", "gce": "gke", "azure": "azv"}[node.cloud] + story.ids.hex(11)
        story.kern(node, at, f"IPv6: ADDRCONF(NETDEV_CHANGE): {iface}: link becomes ready")


def _is_down(story: Story, node: str, at: int) -> bool:
    for down, up in story.inc.node_down.get(node, []):
        if down <= at and (up is None or at < up):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# cloud


def _scale_out(story: Story, node: Node) -> None:
    cloud = story.world.cloud
    at = node.created_at - story.rng.randint(90, 200) * SECOND
    if cloud.kind == "aws":
        size = story.rng.randint(3, 8)
        stamp = rfc3339(story.clocks.read("cloud", at))
        story.inc.asg_activities.append(
            AsgActivity(
                activity_id=story.ids.uid(),
                asg=node.group,
                description=f"Launching a new EC2 instance: {node.instance_id}",
                cause=f"At {stamp} a user request explicitly set group desired capacity changing the "
                f"desired capacity from {size} to {size + 1}.  At {stamp} an instance was "
                "started in response to a difference between desired and actual capacity, "
                f"increasing the capacity from {size} to {size + 1}.",
                start=at + SECOND,
                end=at + story.rng.randint(40, 90) * SECOND,
                status="Successful",
                details={
                    "Subnet ID": f"subnet-0{story.ids.hex(16)}",
                    "Availability Zone": node.zone,
                },
            )
        )
        story.inc.bridge_events.append(
            BridgeEvent(
                id=story.ids.uid(),
                detail_type="EC2 Instance State-change Notification",
                source="aws.ec2",
                at=at + 30 * SECOND,
                resources=[
                    f"arn:aws:ec2:{cloud.region}:{cloud.account}:instance/{node.instance_id}"
                ],
                detail={"instance-id": node.instance_id, "state": "running"},
            )
        )
    elif cloud.kind == "gce":
        story.inc.gce_operations.append(
            GceOperation(
                id=story.ids.gce_numeric_id(),
                name=f"operation-{story.clocks.read('cloud', at) // MS}-{story.ids.hex(13)}-"
                f"{story.ids.hex(8)}-{story.ids.hex(8)}",
                op_type="insert",
                instance=node.name,
                zone=node.zone,
                target_id=node.instance_id,
                at=at,
                end=at + 25 * SECOND,
                status_message="",
                user=f"{story.ids.digits(12)}@cloudservices.gserviceaccount.com",
            )
        )


def _cloud_noise(story: Story, noise_nodes: list[Node], start: int, end: int) -> None:
    cloud = story.world.cloud
    if not noise_nodes:
        return
    if cloud.kind == "aws":
        old = story.rng.choice(noise_nodes)
        at = start - story.rng.randint(3, 9) * 24 * HOUR
        story.inc.instance_events.append(
            InstanceEvent(
                old.instance_id,
                "system-reboot",
                "[Completed] scheduled reboot",
                story.ids.aws_event_id(),
                at,
                at + 2 * HOUR,
            )
        )
        story.inc.asg_activities.append(
            AsgActivity(
                activity_id=story.ids.uid(),
                asg=old.group,
                description=f"Launching a new EC2 instance: {old.instance_id}",
                cause=f"At {rfc3339(story.clocks.read('cloud', old.created_at - 2 * MINUTE))} an "
                "instance was started in response to a difference between desired and actual "
                "capacity, increasing the capacity from 1 to 2.",
                start=old.created_at - 2 * MINUTE,
                end=old.created_at - MINUTE,
                status="Successful",
                details={
                    "Subnet ID": f"subnet-0{story.ids.hex(16)}",
                    "Availability Zone": old.zone,
                },
            )
        )
    elif cloud.kind == "gce":
        cpu = [n for n in noise_nodes if not n.has_gpus]
        if cpu:
            node = cpu[0]
            at = story.rng.randint(start, end)
            story.inc.gce_operations.append(
                GceOperation(
                    id=story.ids.gce_numeric_id(),
                    name=f"systemevent-{story.clocks.read('cloud', at) // MS}-{story.ids.hex(13)}-"
                    f"{story.ids.hex(8)}-{story.ids.hex(8)}",
                    op_type="compute.instances.migrateOnHostMaintenance",
                    instance=node.name,
                    zone=node.zone,
                    target_id=node.instance_id,
                    at=at,
                    end=at + 40 * SECOND,
                    status_message="Instance migrated during Compute Engine maintenance.",
                )
            )
    else:
        cpu = [n for n in noise_nodes if not n.has_gpus]
        if cpu:
            node = cpu[0]
            story.inc.azure_events.append(
                AzureEvent(
                    node=node.name,
                    event_id=story.ids.upper_uuid(),
                    event_type="Freeze",
                    status="Scheduled",
                    resources=[node.group_instance],
                    not_before=story.rng.randint(start, end),
                    description="Virtual machine is being paused because of a memory-preserving "
                    "Live Migration operation.",
                    source="Platform",
                    duration=5,
                    incarnation=story.rng.randint(1, 4),
                )
            )
