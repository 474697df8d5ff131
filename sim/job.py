"""The experiment as its launcher runs it: rounds of synchronized training across ranks.

A *round* is one start of every rank, from rendezvous to the end of the last rank's run. The
launcher decides what a restart looks like: a PyTorchJob (restartPolicy OnFailure) restarts a
failed container in place and recreates a pod (same name, new uid) only when the pod itself is
gone; a JobSet tears down every Job and recreates all pods under new names; an Indexed Job
replaces each failed pod. Peers of a failed rank die the way synchronous training dies: hung in
a collective until the NCCL watchdog fires ten minutes later, or killed by the controller's
teardown.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from whyjob.core.experiments import recognise
from whyjob.sim import logs
from whyjob.sim.clock import MINUTE, MS, SECOND
from whyjob.sim.incident import LogLine, ObjRef, Pod, Run
from whyjob.sim.podspec import training_spec
from whyjob.sim.story import Story
from whyjob.sim.world import Node

__all__ = ["Job", "Member", "Round", "Training"]

WATCHDOG = 600 * SECOND


@dataclass
class Training:
    """The job's pace: how fast steps go, how often it logs and saves."""

    framework: str
    step_us: int
    log_every: int
    save_every: int
    save_took: int
    max_steps: int
    loss_floor: float
    loss_span: float
    ckpt_step: int = 0  # the last checkpoint that finished saving

    @classmethod
    def draw(cls, rng: random.Random, framework: str) -> Training:
        step_us = int(rng.uniform(0.9, 4.0) * SECOND)
        log_every = max(10, round(rng.uniform(120, 300) * SECOND / step_us / 10) * 10)
        save_every = log_every * rng.randint(6, 14)
        return cls(
            framework=framework,
            step_us=step_us,
            log_every=log_every,
            save_every=save_every,
            save_took=rng.randint(25, 140) * SECOND,
            max_steps=rng.choice((20_000, 50_000, 100_000, 250_000)),
            loss_floor=rng.uniform(1.6, 2.4),
            loss_span=rng.uniform(6.0, 9.0),
        )

    def loss(self, step: int, rng: random.Random) -> float:
        return self.loss_floor + self.loss_span * math.exp(-step / 900) + rng.uniform(-0.04, 0.04)


@dataclass
class Member:
    index: int  # node rank
    pod: Pod
    run: Run
    voice: logs.Voice

    @property
    def node(self) -> str:
        assert self.pod.node is not None
        return self.pod.node


