"""Several clusters in one index: the same incident imported as two clusters' stays two
experiments, each explained from its own records only, and a bare name asks which."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from whyjob.api.access import Access, Principal, digest
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.collector.live.health import Health
from whyjob.collector.live.sink import Batch, Writer
from whyjob.core.errors import WhyjobError
from whyjob.core.evidence import parse_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate

CLUSTERS = ("us-east", "eu-west")


@dataclass
class Twins:
    path: Path
    namespace: str
    name: str


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Twins:
    """Two clusters, each with an experiment of the same name and namespace: a simulated Xid 79
    incident in us-east, and another in eu-west renamed to match it (its pods, uids and nodes
    its own, as two clusters' are)."""
    root = tmp_path_factory.mktemp("twins")
    first = simulate("xid79", 7, root / "us-east")
    second = simulate("xid79", 8, root / "eu-west")
    for path in (root / "eu-west").rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            for old, new in (
                (second.experiment_name, first.experiment_name),
                (second.experiment_namespace, first.experiment_namespace),
            ):
                text = text.replace(old.encode(), new.encode())
            path.write_bytes(text)
        if second.experiment_name in path.name:
            path.rename(
                path.with_name(path.name.replace(second.experiment_name, first.experiment_name))
            )
    path = root / "index.sqlite"
    with SqliteIndex(path) as index:
        for cluster in CLUSTERS:
            Ingestor(index, IngestOptions(cluster=cluster)).ingest([str(root / cluster)])
    return Twins(path, first.experiment_namespace, first.experiment_name)


def test_two_clusters_same_name_stay_two_experiments(twins: Twins) -> None:
    rules = load_rules()
    with SqliteIndex(twins.path, readonly=True) as index:
        found = index.experiments(twins.name)
        assert sorted(e.cluster for e in found) == sorted(CLUSTERS)
        with pytest.raises(WhyjobError, match=r"several clusters \(eu-west, us-east\)"):
            explain_experiment(index, rules, twins.name)
        for cluster in CLUSTERS:
            explanation = explain_experiment(index, rules, twins.name, cluster=cluster)
            assert explanation.verdict.category == "gpu.xid"
            assert explanation.experiment.cluster == cluster
            cited = {e for a in explanation.attempts for e in a.evidence}
            cited |= {e for step in explanation.chain for e in step.evidence}
            cited |= {t.id for t in explanation.timeline}
            records = index.get([parse_id(e) for e in cited])
            assert records and {r.cluster for r in records} <= {cluster, None}
            pods = index.experiment_pods(twins.name, twins.namespace, cluster)
            assert {a.pod_uid for a in explanation.attempts} <= {p.uid for p in pods}


def test_a_record_of_two_clusters_is_two_records(twins: Twins, tmp_path: Path) -> None:
    bundle = str(twins.path.parent / "us-east")
    with SqliteIndex(tmp_path / "one.sqlite") as one, SqliteIndex(tmp_path / "two.sqlite") as two:
        Ingestor(one, IngestOptions(cluster="us-east")).ingest([bundle])
        for cluster in CLUSTERS:  # the same files, as if both clusters had written them
            Ingestor(two, IngestOptions(cluster=cluster)).ingest([bundle])
        assert two.counts()["evidence"] == 2 * one.counts()["evidence"]
        Ingestor(two, IngestOptions(cluster="us-east")).ingest([bundle])  # again: nothing new
        assert two.counts()["evidence"] == 2 * one.counts()["evidence"]
        # A node of one name in two clusters is two nodes: each its own instance binding.
        assert two.counts()["bindings"] == 2 * one.counts()["bindings"]
        node = next(iter(one.node_spans(0, 2**62)))
        every = two.bindings("node.instance", subjects=[node])
        assert sorted(b.cluster or "" for b in every) == sorted(CLUSTERS)
        (mine,) = two.bindings("node.instance", subjects=[node], cluster="eu-west")
        assert mine.cluster == "eu-west"
        assert two.bindings("node.instance", subjects=[node], cluster="") == []


def test_the_cli_and_the_api_ask_which_cluster(twins: Twins) -> None:
    from typer.testing import CliRunner

    from whyjob.cli.app import app
    from whyjob.cli.main import route

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, route(["--index", str(twins.path), *args]))

    bare = run(twins.name)
    assert bare.exit_code != 0 and "pass --cluster" in bare.output
    chosen = run(twins.name, "--cluster", "eu-west", "--json")
    assert chosen.exit_code == 0 and '"cluster": "eu-west"' in chosen.output
    listed = run("experiments")
    assert "cluster" in listed.output.splitlines()[0] and "us-east" in listed.output
    token = "ops-token-0123456789"
    access = Access(tokens={digest(token): Principal("ops", frozenset({"*"}))})
    api = create_app(Service(twins.path, load_rules()), ApiOptions(access))
    with TestClient(api) as client:
        headers = {"Authorization": f"Bearer {token}"}
        path = f"/api/v1/experiments/{twins.namespace}/{twins.name}"
        assert client.get(path, headers=headers).status_code == 409
        answer = client.get(path + "?cluster=us-east", headers=headers)
        assert answer.status_code == 200 and answer.json()["experiment"]["cluster"] == "us-east"
        rows = client.get("/api/v1/experiments", headers=headers).json()
        assert sorted(r["cluster"] for r in rows if r["name"] == twins.name) == sorted(CLUSTERS)


