"""An index holding two teams' experiments (from the simulator, through real ingest), and an
API over it with a token for each team and one for an operator who reads everything."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from whyjob.api.access import Access, Principal, TrustedProxy
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate

TOKENS = {
    "team-a": "a-token-0123456789",
    "team-b": "b-token-0123456789",
    "ops": "ops-token-0123456789",
}


@dataclass
class World:
    index: Path
    a: tuple[str, str]  # (namespace, experiment) of team A: an Xid 79 on one rank
    b: tuple[str, str]  # team B: the same user exception on every retry
    c: tuple[str, str]  # a maintenance storm
    service: Service


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("api-world")
    index_path = root / "index.sqlite"
    found = []
    with SqliteIndex(index_path) as index:
        for scenario, seed in (("xid79", 7), ("restart_loop", 3), ("maintenance_storm", 2)):
            truth = simulate(scenario, seed, root / scenario)
            Ingestor(index, IngestOptions()).ingest([str(root / scenario)])
            found.append((truth.experiment_namespace, truth.experiment_name))
    return World(index_path, found[0], found[1], found[2], Service(index_path, load_rules()))


def access_for(world: World) -> Access:
    from whyjob.api.access import digest

    return Access(
        tokens={
            digest(TOKENS["team-a"]): Principal("team-a", frozenset({world.a[0]})),
            digest(TOKENS["team-b"]): Principal("team-b", frozenset({world.b[0]})),
            digest(TOKENS["ops"]): Principal("ops", frozenset({"*"})),
        },
        proxy=TrustedProxy(proxies=["10.0.0.0/8"], groups={"team-a-devs": [world.a[0]]}),
    )


@dataclass
class Api:
    client: TestClient
    audit: io.StringIO

    def get(self, path: str, who: str | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
        headers = dict(kwargs.pop("headers", {}) or {})  # type: ignore[call-overload]
        if who is not None:
            headers["Authorization"] = f"Bearer {TOKENS[who]}"
        return self.client.get(path, headers=headers, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def api(world: World) -> Iterator[Api]:
    audit = io.StringIO()
    app = create_app(world.service, ApiOptions(access_for(world), audit=audit, login_links=True))
    with TestClient(app) as client:
        yield Api(client, audit)