@dataclass
class Round:
    job: Job
    members: list[Member]
    train_start: int
    start_step: int
    number: int
    t: int = 0
    step: int = 0
    ended: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.t = self.train_start
        self.step = self.start_step

    # -- pace -------------------------------------------------------------------------------

    @property
    def printer(self) -> Member:
        """Megatron prints iteration lines from the last rank, Trainer from rank 0."""
        if self.job.training.framework == "megatron":
            return self.members[-1]
        return self.members[0]

    def seq_at(self, at: int) -> int:
        steps = self.start_step + max(0, at - self.train_start) // self.job.training.step_us
        return int(steps) * 3 + 17

    def next_save(self) -> tuple[int, int]:
        """(step, true time) of the next checkpoint save from the current cursor."""
        tr = self.job.training
        step = (self.step // tr.save_every + 1) * tr.save_every
        return step, self.t + (step - self.step) * tr.step_us

    def time_of_step(self, step: int) -> int:
        """When this round reaches `step`, assuming no save on the way."""
        return self.train_start + (step - self.start_step) * self.job.training.step_us

    def train_until(self, until: int) -> None:
        """Write progress and checkpoint lines up to true time `until`."""
        tr = self.job.training
        story = self.job.story
        printer = self.printer
        saver = self.members[0]
        while True:
            next_step = (self.step // tr.log_every + 1) * tr.log_every
            t_next = self.t + (next_step - self.step) * tr.step_us
            if t_next > until:
                break
            self.step, self.t = next_step, t_next
            story.log(
                printer.run,
                [
                    logs.progress_line(
                        t_next,
                        tr.framework,
                        next_step,
                        tr.max_steps,
                        tr.loss(next_step, story.rng),
                        tr.step_us / MS * story.rng.uniform(0.97, 1.03),
                        self.job.world_size,
                        skew=printer.voice.skew,
                    )
                ],
            )
            if next_step % tr.save_every == 0:
                took = int(tr.save_took * story.rng.uniform(0.8, 1.2))
                lines = logs.checkpoint_lines(
                    saver.voice, t_next, tr.framework, self.job.exp.ckpt_dir, next_step, took
                )
                story.log(saver.run, [line for line in lines if line.at <= until])
                if t_next + took <= until:
                    tr.ckpt_step = next_step
                self.t += took
        self.t = max(self.t, until)

    # -- endings ----------------------------------------------------------------------------

    def member(self, index: int) -> Member:
        return self.members[index]

    def end(
        self,
        member: Member,
        at: int,
        *,
        exit_code: int,
        reason: str,
        category: str,
        note: str,
        caused_by: Run | None = None,
        message: str | None = None,
        reported_at: int | None = None,
        phase: str | None = None,
        root: bool = False,
        timestamps: bool = True,
        failed_at: int | None = None,
    ) -> Run:
        run = member.run
        run.failed_at = failed_at if failed_at is not None else at
        run.category = category
        run.caused_by = caused_by
        run.note = note
        run.timestamps = timestamps
        self.job.story.end_run(
            run,
            at,
            exit_code=exit_code,
            reason=reason,
            message=message,
            reported_at=reported_at,
            phase=phase,
        )
        self.ended.add(member.index)
        if root:
            self.job.story.inc.roots.append(run)
        return run

    def crash(
        self,
        member: Member,
        at: int,
        worker_lines: list[LogLine],
        *,
        local: int,
        worker_code: int,
        category: str,
        note: str,
        caused_by: Run | None = None,
        also_failed: list[int] | None = None,
    ) -> Run:
        """A worker process dies; torchrun tears its siblings down and exits 1.

        `also_failed` lists other local ranks that died of the same cause at the same time
        (they appear under `Failures:` in torchrun's summary instead of being SIGTERMed).
        """
        story = self.job.story
        story.log(member.run, worker_lines)
        t = at + story.rng.randint(300, 1500) * MS
        failures = [(local, worker_code, at)]
        failures += [
            (other, worker_code, at + (i + 1) * 4 * MS) for i, other in enumerate(also_failed or [])
        ]
        story.log(member.run, logs.torchrun_failure_lines(member.voice, t, failures))
        return self.end(
            member,
            t + story.rng.randint(2, 4) * SECOND,
            exit_code=1,
            reason="Error",
            category=category,
            note=note,
            caused_by=caused_by,
            root=category != "peer.failure",
            failed_at=at,
        )

    def watchdog(
        self,
        member: Member,
        fired: int,
        *,
        category: str,
        note: str,
        caused_by: Run | None,
        last_completed_lag: int = 0,
    ) -> Run:
        """Every local rank's NCCL watchdog times out; torchrun reports SIGABRT (-6)."""
        story = self.job.story
        seq = self.seq_at(fired - WATCHDOG)
        numel = story.rng.choice((131072000, 262144000, 50331648, 1024))
        lines = logs.watchdog_lines(
            member.voice,
            fired,
            seq=seq,
            op="ALLREDUCE",
            numel=numel,
            last_enqueued=seq,
            last_completed=seq - 1 - last_completed_lag,
        )
        story.log(member.run, lines)
        t = fired + story.rng.randint(200, 900) * MS
        failures = [(local, -6, t + local * 3 * MS) for local in range(member.voice.nproc)]
        story.log(member.run, logs.torchrun_failure_lines(member.voice, t, failures))
        return self.end(
            member,
            t + story.rng.randint(2, 5) * SECOND,
            exit_code=1,
            reason="Error",
            category=category,
            note=note,
            caused_by=caused_by,
            root=category != "peer.failure",
            failed_at=fired,
        )

    def sigterm(
        self,
        member: Member,
        at: int,
        *,
        category: str,
        note: str,
        caused_by: Run | None,
        delete: bool = True,
        exit_code: int = 143,
        phase: str | None = None,
        message: str | None = None,
    ) -> Run:
        """The pod is deleted or evicted: SIGTERM to torchrun, which stops its workers."""
        story = self.job.story
        if delete:
            story.delete_pod(member.pod, at, kill=True)
        story.log(
            member.run, logs.sigterm_lines(member.voice, at + story.rng.randint(100, 700) * MS)
        )
        return self.end(
            member,
            at + story.rng.randint(2, 8) * SECOND,
            exit_code=exit_code,
            reason="Error",
            category=category,
            note=note,
            caused_by=caused_by,
            phase=phase,
            message=message,
            root=category not in ("peer.failure",),
            failed_at=at,
        )

    def collateral(
        self, root: Run, hang_from: int, *, notice: int | None = None, note: str | None = None
    ) -> None:
        """Every rank still running dies because `root` failed, the way the launcher decides.

        Synchronous training hangs in the next collective from `hang_from`; the NCCL watchdog
        fires ten minutes later. A JobSet restarts as soon as its controller sees the failure
        (`notice`, by default when the kubelet reported it), which kills the peers first when
        that comes before the watchdog.
        """
        job = self.job
        story = job.story
        text = note or f"collateral: {root.pod.name} failed first"
        seen = notice if notice is not None else (root.finished_at or root.true_end or hang_from)
        teardown = max(seen, hang_from) + story.rng.randint(3, 12) * SECOND
        for member in self.members:
            if member.index in self.ended:
                continue
            fired = hang_from + WATCHDOG + story.rng.randint(2_000, 9_000) * MS
            if job.exp.launcher == "JobSet" and teardown < fired:
                self.sigterm(
                    member,
                    teardown + story.rng.randint(0, 800) * MS,
                    category="peer.failure",
                    note=text + "; JobSet restart tore it down",
                    caused_by=root,
                )
            else:
                self.watchdog(
                    member,
                    fired,
                    category="peer.failure",
                    note=text + "; NCCL watchdog timeout",
                    caused_by=root,
                )

    def complete(self, at: int) -> None:
        story = self.job.story
        tr = self.job.training
        self.train_until(at)
        runtime = (at - self.train_start) / SECOND
        for member in self.members:
            t = at + story.rng.randint(1, 20) * SECOND
            story.log(
                member.run,
                logs.completion_lines(
                    member.voice, t, tr.framework, runtime, tr.loss(self.step, story.rng)
                ),
            )
            self.end(
                member,
                t + 8 * SECOND,
                exit_code=0,
                reason="Completed",
                category="job.completed",
                note="finished training",
                phase="Succeeded",
            )
        self.job.succeeded(at + 40 * SECOND)

    def still_running(self, until: int) -> None:
        """The capture ends with this round still training: no more lines after `until`."""
        self.train_until(until)
        for member in self.members:
            if member.index not in self.ended:
                member.run.category = "job.completed"
                member.run.note = "still running at capture time"


class Job:
    """One experiment and its launcher."""

    def __init__(self, story: Story) -> None:
        self.story = story
        self.world = story.world
        self.exp = story.world.experiment
        self.training = Training.draw(story.rng, self.exp.framework)
        self.world_size = self.exp.ranks * self.exp.gpus_per_pod
        self.attempt = 0  # JobSet restart-attempt
        self.job_uid = self.exp.job_uid
        self.rounds: list[Round] = []
        self.network = self._network()
        self._ids = story.ids

    def _network(self) -> str:
        cloud = self.world.cloud.kind
        itype = self.world.node(self.world.rank_nodes[0]).instance_type
        if cloud == "azure" or (itype is not None and itype.name == "a3-ultragpu-8g"):
            return "ib"
        return "efa" if cloud == "aws" else "socket"

    # -- launcher identity ------------------------------------------------------------------

    def owner_ref(self) -> ObjRef:
        exp = self.exp
        if exp.launcher == "PyTorchJob":
            return ObjRef("PyTorchJob", exp.name, exp.namespace, exp.job_uid, "kubeflow.org/v1")
        if exp.launcher == "JobSet":
            return ObjRef(
                "Job", f"{exp.name}-{exp.replicated_job}-0", exp.namespace, self.job_uid, "batch/v1"
            )
        return ObjRef("Job", exp.name, exp.namespace, exp.job_uid, "batch/v1")

    def _controller(self) -> str:
        return "pytorchjob-controller" if self.exp.launcher == "PyTorchJob" else "job-controller"

    def _identity(self, index: int) -> dict[str, Any]:
        exp = self.exp
        ids = self._ids
        if exp.launcher == "PyTorchJob":
            kind, replica = ("master", 0) if index == 0 else ("worker", index - 1)
            name = f"{exp.name}-{kind}-{replica}"
            labels = {
                "training.kubeflow.org/job-name": exp.name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-index": str(replica),
                "training.kubeflow.org/replica-type": kind,
            }
            if kind == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            owner = {
                "apiVersion": "kubeflow.org/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "PyTorchJob",
                "name": exp.name,
                "uid": exp.job_uid,
            }
            return {
                "name": name,
                "labels": labels,
                "annotations": {},
                "owner": owner,
                "hostname": None,
                "subdomain": None,
                "master": f"{exp.name}-master-0",
                "restart_policy": "OnFailure",
            }
        if exp.launcher == "JobSet":
            job_name = f"{exp.name}-{exp.replicated_job}-0"
            labels = {
                "batch.kubernetes.io/controller-uid": self.job_uid,
                "batch.kubernetes.io/job-completion-index": str(index),
                "batch.kubernetes.io/job-name": job_name,
                "controller-uid": self.job_uid,
                "job-name": job_name,
                "jobset.sigs.k8s.io/job-global-index": "0",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/job-key": ids.hex(40),
                "jobset.sigs.k8s.io/jobset-name": exp.name,
                "jobset.sigs.k8s.io/replicatedjob-name": exp.replicated_job,
                "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
                "jobset.sigs.k8s.io/restart-attempt": str(self.attempt),
            }
            annotations = {
                "batch.kubernetes.io/job-completion-index": str(index),
                "jobset.sigs.k8s.io/jobset-name": exp.name,
                "jobset.sigs.k8s.io/replicatedjob-name": exp.replicated_job,
                "jobset.sigs.k8s.io/restart-attempt": str(self.attempt),
            }
            owner = {
                "apiVersion": "batch/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "Job",
                "name": job_name,
                "uid": self.job_uid,
            }
            return {
                "name": f"{job_name}-{index}-{ids.k8s_suffix()}",
                "labels": labels,
                "annotations": annotations,
                "owner": owner,
                "hostname": f"{job_name}-{index}",
                "subdomain": exp.name,
                "master": f"{job_name}-0.{exp.name}",
                "restart_policy": "Never",
            }
        labels = {
            "batch.kubernetes.io/controller-uid": exp.job_uid,
            "batch.kubernetes.io/job-completion-index": str(index),
            "batch.kubernetes.io/job-name": exp.name,
            "controller-uid": exp.job_uid,
            "experiment": exp.name,
            "job-name": exp.name,
        }
        owner = {
            "apiVersion": "batch/v1",
            "blockOwnerDeletion": True,
            "controller": True,
            "kind": "Job",
            "name": exp.name,
            "uid": exp.job_uid,
        }
        return {
            "name": f"{exp.name}-{index}-{ids.k8s_suffix()}",
            "labels": labels,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "owner": owner,
            "hostname": f"{exp.name}-{index}",
            "subdomain": exp.name,
            "master": f"{exp.name}-0.{exp.name}",
            "restart_policy": "Never",
        }

    def create_pod(self, index: int, at: int) -> Pod:
        exp = self.exp
        ident = self._identity(index)
        spec = training_spec(
            exp,
            rank_index=index,
            master_addr=ident["master"],
            sa_suffix=self._ids.k8s_suffix(),
            hostname=ident["hostname"],
            subdomain=ident["subdomain"],
            restart_policy=ident["restart_policy"],
        )
        membership = recognise(ident["name"], ident["labels"], ident["annotations"])
        rank = membership.rank if membership and membership.rank else str(index)
        pod = self.story.create_pod(
            at,
            name=ident["name"],
            namespace=exp.namespace,
            labels=ident["labels"],
            annotations=ident["annotations"],
            owner_refs=[ident["owner"]],
            spec=spec,
            container=exp.container,
            image=exp.image,
            image_id=exp.image_digest,
            qos=exp.qos_class,
            experiment=True,
            rank=rank,
            rank_index=index,
        )
        verb = "SuccessfulCreatePod" if exp.launcher == "PyTorchJob" else "SuccessfulCreate"
        self.story.event(
            at, self.owner_ref(), verb, f"Created pod: {pod.name}", component=self._controller()
        )
        return pod

    def voice(self, pod: Pod, index: int) -> logs.Voice:
        host = pod.spec.get("hostname") or pod.name
        return logs.Voice(
            host=host,
            node_rank=index,
            nproc=self.exp.gpus_per_pod,
            world=self.world_size,
            framework=self.training.framework,
            script=self.exp.script,
            ip=pod.ip or "10.0.0.1",
            network=self.network,
            rng=self.story.rng,
            skew=self.story.clocks.offset(f"node/{pod.node}"),
        )

    # -- rounds -----------------------------------------------------------------------------

    def launch(self, at: int, nodes: list[Node] | None = None) -> Round:
        """Create every rank's pod, schedule it, start it, rendezvous."""
        story = self.story
        nodes = nodes or [self.world.node(n) for n in self.world.rank_nodes]
        pods = [
            self.create_pod(index, at + index * story.rng.randint(50, 300) * MS)
            for index in range(self.exp.ranks)
        ]
        if self.exp.launcher == "PyTorchJob" and not self.rounds:
            for pod in pods:
                story.event(
                    at,
                    self.owner_ref(),
                    "SuccessfulCreateService",
                    f"Created service: {pod.name}",
                    component=self._controller(),
                )
        starts = []
        for index, pod in enumerate(pods):
            scheduled = pod.created_at + story.rng.randint(200, 2500) * MS
            story.schedule(pod, nodes[index], scheduled)
            starts.append(story.start(pod, scheduled + story.rng.randint(300, 1500) * MS))
        return self._rendezvous(list(zip(range(self.exp.ranks), pods, starts, strict=True)))

    def _rendezvous(self, started: list[tuple[int, Pod, Run]]) -> Round:
        story = self.story
        members = []
        blob = story.rng.random() < 0.3 and not self.rounds
        for index, pod, run in started:
            voice = self.voice(pod, index)
            assert run.started_at is not None
            story.log(run, logs.startup_lines(voice, run.started_at, config_blob=blob))
            members.append(Member(index, pod, run, voice))
        last = max(m.run.started_at or 0 for m in members)
        init = last + story.rng.randint(25, 70) * SECOND
        comm_id = story.ids.hex(16)
        for member in members:
            node = self.world.node(member.node)
            buses = [g.nccl_bus_id for g in node.gpus] or ["0"] * self.exp.gpus_per_pod
            story.log(member.run, logs.nccl_init_lines(member.voice, init, buses, comm_id))
        train_start = init + story.rng.randint(8, 25) * SECOND
        step = self.training.ckpt_step
        if step:
            story.log(
                members[0].run,
                logs.resume_lines(
                    members[0].voice, init, self.training.framework, self.exp.ckpt_dir, step
                ),
            )
            train_start += 45 * SECOND
        story.log(
            members[0].run,
            logs.training_banner(
                members[0].voice,
                train_start - SECOND,
                self.training.framework,
                self.training.max_steps,
            ),
        )
        new = Round(self, members, train_start, step, len(self.rounds))
        self.rounds.append(new)
        return new

    def relaunch(self, prev: Round, *, node_for: dict[int, Node] | None = None) -> Round:
        """Restart every rank after `prev` ended, the way this launcher restarts."""
        story = self.story
        node_for = node_for or {}
        exp = self.exp
        started: list[tuple[int, Pod, Run]] = []
        if exp.launcher == "JobSet":
            self.attempt += 1
            self.job_uid = story.ids.uid()
        ends = [m.run.finished_at or m.run.true_end or 0 for m in prev.members]
        last_end = max(ends)
        for member in prev.members:
            pod = member.pod
            run = member.run
            ended = run.finished_at if run.finished_at is not None else run.true_end
            assert ended is not None
            target = node_for.get(member.index)
            same_node = target is None or target.name == pod.node
            node = self.world.node(pod.node) if target is None else target  # type: ignore[arg-type]
            in_place = (
                exp.launcher == "PyTorchJob"
                and pod.deleted_at is None
                and pod.phase == "Running"
                and same_node
            )
            if in_place:
                start_at = story.back_off(pod, ended)
                started.append((member.index, pod, story.start(pod, start_at)))
                continue
            if exp.launcher == "JobSet":
                gone = pod.deleted_at or story.delete_pod(pod, last_end + 5 * SECOND, kill=False)
                created = max(gone, last_end) + story.rng.randint(2, 6) * SECOND
            elif exp.launcher == "PyTorchJob":
                if pod.deleted_at is not None:
                    gone = pod.deleted_at
                else:
                    at = ended + story.rng.randint(1, 4) * SECOND
                    gone = story.delete_pod(pod, at, kill=False)
                    story.event(
                        at,
                        self.owner_ref(),
                        "SuccessfulDeletePod",
                        f"Deleted pod: {pod.name}",
                        component=self._controller(),
                    )
                created = gone + story.rng.randint(1, 3) * SECOND
            else:
                created = ended + story.rng.randint(1, 4) * SECOND
            new_pod = self.create_pod(member.index, created)
            scheduled = created + story.rng.randint(300, 2500) * MS
            story.schedule(new_pod, node, scheduled)
            started.append(
                (
                    member.index,
                    new_pod,
                    story.start(new_pod, scheduled + story.rng.randint(300, 1500) * MS),
                )
            )
        return self._rendezvous(started)

    def succeeded(self, at: int) -> None:
        exp = self.exp
        if exp.launcher == "PyTorchJob":
            self.story.event(
                at,
                self.owner_ref(),
                "PyTorchJobSucceeded",
                f"PyTorchJob {exp.namespace}/{exp.name} successfully completed.",
                component=self._controller(),
            )
        else:
            self.story.event(
                at, self.owner_ref(), "Completed", "Job completed", component="job-controller"
            )

    def failed(self, at: int, failed_pod: Pod) -> None:
        exp = self.exp
        if exp.launcher == "PyTorchJob":
            kind = "Master" if failed_pod.rank_index == 0 else "Worker"
            self.story.event(
                at,
                self.owner_ref(),
                "PyTorchJobFailed",
                f"PyTorchJob {exp.namespace}/{exp.name} is failed because 1 {kind} "
                "replica(s) failed.",
                warning=True,
                component=self._controller(),
            )
        else:
            self.story.event(
                at,
                self.owner_ref(),
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                warning=True,
                component="job-controller",
            )


def minutes(story: Story, low: float, high: float) -> int:
    return int(story.rng.uniform(low, high) * MINUTE)
