"""`whyjob nodes`, `whyjob gpus` and `whyjob report` on a fleet of simulated incidents imported
through the real readers: hardware first, a node's history, files pandas reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from tests.cli.conftest import Run
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex
from whyjob.sim import simulate

SCHEMA = json.loads((Path(__file__).parents[2] / "core" / "schema" / "fleet.v1.json").read_text())
# Two hardware failures among failures that are not the node's doing.
SCENARIOS = (("cuda_oom", 2), ("xid79", 7), ("restart_loop", 3), ("node_lost", 4), ("spot", 5))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The index, and the node each scenario's root failure happened on."""
    root = tmp_path_factory.mktemp("fleet")
    path = root / "index.sqlite"
    nodes = {}
    with SqliteIndex(path) as index:
        for scenario, seed in SCENARIOS:
            truth = simulate(scenario, seed, root / scenario)
            Ingestor(index, IngestOptions()).ingest([str(root / scenario)])
            roots = [
                a for a in truth.attempts if a.category not in ("peer.failure", "job.completed")
            ]
            nodes[scenario] = roots[0].node
    return path, nodes


def test_nodes_whose_hardware_failed_come_first(
    run: Run, fleet: tuple[Path, dict[str, str]]
) -> None:
    path, nodes = fleet
    result = run("nodes", "--since", "365d", index=path)
    assert result.exit_code == 0, result.output
    lines = [line.split()[0] for line in result.output.splitlines()[2:4]]
    assert set(lines) == {nodes["xid79"], nodes["node_lost"]}
    assert "runs failed first" in result.output.splitlines()[0]
    document = json.loads(run("nodes", "--since", "365d", "--json", index=path).output)
    jsonschema.validate(document, SCHEMA)
    assert {n["node"] for n in document["nodes"][:2]} == {nodes["xid79"], nodes["node_lost"]}
    assert document["nodes"][0]["hardware_runs"] >= 1
    assert all(n["hardware_runs"] == 0 for n in document["nodes"][2:])


def test_one_node_has_its_history(run: Run, fleet: tuple[Path, dict[str, str]]) -> None:
    path, nodes = fleet
    result = run("nodes", nodes["xid79"], "--since", "365d", index=path)
    assert result.exit_code == 0, result.output
    assert "fault " in result.output and "Xid" in result.output and "gpu.xid" in result.output
    document = json.loads(
        run("nodes", nodes["xid79"], "--since", "365d", "--json", index=path).output
    )
    assert document["schema"] == "whyjob.node/v1" and document["xids"] == {"79": 1}
    unknown = run("nodes", "no-such-node", "--since", "365d", index=path)
    assert unknown.exit_code == 1 and "nothing about node no-such-node" in unknown.output


def test_gpus_and_usage_errors(
    run: Run, fleet: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, nodes = fleet
    result = run("gpus", "--since", "365d", index=path)
    assert result.exit_code == 0, result.output
    assert nodes["xid79"] in result.output and "79 x1" in result.output
    assert run("nodes", "--since", "soon", index=path).exit_code == 2
    assert run("nodes", index=tmp_path / "empty.sqlite").exit_code == 3


def test_report_writes_tables_pandas_reads_back(
    run: Run, fleet: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, _ = fleet
    out = tmp_path / "report"
    result = run("report", "--since", "365d", "--out", str(out), index=path)
    assert result.exit_code == 0, result.output
    document = json.loads(run("nodes", "--since", "365d", "--json", index=path).output)
    for name in ("lost_by_cause_week", "lost_by_namespace_week", "restart_loops", "mtbf_by_pool",
                 "mtbf_by_instance_type", "top_nodes", "top_gpus"):  # fmt: skip
        csv, parquet = pd.read_csv(out / f"{name}.csv"), pd.read_parquet(out / f"{name}.parquet")
        assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet), name
    by_cause = pd.read_parquet(out / "lost_by_cause_week.parquet")
    assert by_cause["gpu_hours_lost"].sum() == pytest.approx(document["gpu_hours_lost"], abs=0.5)
    assert by_cause["runs"].sum() == document["runs"]
    loops = pd.read_parquet(out / "restart_loops.parquet")
    assert (
        loops["failed_runs"].min() >= 3
    )  # the restart_loop scenario's same error, again and again
    pools = pd.read_csv(out / "mtbf_by_pool.csv")
    assert pools["failures"].sum() >= 2 and (pools["node_hours"] > 0).all()


def test_explain_never_imports_pandas(fleet: tuple[Path, dict[str, str]]) -> None:
    path, _ = fleet
    probe = (
        "import sys\n"
        "from whyjob.cli.main import main\n"
        f"sys.argv = ['whyjob', '--index', {str(path)!r}, 'experiments']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "from whyjob.core.index import SqliteIndex\n"
        "from whyjob.explain.engine import explain_experiment\n"
        "from whyjob.explain.ruleset import load_rules\n"
        f"index = SqliteIndex(__import__('pathlib').Path({str(path)!r}), readonly=True)\n"
        "e = index.experiments(limit=1)[0]\n"
        "explain_experiment(index, load_rules(), e.name, e.namespace)\n"
        "print('pandas' in sys.modules, 'pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False False"