def test_each_clusters_collector_keeps_its_own_resume_points(tmp_path: Path) -> None:
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        for cluster, token in (("us-east", "rv-100"), (None, "rv-7")):
            writer = Writer(index, Health(), cluster=cluster).start()
            done = threading.Event()
            writer.put(Batch("kubernetes", "watch", [], {"k8s/pods": token}, done))
            assert done.wait(10)
            writer.stop()
        assert index.checkpoints() == {"us-east|k8s/pods": "rv-100", "k8s/pods": "rv-7"}


def test_the_fleet_tells_two_clusters_nodes_of_one_name_apart(twins: Twins, tmp_path: Path) -> None:
    import re
    import shutil
    import uuid

    from whyjob.explain.fleet import build_fleet, fleet_window
    from whyjob.explain.nodehistory import node_history
    from whyjob.explain.preflight import node_records

    # The same incident in a second cluster whose nodes are named as the first's: its pods and
    # GPUs are its own (new UUIDs), the node names are not.
    rules = load_rules()
    bundle = twins.path.parent / "us-east"
    copy = tmp_path / "eu-west"
    shutil.copytree(bundle, copy)
    uuids = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def other(text: str) -> str:
        return uuids.sub(lambda m: str(uuid.uuid5(uuid.NAMESPACE_OID, m[0])), text)

    for path in sorted(copy.rglob("*"), key=lambda p: -len(p.parts)):  # deepest first
        if path.is_file():
            path.write_text(
                other(path.read_text(errors="surrogateescape")), errors="surrogateescape"
            )
        path.rename(path.with_name(other(path.name)))  # /var/log/pods/NS_POD_UID/
    with SqliteIndex(tmp_path / "one.sqlite") as one, SqliteIndex(tmp_path / "two.sqlite") as two:
        Ingestor(one, IngestOptions()).ingest([str(bundle)])
        for cluster, files in zip(CLUSTERS, (bundle, copy), strict=True):
            Ingestor(two, IngestOptions(cluster=cluster)).ingest([str(files)])
        since, until = fleet_window(one, "365d", None)
        alone = build_fleet(one, rules, since=since, until=until)
        both = build_fleet(two, rules, since=since, until=until)
        worst = alone.nodes[0]
        assert "@" not in worst.node and worst.by_cause["gpu.xid"] >= 1
        twins_of_worst = [n for n in both.nodes if n.node.split("@")[0] == worst.node]
        assert sorted(n.node for n in twins_of_worst) == sorted(
            f"{worst.node}@{c}" for c in CLUSTERS
        )
        # Each is the one machine it was, not the two added up.
        assert all(
            n.by_cause == worst.by_cause and n.faults == worst.faults for n in twins_of_worst
        )
        history = node_history(two, rules, both, f"{worst.node}@eu-west")
        assert history.entries and history.health.node == f"{worst.node}@eu-west"
        cited = two.get([parse_id(e.evidence) for e in history.entries if e.evidence])
        assert cited and {r.cluster for r in cited} <= {"eu-west", None}
        records = node_records(two, f"{worst.node}@us-east", since, until)
        assert records and {r.cluster for r in records} <= {"us-east", None}
