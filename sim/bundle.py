"""`simulate()`: build the world, tell the scenario, add the noise, write the bundle.

A bundle (paths relative to the output folder):

    truth.json                                   what really ended each attempt (truth.py)
    k8s/events.json                              kubectl get events -A -o json; every UPDATE of
                                                 a repeated event is its own item
    k8s/events.k8s.io.json                       the scheduler's and controllers' events through
                                                 events.k8s.io/v1
    k8s/pods/<ns>_<pod>_<uid>_<n>.json           kubectl get pod -o json, after each container
                                                 exit, at deletion, and at capture
    k8s/pods.yaml                                kubectl get pods -A -o yaml at capture
    k8s/nodes.json                               kubectl get nodes -o json at capture
    k8s/nodes/<node>_<n>.json                    kubectl get node -o json when a node changed
                                                 (kept for nodes deleted before capture)
    aws/{scaling-activities,instance-status,eventbridge}.json       AWS only
    gce/operations.json, gce/upcoming-maintenance/<node>.json       GCE only
    azure/scheduled-events/<node>.json                              Azure only
    dcgm/<node>/<unix-seconds>.prom              dcgm-exporter scrapes
    nodes/<node>/kern.log                        journalctl -k -o short-iso
    var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log        kubelet CRI logs

Determinism: every random choice comes from `random.Random` seeded by (seed, scenario, purpose),
never the global generator or the wall clock, so the same seed writes byte-identical files. The
experiment's story, the noise and the resourceVersion numbering each draw from their own
generator: switching noise off removes records without changing the experiment's names.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whyjob.sim.clock import MINUTE, SECOND, Clocks
from whyjob.sim.cloudapi import write_aws, write_azure, write_gce
from whyjob.sim.crilog import write_logs
from whyjob.sim.dcgm import write_dcgm
from whyjob.sim.ids import Ids
from whyjob.sim.incident import Incident
from whyjob.sim.journal import write_kernel
from whyjob.sim.kubectl import (
    dumps_json,
    dumps_yaml,
    event_core,
    event_v1,
    kube_list,
    render_node,
    render_pod,
)
from whyjob.sim.noise import add_noise, add_noise_nodes
from whyjob.sim.scenarios import SCENARIOS, Scenario
from whyjob.sim.story import Story
from whyjob.sim.truth import SCHEMA, Truth, build_truth
from whyjob.sim.world import (
    Cloud,
    World,
    build_cloud,
    build_experiment,
    make_node,
    make_pool,
    random_start,
)

__all__ = ["OWNED", "Plan", "plan", "simulate"]

# What a bundle consists of; rewriting a bundle removes exactly these first.
OWNED = ("truth.json", "k8s", "aws", "gce", "azure", "dcgm", "nodes", "var")


def simulate(scenario: str, seed: int, out: Path, *, noise: bool = True) -> Truth:
    """Write the bundle for `scenario` and `seed` under `out` (created); return its truth.

    A bundle already in `out` (recognised by its truth.json) is replaced. Raises KeyError naming
    the known scenarios for an unknown id, and FileExistsError when `out` holds files a bundle
    would overwrite but no earlier bundle's truth.json: the simulator never deletes what it
    did not write.
    """
    try:
        spec = SCENARIOS[scenario]
    except KeyError:
        raise KeyError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}") from None
    out = Path(out)
    existing = [name for name in OWNED if (out / name).exists()]
    if existing and not _is_bundle(out):
        raise FileExistsError(f"{out} holds {', '.join(existing)} but is not a bundle")
    for name in existing:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    story = _build(spec, seed, noise=noise)
    spec.tell(story)
    incident = story.inc
    incident.end = _latest(incident) + story.rng.randint(2, 6) * MINUTE
    # dcgm-exporter is always scraped; the capture keeps one scrape at each end of the window.
    incident.dcgm_times += [story.t0 + 2 * MINUTE, incident.end - 90 * SECOND]
    if noise:
        noise_rng = random.Random(f"{seed}/{scenario}/noise")
        chatter = Story(
            story.world, noise_rng, Ids(noise_rng), story.clocks, incident, t0=story.t0, noise=True
        )
        add_noise(chatter)
        incident.end = max(incident.end, _latest(incident) + MINUTE)
    _finish(story)
    incident.versions.assign(random.Random(f"{seed}/{scenario}/resourceVersion"))
    _write(out, story)
    truth = build_truth(
        scenario=scenario,
        seed=seed,
        noise=noise,
        world=story.world,
        incident=incident,
        offsets=_offsets(story),
    )
    (out / "truth.json").write_text(json.dumps(truth.to_json(), indent=2) + "\n")
    return truth


# ---------------------------------------------------------------------------------------------


def _is_bundle(out: Path) -> bool:
    try:
        return bool(json.loads((out / "truth.json").read_text()).get("schema") == SCHEMA)
    except (OSError, ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class Plan:
    """The choices a seed makes before anything is written."""

    cloud: str
    launcher: str
    framework: str
    ranks: int


def plan(scenario: str, seed: int) -> Plan:
    """Which cloud, launcher, framework and rank count `seed` picks for `scenario`, cheaply
    (without building the bundle): lets a test or a benchmark pick seeds per variant."""
    spec = SCENARIOS[scenario]
    rng = random.Random(f"{seed}/{spec.id}/story")
    return _draw_plan(spec, rng, Ids(rng))[0]


def _draw_plan(spec: Scenario, rng: random.Random, ids: Ids) -> tuple[Plan, int, Cloud]:
    t0 = random_start(rng)
    cloud = build_cloud(rng.choice(spec.clouds), rng, ids, t0)
    launcher = rng.choice(spec.launchers)
    framework = rng.choice(spec.frameworks)
    ranks = rng.randint(2, 8)
    return Plan(cloud.kind, launcher, framework, ranks), t0, cloud


def _build(spec: Scenario, seed: int, *, noise: bool) -> Story:
    rng = random.Random(f"{seed}/{spec.id}/story")
    ids = Ids(rng)
    chosen, t0, cloud = _draw_plan(spec, rng, ids)
    ranks = chosen.ranks
    exp = build_experiment(
        rng, ids, cloud, ranks=ranks, launcher=chosen.launcher, framework=chosen.framework
    )
    if spec.burstable and exp.memory_request_gi == exp.memory_limit_gi:
        exp.memory_request_gi = exp.memory_limit_gi // 2
    world = World(cloud, exp)
    karpenter = cloud.kind == "aws" and spec.spot and rng.random() < 0.5
    pool = make_pool(cloud, rng, ids, gpu=True, spot=spec.spot, ib=spec.ib, karpenter=karpenter)
    for index in range(ranks + spec.spares):
        created = t0 - rng.randint(2 * 60, 9 * 24 * 60) * MINUTE
        node = world.add(make_node(cloud, pool, rng, ids, created_at=created))
        (world.rank_nodes if index < ranks else world.spare_nodes).append(node.name)
    clocks = Clocks(f"{seed}/{spec.id}")
    incident = Incident()
    if noise:
        noise_rng = random.Random(f"{seed}/{spec.id}/noise-nodes")
        add_noise_nodes(world, noise_rng, Ids(noise_rng), t0)
    return Story(world, rng, ids, clocks, incident, t0=t0, noise=noise)


def _latest(incident: Incident) -> int:
    """The last moment anything in the incident happened."""
    times = [0]
    times += [v.at for e in incident.events for v in e.versions]
    times += [at for _, at, _, _ in incident.pod_snapshots]
    times += [at for _, at, _, _ in incident.node_snapshots]
    for pod in incident.pods:
        for run in pod.runs:
            times += [line.at for line in run.log[-3:]]
            if run.true_end is not None:
                times.append(run.true_end)
            if run.finished_at is not None:
                times.append(run.finished_at)
    times += [at for lines in incident.kernel.values() for at, _ in lines]
    times += [a.end or a.start for a in incident.asg_activities]
    times += [e.at for e in incident.bridge_events]
    times += [o.end for o in incident.gce_operations]
    times += incident.dcgm_times
    times += [up for windows in incident.node_down.values() for _, up in windows if up]
    return max(times)


def _finish(story: Story) -> None:
    """Capture time: the last snapshot of every pod still there, fresh node heartbeats."""
    incident = story.inc
    end = incident.end
    for pod in list(incident.pods):
        if pod.deleted_at is None or pod.deleted_at > end:
            story.snapshot(pod, end - story.rng.randint(5, 50) * SECOND)
    for node in story.world.nodes.values():
        if node.exists_at(end) and not _down_at(incident, node.name, end):
            node.heartbeat(end - story.rng.randint(1, 40) * SECOND)


def _down_at(incident: Incident, node: str, at: int) -> bool:
    return any(
        down <= at and (up is None or at < up) for down, up in incident.node_down.get(node, [])
    )


def _offsets(story: Story) -> dict[str, int]:
    for source in ("apiserver", "events", "kubelet", "cloud", "dcgm"):
        story.clocks.offset(source)
    for name in story.world.nodes:
        story.clocks.offset(f"node/{name}")
    return dict(story.clocks.offsets)


# ---------------------------------------------------------------------------------------------
# writing


def _write(out: Path, story: Story) -> None:
    incident = story.inc
    world = story.world
    clocks = story.clocks
    k8s = out / "k8s"
    (k8s / "pods").mkdir(parents=True, exist_ok=True)
    (k8s / "nodes").mkdir(parents=True, exist_ok=True)

    versions = sorted(
        ((event, index) for event in incident.events for index in range(len(event.versions))),
        key=lambda item: (item[0].versions[item[1]].at, item[0].versions[item[1]].slot.seq),
    )
    core = [event_core(event, index, clocks) for event, index in versions]
    (k8s / "events.json").write_bytes(dumps_json(kube_list(core)))
    modern = [
        event_v1(event, index, clocks) for event, index in versions if event.component != "kubelet"
    ]
    (k8s / "events.k8s.io.json").write_bytes(dumps_json(kube_list(modern)))

    counters: dict[str, int] = {}
    for pod, _at, slot, body in incident.pod_snapshots:
        body["metadata"]["resourceVersion"] = str(slot)
        number = counters.get(pod.uid, 0)
        counters[pod.uid] = number + 1
        name = f"{pod.namespace}_{pod.name}_{pod.uid}_{number}.json"
        (k8s / "pods" / name).write_bytes(dumps_json(body))

    present = [
        pod for pod in incident.pods if pod.deleted_at is None or pod.deleted_at > incident.end
    ]
    last_body: dict[str, dict[str, Any]] = {}
    for pod, _at, _slot, body in incident.pod_snapshots:
        last_body[pod.uid] = body
    items = [last_body.get(pod.uid) or render_pod(pod, clocks) for pod in present]
    items.sort(key=lambda body: (body["metadata"]["namespace"], body["metadata"]["name"]))
    (k8s / "pods.yaml").write_bytes(dumps_yaml(kube_list(items)))

    node_counters: dict[str, int] = {}
    for name, _at, slot, body in incident.node_snapshots:
        body["metadata"]["resourceVersion"] = str(slot)
        number = node_counters.get(name, 0)
        node_counters[name] = number + 1
        (k8s / "nodes" / f"{name}_{number}.json").write_bytes(dumps_json(body))
    nodes = []
    # Heartbeats rewrite every node every few seconds, so their versions sit near the top.
    top = max((slot.value for slot in incident.versions.slots), default=1)
    for index, node in enumerate(world.nodes.values()):
        if not node.exists_at(incident.end):
            continue
        body = render_node(node, world.cloud, clocks)
        body["metadata"]["resourceVersion"] = str(top + 7 * index + 3)
        nodes.append(body)
    nodes.sort(key=lambda body: body["metadata"]["name"])
    (k8s / "nodes.json").write_bytes(dumps_json(kube_list(nodes)))

    {"aws": write_aws, "gce": write_gce, "azure": write_azure}[world.cloud.kind](
        out, world, incident, clocks
    )
    write_dcgm(out, world, incident, clocks)
    write_kernel(out, world, incident, clocks)
    write_logs(out, incident, clocks)
