"""The Elasticsearch backend end to end, through the official client against the REST stand-in:
ingest and explain by configuration alone, the API over it, and the errors a person meets (a
wrong URL, refused credentials, a missing privilege, a full write queue, a lapsed point in time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.standins.elastic import ElasticStandin
from whyjob.api.access import Access, Principal, digest
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.cli.app import app
from whyjob.cli.main import route
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.errors import IndexProblem
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.core.index.elastic import ElasticsearchIndex, ElasticSettings
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("es-bundle")
    truth = simulate("xid79", 7, root / "bundle")
    return root / "bundle", truth.experiment_name, truth.experiment_namespace


def test_ingest_and_explain_by_configuration_alone(
    bundle: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, name, namespace = bundle
    with ElasticStandin() as server:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"index:\n  backend: elasticsearch\n  urls: [{server.url}]\n  prefix: team\n"
        )
        runner = CliRunner()

        def run(*args: str) -> object:
            result = runner.invoke(app, route(["--config", str(config), *args]))
            assert result.exit_code == 0, result.output
            return result

        ingested = run("ingest", str(path))
        assert "into " + server.url in ingested.output  # type: ignore[attr-defined]
        told = run(name, "--json").output  # type: ignore[attr-defined]
        again = run("ingest", str(path)).output  # type: ignore[attr-defined]
        assert "stored 0" in again  # re-ingest is a no-op: every _id is a 409
        assert {"team-evidence", "team-pods", "team-experiments"} <= set(server.indices)
    # The same story as on SQLite, record for record.
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(path)])
        local = explain_experiment(index, load_rules(), name, namespace)
    import json

    remote = json.loads(told)
    assert remote["verdict"]["category"] == local.verdict.category == "gpu.xid"
    assert [a["evidence"] for a in remote["attempts"]] == [a.evidence for a in local.attempts]


def test_the_api_serves_from_elasticsearch(bundle: tuple[Path, str, str]) -> None:
    path, name, namespace = bundle
    with ElasticStandin() as server:
        settings = ElasticSettings([server.url])
        with ElasticsearchIndex(settings) as index:
            Ingestor(index, IngestOptions()).ingest([str(path)])
        token = "ops-token-0123456789"
        access = Access(tokens={digest(token): Principal("ops", frozenset({"*"}))})
        api = create_app(Service(settings, load_rules()), ApiOptions(access))
        with TestClient(api) as client:
            headers = {"Authorization": f"Bearer {token}"}
            answer = client.get(
                f"/api/v1/experiments/{namespace}/{name}/explanation", headers=headers
            )
            assert answer.status_code == 200 and answer.json()["verdict"]["category"] == "gpu.xid"
            listed = client.get("/api/v1/experiments", headers=headers).json()
            assert name in {row["name"] for row in listed}


def test_the_errors_say_what_to_fix() -> None:
    with pytest.raises(IndexProblem, match=r"cannot reach Elasticsearch at http://127\.0\.0\.1:9"):
        ElasticsearchIndex(ElasticSettings(["http://127.0.0.1:9"]))
    with ElasticStandin(api_key="right-key", read_only_key="reader-key") as server:
        with pytest.raises(IndexProblem, match="refused the credentials"):
            ElasticsearchIndex(ElasticSettings([server.url], api_key="wrong-key"))
        with pytest.raises(IndexProblem, match="lack a privilege"):
            ElasticsearchIndex(ElasticSettings([server.url], api_key="reader-key"))
        # The right key writes; a reader opens read-only and reads.
        with ElasticsearchIndex(ElasticSettings([server.url], api_key="right-key")) as index:
            index.write([Evidence(evidence_id("t", "1"), 1, "t", "k8s.event", "hello")])
        with ElasticsearchIndex(
            ElasticSettings([server.url], api_key="reader-key"), readonly=True
        ) as index:
            assert index.counts()["evidence"] == 1


def test_a_full_write_queue_and_a_lapsed_point_in_time_lose_nothing() -> None:
    records = [
        Evidence(evidence_id("t", str(n)), n, "t", "log.line", f"line {n}", node="n1")
        for n in range(12_000)
    ]
    with ElasticStandin() as server, ElasticsearchIndex(ElasticSettings([server.url])) as index:
        server.throttle(
            2
        )  # the next two bulk requests answer 429: the client backs off and retries
        assert index.write(records) == 12_000
        pages = iter(range(10))

        real_search = index._es.search

        def lapse_once(**kwargs: object) -> object:
            if "pit" in kwargs and next(pages) == 1:
                server.expire_pits()  # between the first and the second page
            return real_search(**kwargs)

        index._es.search = lapse_once  # type: ignore[method-assign]
        found = index.entity_evidence("node", ["n1"], 0, 20_000)
        assert [ev.ts for ev in found] == list(range(12_000))
