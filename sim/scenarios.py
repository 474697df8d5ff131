"""The incident catalog: one function per scenario, each telling its incident through the story.

Every scenario names, in `Run.category`, what truly ended each attempt; `truth.py` turns that
into truth.json. Conventions a benchmark needs to know are recorded in `inc.notes`:
  * first domino: when ranks die one after another, the earliest failure (true time) is the
    root and the rest are `peer.failure` with `caused_by` naming it;
  * all ranks: when every rank hits the same error independently (a bad config on every
    retry, DeepSpeed's loss scale on every rank), each is its own root; the verdict names the
    earliest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from whyjob.sim import disruptions, logs
from whyjob.sim.clock import MINUTE, MS, SECOND
from whyjob.sim.incident import LogLine, Pod, Run
from whyjob.sim.job import WATCHDOG, Job, Member, Round, minutes
from whyjob.sim.podspec import simple_spec
from whyjob.sim.story import Story
from whyjob.sim.world import Node

if TYPE_CHECKING:
    from whyjob.sim.truth import Truth

__all__ = ["SCENARIOS", "Scenario"]

_ALL_LAUNCHERS = ("PyTorchJob", "PyTorchJob", "PyTorchJob", "JobSet", "experiment label")
_ALL_FRAMEWORKS = ("hf", "hf", "megatron", "deepspeed")


@dataclass(frozen=True)
class Scenario:
    """A named incident: what it shows, and how to tell it.

    Calling a scenario writes its bundle: `SCENARIOS["xid79"](7, Path("out"))`.
    """

    id: str
    description: str
    tell: Callable[[Story], None]
    clouds: tuple[str, ...] = ("aws", "gce", "azure")
    launchers: tuple[str, ...] = _ALL_LAUNCHERS
    frameworks: tuple[str, ...] = _ALL_FRAMEWORKS
    spot: bool = False
    ib: bool = False
    burstable: bool = False
    spares: int = 2

    def __call__(self, seed: int, out: Path, *, noise: bool = True) -> Truth:
        from whyjob.sim.bundle import simulate

        return simulate(self.id, seed, out, noise=noise)


# ---------------------------------------------------------------------------------------------
# shared plot


def _begin(story: Story) -> tuple[Job, Round]:
    job = Job(story)
    rnd = job.launch(story.t0)
    story.inc.dcgm_times.append(rnd.train_start + 4 * MINUTE)
    return job, rnd


def _train(story: Story, rnd: Round, low: float, high: float) -> int:
    at = rnd.train_start + minutes(story, low, high)
    rnd.train_until(at)
    return at


def _scrapes(story: Story, at: int) -> None:
    story.inc.dcgm_times += [at - 9 * MINUTE, at - 40 * SECOND, at + 35 * SECOND]


def _pick(story: Story, rnd: Round) -> tuple[Member, int]:
    member = story.rng.choice(rnd.members)
    return member, story.rng.randrange(member.voice.nproc)


def _host_pid(story: Story) -> int:
    return story.rng.randint(12_000, 98_000)


def _spare(story: Story, used: set[str]) -> Node:
    for name in story.world.spare_nodes:
        node = story.world.node(name)
        if name not in used and node.deleted_at is None and not node.unschedulable:
            used.add(name)
            return node
    raise RuntimeError("scenario ran out of spare nodes; raise Scenario.spares")


def _aftermath(
    story: Story,
    job: Job,
    rnd: Round,
    root: Run,
    *,
    lost: set[int],
    stop_ok: bool = True,
) -> Round | None:
    """After a failure the job stops, or restarts and then completes or is still running."""
    choices = ["complete", "running", "stop"] if stop_ok else ["complete", "running"]
    choice = story.rng.choice(choices)
    last = max(m.run.finished_at or m.run.true_end or 0 for m in rnd.members)
    if choice == "stop":
        _stop(story, job, rnd, root, last + 20 * SECOND)
        story.inc.notes.append("the job stopped after this failure (no restart)")
        return None
    used = {m.node for m in rnd.members}
    replace = {index: _spare(story, used) for index in lost}
    nxt = job.relaunch(rnd, node_for=replace)
    end = nxt.train_start + minutes(story, 20, 150)
    story.inc.dcgm_times.append(end - 2 * MINUTE)
    if choice == "complete":
        nxt.complete(end)
        story.inc.notes.append("the job restarted after this failure and completed")
    else:
        nxt.still_running(end)
        story.inc.notes.append("the job restarted after this failure; still running at capture")
    return nxt


def _stop(story: Story, job: Job, rnd: Round, root: Run, at: int) -> None:
    """The job gives up: its controller marks it failed and removes pods it would restart."""
    job.failed(at, root.pod)
    if job.exp.launcher == "PyTorchJob":
        for member in rnd.members:
            if member.pod.deleted_at is None:
                story.delete_pod(member.pod, at + story.rng.randint(1, 3) * SECOND, kill=False)


def _maintenance(story: Story, rnd: Round, member: Member, at: int) -> disruptions.Outcome:
    kind = story.world.cloud.kind
    if kind == "aws":
        return disruptions.aws_scheduled_event(story, rnd, member, at)
    if kind == "gce":
        return disruptions.gce_host_maintenance(story, rnd, member, at)
    return disruptions.azure_scheduled_event(story, rnd, member, at)


def _external(
    story: Story, fail: Callable[[Story, Round, Member, int], disruptions.Outcome]
) -> None:
    """Something outside the process ends one rank; the rest go down with it."""
    job, rnd = _begin(story)
    at = _train(story, rnd, 30, 240)
    victim = story.rng.choice(rnd.members)
    out = fail(story, rnd, victim, at)
    assert out.root.true_end is not None
    rnd.collateral(out.root, hang_from=out.root.true_end, notice=out.notice)
    _scrapes(story, at)
    _aftermath(story, job, rnd, out.root, lost={victim.index} if out.lost_node else set())


# ---------------------------------------------------------------------------------------------
# scenarios


def clean(story: Story) -> None:
    _job, rnd = _begin(story)
    end = rnd.train_start + minutes(story, 45, 300)
    _scrapes(story, end)
    rnd.complete(end)


def xid79(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 30, 240)
    victim, local = _pick(story, rnd)
    node = story.world.node(victim.node)
    gpu = node.gpu(local)
    story.xid(node, local, 79, at, pid=_host_pid(story), detail="GPU has fallen off the bus.")
    story.kern(node, at, f"NVRM: GPU {gpu.pci}.0: GPU has fallen off the bus.")
    for text in (
        "NVRM: A GPU crash dump has been created. If possible, please run",
        "NVRM: nvidia-bug-report.sh as root to collect this data before",
        "NVRM: the NVIDIA kernel module is unloaded.",
    ):
        story.kern(node, at + 2 * SECOND, text)
    story.inc.dead_gpus[(node.name, local)] = at
    error = story.rng.choice(("unspecified launch failure", "unknown error"))
    lines = logs.cuda_error_lines(
        victim.voice,
        at + story.rng.randint(300, 2000) * MS,
        local,
        error,
        script=story.world.experiment.script,
        framework=story.world.experiment.framework,
    )
    root = rnd.crash(
        victim,
        lines[-1].at,
        lines,
        local=local,
        worker_code=1,
        category="gpu.xid",
        note=f"Xid 79 on {gpu.uuid} (PCI {gpu.pci}): GPU has fallen off the bus",
    )
    rnd.collateral(root, hang_from=at)
    node.allocatable_gpus = len(node.gpus) - 1
    story.cordon(node, at + 90 * SECOND)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost={victim.index})


def maintenance(story: Story) -> None:
    _external(story, _maintenance)


def spot(story: Story) -> None:
    kind = story.world.cloud.kind
    fail = {
        "aws": disruptions.aws_spot,
        "gce": disruptions.gce_preempted,
        "azure": disruptions.azure_preempt,
    }[kind]
    _external(story, fail)


def scale_in(story: Story) -> None:
    _external(story, disruptions.scale_in)


def eviction(story: Story) -> None:
    _external(story, disruptions.pressure_eviction)


def preemption(story: Story) -> None:
    _external(story, disruptions.scheduler_preemption)


def node_lost(story: Story) -> None:
    _external(story, disruptions.node_not_ready)


def host_oom(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 20, 200)
    victim, _local = _pick(story, rnd)
    node = story.world.node(victim.node)
    pod = victim.pod
    exp = story.world.experiment
    pid = _host_pid(story)
    cid = victim.run.container_id.removeprefix("containerd://")
    qos = "burstable/" if exp.qos_class == "Burstable" else ""
    memcg = f"/kubepods/{qos}pod{pod.uid}/{cid}"
    limit_kb = exp.memory_limit_gi * 1024 * 1024
    itype = node.instance_type
    node_kb = itype.memory_ki if itype else 64_000_000
    adj = max(2, 1000 - 1000 * exp.memory_request_gi * 1024 * 1024 // node_kb)
    rss = limit_kb - story.rng.randint(2_000_000, 9_000_000)
    for text in (
        f"python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj={adj}",
        f"CPU: {story.rng.randint(0, 95)} PID: {pid} Comm: python Tainted: P           OE     "
        f"{node.kernel_version} #1",
        f"memory: usage {limit_kb}kB, limit {limit_kb}kB, failcnt {story.rng.randint(1, 900)}",
        f"memory+swap: usage {limit_kb}kB, limit 9007199254740988kB, failcnt 0",
        f"kmem: usage {story.rng.randint(300_000, 900_000)}kB, limit 9007199254740988kB, failcnt 0",
        f"Memory cgroup stats for {memcg}:",
        f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={cid},mems_allowed=0-1,"
        f"oom_memcg={memcg},task_memcg={memcg},task=python,pid={pid},uid=0",
        f"Memory cgroup out of memory: Killed process {pid} (python) total-vm:"
        f"{rss + story.rng.randint(30_000_000, 90_000_000)}kB, anon-rss:{rss}kB, file-rss:"
        f"{story.rng.randint(90_000, 600_000)}kB, shmem-rss:{story.rng.randint(4_000, 90_000)}kB, "
        f"UID:0 pgtables:{story.rng.randint(120_000, 400_000)}kB oom_score_adj:{adj}",
    ):
        story.kern(node, at, text)
    story.kern(
        node,
        at + 400 * MS,
        f"oom_reaper: reaped process {pid} (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    )
    if story.rng.random() < 0.6:
        story.event(
            at + 2 * SECOND,
            story.node_ref(node, kubelet=True),
            "OOMKilling",
            f"Memory cgroup out of memory: Killed process {pid} (python) total-vm:"
            f"{rss + 41_000_000}kB, anon-rss:{rss}kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
            f"pgtables:{200_000}kB oom_score_adj:{adj}",
            warning=True,
            component="kernel-monitor",
            host=node.name,
            namespace="default",
        )
    root = rnd.end(
        victim,
        at + SECOND,
        exit_code=137,
        reason="OOMKilled",
        category="container.oom_killed",
        note=f"cgroup OOM kill at the {exp.memory_limit_gi}Gi memory limit",
        root=True,
    )
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def cuda_oom(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 10, 180)
    victim, local = _pick(story, rnd)
    root = _cuda_oom_at(story, rnd, victim, local, at)
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    if story.rng.random() < 0.5:
        # The same batch comes back after the restart: the same rank runs out again.
        nxt = job.relaunch(rnd)
        again = nxt.train_start + story.rng.randint(20, 400) * SECOND
        nxt.train_until(again)
        root2 = _cuda_oom_at(story, nxt, nxt.member(victim.index), local, again)
        nxt.collateral(root2, hang_from=again)
        _stop(
            story, job, nxt, root2, max(m.run.finished_at or 0 for m in nxt.members) + 30 * SECOND
        )
        story.inc.notes.append("the same rank ran out of GPU memory again after the restart")
    else:
        _aftermath(story, job, rnd, root, lost=set())


def _cuda_oom_at(story: Story, rnd: Round, member: Member, local: int, at: int) -> Run:
    node = story.world.node(member.node)
    total = node.instance_type.gpu_memory_gib if node.instance_type else 79.11
    exp = story.world.experiment
    lines = logs.cuda_oom_lines(
        member.voice, at, local, total, story.rng, script=exp.script, framework=exp.framework
    )
    grank = member.voice.grank(local)
    return rnd.crash(
        member,
        at,
        lines,
        local=local,
        worker_code=1,
        category="app.cuda_oom",
        note=f"torch.OutOfMemoryError on rank {grank} (GPU {local})",
    )


def restart_loop(story: Story) -> None:
    job, rnd = _begin(story)
    mode = story.rng.choice(("all_ranks", "one_rank"))
    restarts = story.rng.randint(4, 6)
    exp = story.world.experiment
    story.inc.notes.append(f"restart loop: {restarts} in-place restarts, mode={mode}")
    note = "KeyError: 'input_ids' raised in the collate function, identical on every retry"
    if mode == "all_ranks":
        story.inc.notes.append(
            "every rank raises the same exception on its own: each attempt is "
            "its own root (app.exception); the verdict names the earliest"
        )
        for k in range(restarts + 1):
            at = rnd.train_start + story.rng.randint(5, 40) * SECOND
            for member in rnd.members:
                t = at + story.rng.randint(0, 1500) * MS
                rnd.crash(
                    member,
                    t,
                    logs.keyerror_lines(member.voice, t, 0, script=exp.script),
                    local=0,
                    worker_code=1,
                    category="app.exception",
                    note=note,
                    also_failed=list(range(1, member.voice.nproc)),
                )
            if k < restarts:
                rnd = job.relaunch(rnd)
    else:
        story.inc.notes.append(
            "one rank hits a bad sample at the same step on every retry; its "
            "peers are collateral (peer.failure)"
        )
        victim, local = _pick(story, rnd)
        at = _train(story, rnd, 20, 120)
        fail_step = rnd.step + 3
        for k in range(restarts + 1):
            at = max(rnd.time_of_step(fail_step), rnd.t)
            rnd.train_until(at)
            member = rnd.member(victim.index)
            root = rnd.crash(
                member,
                at,
                logs.keyerror_lines(member.voice, at, local, script=exp.script),
                local=local,
                worker_code=1,
                category="app.exception",
                note=note,
            )
            rnd.collateral(root, hang_from=at)
            if k < restarts:
                rnd = job.relaunch(rnd)
    for member in rnd.members:
        finished = member.run.finished_at
        assert finished is not None
        story.back_off(member.pod, finished)
    story.inc.dcgm_times.append(rnd.train_start)


def image_pull(story: Story) -> None:
    exp = story.world.experiment
    good = exp.image
    repo, tag = good.rsplit(":", 1)
    bad = f"{repo}:{story.rng.choice((tag + '-fix', tag.replace('cu124', 'cu12'), 'latest-dev'))}"
    exp.image = bad
    story.inc.notes.append(f"image tag {bad!r} does not exist (the good one is {good!r})")
    job = Job(story)
    window = minutes(story, 12, 45)
    for index in range(exp.ranks):
        pod = job.create_pod(index, story.t0 + index * 200 * MS)
        node = story.world.node(story.world.rank_nodes[index])
        story.schedule(pod, node, pod.created_at + story.rng.randint(300, 1500) * MS)
        _pull_loop(story, pod, bad, pod.created_at + 2 * SECOND, window)
    story.inc.dcgm_times.append(story.t0 + window // 2)


def _pull_loop(story: Story, pod: Pod, image: str, start: int, window: int) -> None:
    pod.started_at = start - SECOND
    for type_ in ("PodReadyToStartContainers", "Initialized"):
        pod.condition(start, type_, "True")
    for type_ in ("Ready", "ContainersReady"):
        pod.condition(
            start,
            type_,
            "False",
            "ContainersNotReady",
            f"containers with unready status: [{pod.container}]",
        )
    registry_error = (
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and '
        f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
    )
    run = Run(
        pod=pod,
        restart=0,
        container_id="",
        started_at=None,
        pending=True,
        category="startup.image_pull",
        note=f"image {image} not found in the registry",
    )
    pod.runs.append(run)
    story.inc.roots.append(run)
    t = start
    delay = 10
    first = True
    while t < start + window:
        story.kubelet_event(t, pod, "Pulling", f'Pulling image "{image}"')
        t += story.rng.randint(400, 2500) * MS
        story.kubelet_event(t, pod, "Failed", registry_error, warning=True)
        story.kubelet_event(t, pod, "Failed", "Error: ErrImagePull", warning=True)
        pod.waiting = ("ErrImagePull", registry_error)
        if first:
            story.snapshot(pod, t + 300 * MS)
            first = False
        t += story.rng.randint(1, 3) * SECOND
        story.kubelet_event(t, pod, "BackOff", f'Back-off pulling image "{image}"')
        story.kubelet_event(t, pod, "Failed", "Error: ImagePullBackOff", warning=True)
        pod.waiting = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
        t += delay * SECOND
        delay = min(300, delay * 2)


def config_error(story: Story) -> None:
    exp = story.world.experiment
    job = Job(story)
    window = minutes(story, 8, 40)
    story.inc.notes.append('the pod template references secret "hf-token", which does not exist')
    for index in range(exp.ranks):
        pod = job.create_pod(index, story.t0 + index * 150 * MS)
        node = story.world.node(story.world.rank_nodes[index])
        scheduled = pod.created_at + story.rng.randint(300, 1500) * MS
        story.schedule(pod, node, scheduled)
        pod.started_at = scheduled + SECOND
        t = scheduled + SECOND
        story.kubelet_event(t, pod, "Pulling", f'Pulling image "{exp.image}"')
        t += story.rng.randint(40, 150) * SECOND
        story.kubelet_event(
            t,
            pod,
            "Pulled",
            f'Successfully pulled image "{exp.image}" in '
            f"{(t - scheduled) / SECOND:.3f}s ({(t - scheduled) / SECOND:.3f}s "
            f"including waiting). Image size: {story.rng.randint(9, 24)}"
            f"{story.rng.randint(100_000_000, 999_999_999)} bytes.",
        )
        for type_ in ("PodReadyToStartContainers", "Initialized"):
            pod.condition(t, type_, "True")
        for type_ in ("Ready", "ContainersReady"):
            pod.condition(
                t,
                type_,
                "False",
                "ContainersNotReady",
                f"containers with unready status: [{pod.container}]",
            )
        run = Run(
            pod=pod,
            restart=0,
            container_id="",
            started_at=None,
            pending=True,
            category="startup.config",
            note='secret "hf-token" not found',
        )
        pod.runs.append(run)
        story.inc.roots.append(run)
        pod.waiting = ("CreateContainerConfigError", 'secret "hf-token" not found')
        first = True
        while t < story.t0 + window:
            story.kubelet_event(
                t, pod, "Failed", 'Error: secret "hf-token" not found', warning=True
            )
            if first:
                story.snapshot(pod, t + 200 * MS)
                first = False
            story.kubelet_event(
                t + 10 * MS,
                pod,
                "Pulled",
                f'Container image "{exp.image}" already present on machine',
            )
            t += story.rng.randint(10, 25) * SECOND + (t - scheduled) // 8


def unschedulable(story: Story) -> None:
    exp = story.world.experiment
    world = story.world
    team = "team-vision"
    for i, node in enumerate(n for n in world.nodes.values() if n.has_gpus):
        # Another team's job holds every GPU node, including any that joins later.
        created = max(story.t0 - story.rng.randint(30, 300) * MINUTE, node.created_at + MINUTE)
        pod = story.create_pod(
            created,
            name=f"vit-g-pretrain-worker-{i}",
            namespace=team,
            labels={
                "training.kubeflow.org/job-name": "vit-g-pretrain",
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-index": str(i),
                "training.kubeflow.org/replica-type": "worker",
            },
            owner_refs=[
                {
                    "apiVersion": "kubeflow.org/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "PyTorchJob",
                    "name": "vit-g-pretrain",
                    "uid": story.ids.uid(),
                }
            ],
            spec=simple_spec(
                container="pytorch",
                image="nvcr.io/nvidia/pytorch:24.12-py3",
                sa_suffix=story.ids.k8s_suffix(),
                cpu="64",
                memory="512Gi",
                gpus=len(node.gpus),
                restart_policy="OnFailure",
            ),
            container="pytorch",
            image="nvcr.io/nvidia/pytorch:24.12-py3",
            image_id=f"nvcr.io/nvidia/pytorch@{story.ids.sha256()}",
            qos="Guaranteed",
        )
        story.schedule(pod, node, created + SECOND)
        story.start(pod, created + 2 * SECOND)
    story.inc.notes.append(f"every GPU node is held by {team}/vit-g-pretrain")
    job = Job(story)
    window = minutes(story, 20, 60)

    def message(at: int) -> str:
        n = len(world.nodes_at(at))
        return (
            f"0/{n} nodes are available: {n} Insufficient nvidia.com/gpu. preemption: 0/{n} "
            f"nodes are available: {n} No preemption victims found for incoming pod."
        )

    for index in range(exp.ranks):
        pod = job.create_pod(index, story.t0 + index * 120 * MS)
        t = pod.created_at + SECOND
        pod.condition(t, "PodScheduled", "False", "Unschedulable", message(t))
        n = len(world.nodes_at(t))
        run = Run(
            pod=pod,
            restart=0,
            container_id="",
            started_at=None,
            pending=True,
            category="startup.unschedulable",
            note=f"{n} nodes, none with {exp.gpus_per_pod} free nvidia.com/gpu",
        )
        pod.runs.append(run)
        story.inc.roots.append(run)
        gap = 10
        attempt = 0
        while t < story.t0 + window:
            # The scheduler retries with back-off; identical messages become one event's series.
            story.event(
                t,
                story.pod_ref(pod),
                "FailedScheduling",
                message(t),
                warning=True,
                component="default-scheduler",
                new_style=True,
                action="Scheduling",
            )
            if attempt == 0:
                story.snapshot(pod, t + SECOND)
            if world.cloud.kind in ("aws", "gce") and attempt % 2 == 0:
                story.event(
                    t + 11 * SECOND,
                    story.pod_ref(pod),
                    "NotTriggerScaleUp",
                    "pod didn't trigger scale-up: 1 max node group size reached",
                    component="cluster-autoscaler",
                )
            t += gap * SECOND + story.rng.randint(0, 3) * SECOND
            gap = min(300, gap * 2)
            attempt += 1
        pod.condition(t, "PodScheduled", "False", "Unschedulable", message(t))
    story.inc.dcgm_times.append(story.t0 + window // 2)


def nccl_error(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 20, 240)
    victim, local = _pick(story, rnd)
    remote = story.rng.choice([m for m in rnd.members if m is not victim] or [victim])
    port = story.rng.randint(32768, 60999)
    lines = logs.nccl_remote_error_lines(
        victim.voice, at, local, remote.pod.ip or "10.0.0.2", port, 12
    )
    root = rnd.crash(
        victim,
        at,
        lines,
        local=local,
        worker_code=-6,
        category="app.nccl_error",
        note=f"ncclRemoteError: NET/IB completion error 12 (retry exceeded) towards "
        f"{remote.pod.name}",
    )
    if remote is not victim and remote.index not in rnd.ended:
        t = at + story.rng.randint(800, 3500) * MS
        lines = logs.nccl_remote_error_lines(
            remote.voice,
            t,
            local,
            victim.pod.ip or "10.0.0.3",
            story.rng.randint(32768, 60999),
            5,
        )
        rnd.crash(
            remote,
            t,
            lines,
            local=local,
            worker_code=-6,
            category="peer.failure",
            caused_by=root,
            note="secondary IB completion error 5 (queue pair flushed) "
            f"after {victim.pod.name} failed",
        )
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def nccl_timeout(story: Story) -> None:
    job, rnd = _begin(story)
    hang = _train(story, rnd, 20, 240)
    order = list(rnd.members)
    story.rng.shuffle(order)
    first = hang + WATCHDOG + story.rng.randint(1_000, 4_000) * MS
    story.inc.notes.append(
        "no earlier root: the rank whose watchdog fired first is the root "
        "(app.nccl_timeout); the others are peer.failure"
    )
    root = rnd.watchdog(
        order[0],
        first,
        category="app.nccl_timeout",
        note="first NCCL watchdog timeout; no earlier failure on any rank",
        caused_by=None,
        last_completed_lag=1,
    )
    if job.exp.launcher == "JobSet":
        rnd.collateral(root, hang_from=hang)
    else:
        for member in order[1:]:
            fired = first + story.rng.randint(15, 60) * SECOND
            rnd.watchdog(
                member,
                fired,
                category="peer.failure",
                caused_by=root,
                note=f"NCCL watchdog timeout after {root.pod.name}'s",
            )
    _scrapes(story, hang + WATCHDOG)
    _aftermath(story, job, rnd, root, lost=set())


def segfault(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 10, 200)
    victim, local = _pick(story, rnd)
    node = story.world.node(victim.node)
    base = 0x7F0000000000 + story.rng.getrandbits(28) * 0x1000
    story.kern(
        node,
        at,
        f"python[{_host_pid(story)}]: segfault at 0 ip {base + 0x1B2C3D:016x} "
        f"sp 00007ffd{story.rng.getrandbits(32):08x} error 4 in "
        f"flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so[{base:x}+5a3c000]",
    )
    story.kern(
        node,
        at,
        "Code: 48 8b 45 d0 48 8b 40 08 48 89 45 c8 48 8b 45 c8 <48> 8b 00 48 "
        "89 c7 e8 5a fe ff ff 48 89 45 c0 48 8b 45 c0",
    )
    lines = logs.segfault_lines(victim.voice, at, local)
    root = rnd.crash(
        victim,
        at,
        lines,
        local=local,
        worker_code=-11,
        category="app.segfault",
        note=f"SIGSEGV in a worker (local_rank {local}) inside flash_attn",
    )
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def nan_loss(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 30, 240)
    exp = story.world.experiment
    if exp.framework == "deepspeed":
        story.inc.notes.append(
            "fp16 loss scale hit its floor on every rank at once: each rank "
            "is its own root (app.nan_loss); the verdict names the earliest"
        )
        printer = rnd.printer
        for k in (2, 1):
            story.log(
                printer.run,
                [
                    LogLine(
                        at - k * 50 * SECOND,
                        "stdout",
                        "{'loss': nan, 'grad_norm': nan, 'learning_rate': 4.1e-05, 'epoch': 0.31}",
                    )
                ],
            )
        root = None
        for member in rnd.members:
            t = at + story.rng.randint(0, 2500) * MS
            run = rnd.crash(
                member,
                t,
                logs.deepspeed_min_scale_lines(member.voice, t, 0, 1),
                local=0,
                worker_code=1,
                category="app.nan_loss",
                note="DeepSpeed fp16: loss scale already at minimum",
                also_failed=list(range(1, member.voice.nproc)),
            )
            root = root or run
        assert root is not None
    else:
        victim, local = _pick(story, rnd)
        node_label = victim.voice.host
        lines = logs.megatron_nan_lines(victim.voice, at, local, node_label)
        root = rnd.crash(
            victim,
            at,
            lines,
            local=local,
            worker_code=1,
            category="app.nan_loss",
            note="Megatron: NaN in local grad norm",
        )
        rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def checkpoint_error(story: Story) -> None:
    job, rnd = _begin(story)
    _train(story, rnd, 20, 160)
    step, t_save = rnd.next_save()
    rnd.train_until(t_save - 1)
    kind = story.rng.choice(("enospc", "enospc", "readonly"))
    saver = rnd.members[0]
    lines = logs.save_failure_lines(saver.voice, t_save, job.exp.ckpt_dir, step, kind, story.rng)
    what = (
        "no space left on the checkpoint volume"
        if kind == "enospc"
        else "checkpoint volume is read-only"
    )
    root = rnd.crash(
        saver,
        lines[-1].at,
        lines,
        local=0,
        worker_code=1,
        category="app.checkpoint_error",
        note=f"torch.save of checkpoint-{step} failed: {what}",
    )
    rnd.collateral(root, hang_from=t_save)
    _scrapes(story, t_save)
    _aftermath(story, job, rnd, root, lost=set())


def storage_io(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 20, 240)
    cloud = story.world.cloud
    server = {
        "aws": f"fs-0{story.ids.hex(16)}.efs.{cloud.region}.amazonaws.com",
        "gce": f"10.{story.rng.randint(60, 99)}.0.2",
        "azure": f"mltrain{story.ids.alnum(8)}.file.core.windows.net",
    }[cloud.kind]
    victim, local = _pick(story, rnd)
    for member in rnd.members:
        node = story.world.node(member.node)
        stall = at - story.rng.randint(60, 240) * SECOND
        story.kern(node, stall, f"nfs: server {server} not responding, still trying")
        story.kern(node, at + story.rng.randint(3, 9) * MINUTE, f"nfs: server {server} OK")
    story.kern(victim.node, at - 2 * SECOND, f"nfs: server {server} not responding, timed out")
    shard = f"/data/tokenized/train-{story.rng.randint(0, 2047):05d}-of-02048.arrow"
    lines = logs.io_error_lines(victim.voice, at, local, shard, story.rng.randint(0, 7))
    root = rnd.crash(
        victim,
        at,
        lines,
        local=local,
        worker_code=1,
        category="storage.io",
        note=f"EIO reading {shard} while NFS server {server} was not responding",
    )
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def cuda_error(story: Story) -> None:
    job, rnd = _begin(story)
    at = _train(story, rnd, 10, 200)
    victim, local = _pick(story, rnd)
    node = story.world.node(victim.node)
    gpu = node.gpu(local)
    pid = _host_pid(story)
    channel = f"{story.rng.randint(8, 60):08x}"
    story.xid(
        node,
        local,
        31,
        at,
        pid=pid,
        detail=f"Ch {channel}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_"
        f"{story.rng.randint(0, 7)} faulted @ 0x7f{story.rng.getrandbits(16):04x}_"
        f"{story.rng.getrandbits(24):06x}000. Fault is of type FAULT_PDE "
        "ACCESS_TYPE_VIRT_READ",
    )
    lines = logs.cuda_error_lines(
        victim.voice,
        at + story.rng.randint(100, 900) * MS,
        local,
        "an illegal memory access was encountered",
        script=story.world.experiment.script,
        framework=story.world.experiment.framework,
    )
    root = rnd.crash(
        victim,
        lines[-1].at,
        lines,
        local=local,
        worker_code=1,
        category="app.cuda_error",
        note=f"illegal memory access; the Xid 31 on {gpu.uuid} is the application's "
        "own MMU fault, not a hardware fault",
    )
    story.xid(
        node,
        local,
        43,
        (root.true_end or at) - SECOND,
        pid=pid,
        detail=f"Ch {channel}",
        identify=False,
    )
    rnd.collateral(root, hang_from=at)
    _scrapes(story, at)
    _aftermath(story, job, rnd, root, lost=set())


def deleted(story: Story) -> None:
    _job, rnd = _begin(story)
    at = _train(story, rnd, 15, 240)
    who = "PyTorchJob" if story.world.experiment.launcher == "PyTorchJob" else "job"
    story.inc.notes.append(f"a user deleted the {who}; every pod got SIGTERM; nothing failed")
    for member in rnd.members:
        t = at + story.rng.randint(100, 1500) * MS
        rnd.sigterm(
            member,
            t,
            category="pod.deleted",
            caused_by=None,
            note="deleted by a user (kubectl delete); not a failure",
        )
    _scrapes(story, at)


def maintenance_ahead(story: Story) -> None:
    """The cloud announces maintenance on one rank's host while the job trains; the capture
    ends before the window opens: a warning is owed, nothing has failed."""
    _job, rnd = _begin(story)
    at = _train(story, rnd, 40, 180)
    member = story.rng.choice(rnd.members)
    start = at + story.rng.randint(45, 55) * MINUTE
    window = disruptions.announce_maintenance(story, member, at, start)
    story.inc.ahead.append((member.node, *window))
    story.inc.notes.append(
        f"maintenance announced for {member.node}, window opening at capture + ~40 minutes"
    )
    _scrapes(story, at)
    rnd.still_running(at + story.rng.randint(3, 8) * MINUTE)


def maintenance_storm(story: Story) -> None:
    job, rnd = _begin(story)
    tr = job.training
    # Checkpoints at least 40 minutes apart, so short rounds never reach one.
    per_save = math.ceil(40 * MINUTE / tr.step_us / tr.log_every) * tr.log_every
    tr.save_every = max(tr.save_every, per_save)
    _train(story, rnd, 90, 200)
    storms = story.rng.randint(3, 5)
    hit: set[str] = set()
    used = {m.node for m in rnd.members}
    story.inc.notes.append(
        f"{storms} host-maintenance events in a row; every restart resumed "
        "from the same checkpoint: no training progress between them"
    )
    root: Run | None = None
    for k in range(storms):
        if k:
            rnd.train_until(rnd.train_start + minutes(story, 6, 25))
        victim = story.rng.choice([m for m in rnd.members if m.node not in hit] or rnd.members)
        hit.add(victim.node)
        at = rnd.t
        out = _maintenance(story, rnd, victim, at)
        root = out.root
        assert root.true_end is not None
        rnd.collateral(root, hang_from=root.true_end, notice=out.notice)
        _scrapes(story, at)
        replace = {victim.index: _spare(story, used)} if out.lost_node else {}
        last = k == storms - 1
        if last and story.rng.random() < 0.4:
            _stop(
                story,
                job,
                rnd,
                root,
                max(m.run.finished_at or 0 for m in rnd.members) + 30 * SECOND,
            )
            return
        rnd = job.relaunch(rnd, node_for=replace)
    rnd.still_running(rnd.train_start + minutes(story, 5, 20))


SCENARIOS: dict[str, Scenario] = {
    s.id: s
    for s in (
        Scenario("clean", "every rank trains to the end and exits 0", clean),
        Scenario(
            "xid79", "one rank's GPU falls off the bus (Xid 79); peers hit the NCCL watchdog", xid79
        ),
        Scenario(
            "maintenance",
            "cloud host maintenance takes one rank's node (EC2 scheduled "
            "event, GCE terminateOnHostMaintenance, Azure Reboot/Redeploy)",
            maintenance,
        ),
        Scenario(
            "spot",
            "spot capacity reclaimed under one rank (EC2 warning, GCE preempted, Azure Preempt)",
            spot,
            spot=True,
        ),
        Scenario(
            "scale_in",
            "the ASG or cluster-autoscaler removes a node still running a rank",
            scale_in,
            clouds=("aws",),
        ),
        Scenario(
            "host_oom",
            "one rank's container is OOMKilled at its cgroup memory limit",
            host_oom,
            burstable=True,
        ),
        Scenario("cuda_oom", "one rank raises torch.OutOfMemoryError", cuda_oom),
        Scenario(
            "restart_loop",
            "the same KeyError on every retry; CrashLoopBackOff",
            restart_loop,
            launchers=("PyTorchJob",),
            frameworks=("hf", "deepspeed"),
        ),
        Scenario(
            "image_pull",
            "the image tag does not exist: ErrImagePull / ImagePullBackOff",
            image_pull,
        ),
        Scenario(
            "unschedulable",
            "no node has 8 free GPUs: FailedScheduling, pods Pending",
            unschedulable,
        ),
        Scenario(
            "eviction",
            "kubelet evicts a rank under node memory or disk pressure",
            eviction,
            burstable=True,
        ),
        Scenario("preemption", "a higher-priority pod preempts one rank", preemption),
        Scenario(
            "nccl_error",
            "an InfiniBand completion error on one rank (ncclRemoteError)",
            nccl_error,
            clouds=("azure", "gce"),
            ib=True,
        ),
        Scenario(
            "nccl_timeout", "every rank hits the NCCL watchdog; no earlier root", nccl_timeout
        ),
        Scenario("segfault", "a worker segfaults inside a CUDA extension", segfault),
        Scenario(
            "nan_loss",
            "fp16 loss scale floor (DeepSpeed) or NaN grad norm (Megatron)",
            nan_loss,
            frameworks=("deepspeed", "megatron"),
        ),
        Scenario(
            "checkpoint_error",
            "torch.save fails: volume full or read-only",
            checkpoint_error,
            frameworks=("hf", "deepspeed"),
        ),
        Scenario(
            "storage_io", "NFS stops responding; a DataLoader read fails with EIO", storage_io
        ),
        Scenario(
            "config_error", 'CreateContainerConfigError: secret "hf-token" not found', config_error
        ),
        Scenario(
            "node_lost", "a node stops reporting (NotReady); taint eviction; it reboots", node_lost
        ),
        Scenario(
            "cuda_error", "illegal memory access with the application's own Xid 31", cuda_error
        ),
        Scenario(
            "deleted", "a user deletes the job; every rank exits 143; nothing failed", deleted
        ),
        Scenario(
            "maintenance_ahead",
            "maintenance announced for one rank's host of a running job, the window ahead "
            "(EC2 scheduled event, GCE upcoming maintenance, Azure scheduled event)",
            maintenance_ahead,
        ),
        Scenario(
            "maintenance_storm",
            "host maintenance again and again; no progress between restarts",
            maintenance_storm,
            spares=6,
        ),
    )
}
