"""The HTTP API and pages: what each team can read, through every route, and nothing more."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.api.conftest import TOKENS, Api, World
from whyjob.core.index import SqliteIndex


def _routes(namespace: str, name: str) -> list[str]:
    return [
        f"/api/v1/experiments/{namespace}/{name}",
        f"/api/v1/experiments/{namespace}/{name}/explanation",
        f"/api/v1/experiments/{namespace}/{name}/timeline",
        f"/experiments/{namespace}/{name}",
    ]


def _record_ids(world: World, namespace: str) -> tuple[str, str]:
    """A pod record of the namespace's experiment, and a node record of a node only it used."""
    with SqliteIndex(world.index, readonly=True) as index:
        pods = index._pods("namespace = ? AND experiment IS NOT NULL", (namespace,))
        pod_record = index.pod_evidence([pods[0].uid], 0, 2**62)[0]
        others = {p.node for p in index._pods("namespace != ?", (namespace,)) if p.node}
        node = next(p.node for p in pods if p.node and p.node not in others)
        # A record of that node while the team's pods were on it.
        on_node = [p for p in pods if p.node == node]
        start = min(p.created or p.seen for p in on_node)
        node_record = index.entity_evidence("node", [node], start, max(p.seen for p in on_node))[0]
    return pod_record.public_id, node_record.public_id


def test_each_team_lists_only_its_own_experiments(api: Api, world: World) -> None:
    mine = {(e["namespace"], e["name"]) for e in api.get("/api/v1/experiments", "team-a").json()}
    assert world.a in mine and world.b not in mine
    assert {e["namespace"] for e in api.get("/api/v1/experiments", "team-a").json()} == {world.a[0]}
    everyone = {(e["namespace"], e["name"]) for e in api.get("/api/v1/experiments", "ops").json()}
    assert {world.a, world.b} <= everyone
    page = api.get("/", "team-a").text
    assert world.a[1] in page and world.b[1] not in page


@pytest.mark.parametrize("reader", ["team-a", "team-b"])
def test_another_teams_experiment_looks_like_no_experiment_through_every_route(
    api: Api, world: World, reader: str
) -> None:
    own, other = (world.a, world.b) if reader == "team-a" else (world.b, world.a)
    for path in _routes(*own):
        assert api.get(path, reader).status_code == 200, path
    for path in _routes(*other):
        refused = api.get(path, reader)
        missing = api.get(path.replace(other[1], other[1] + "-nope"), reader)
        assert refused.status_code == missing.status_code == 404, path
        # Refused and absent read the same: the answer only repeats what was asked.
        assert refused.json() == {"detail": f"no experiment {other[1]!r} in namespace {other[0]!r}"}
        nope = other[1] + "-nope"
        assert missing.json() == {"detail": f"no experiment {nope!r} in namespace {other[0]!r}"}
    pod_id, node_id = _record_ids(world, other[0])
    for path in (
        f"/api/v1/evidence/{pod_id}",
        f"/api/v1/evidence/{node_id}",
        f"/evidence/{pod_id}",
    ):
        assert api.get(path, reader).status_code == 404, path
        assert api.get(path, "ops").status_code == 200, path
    mine = _record_ids(world, own[0])
    assert all(api.get(f"/api/v1/evidence/{i}", reader).status_code == 200 for i in mine)


def test_no_token_a_wrong_token_and_the_proxy_headers(api: Api, world: World) -> None:
    assert api.get("/api/v1/experiments").status_code == 401
    assert (
        api.get("/api/v1/experiments", headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    proxied = {"X-Forwarded-User": "ana@example.com", "X-Forwarded-Groups": "team-a-devs,staff"}
    # The test client connects from "testclient", not one of the proxy's addresses: refused.
    assert api.get("/api/v1/experiments", headers=proxied).status_code == 401
    assert api.get("/healthz").status_code == 200
    from prometheus_client.parser import text_string_to_metric_families

    exposition = api.get("/metrics")
    assert exposition.headers["content-type"].startswith("text/plain; version=")
    (requests,) = text_string_to_metric_families(exposition.text)
    counted = {(s.labels["method"], s.labels["status"]): s.value for s in requests.samples}
    assert requests.name == "whyjob_api_requests" and counted[("GET", "401")] >= 3


def test_the_explanation_is_the_cli_json_and_the_timeline_has_lanes(api: Api, world: World) -> None:
    namespace, name = world.a
    document = api.get(f"/api/v1/experiments/{namespace}/{name}/explanation", "team-a").json()
    assert document["schema"] == "whyjob.explanation/v1"
    assert document["verdict"]["category"] == "gpu.xid"
    view = api.get(f"/api/v1/experiments/{namespace}/{name}/timeline", "team-a").json()
    kinds = {lane["kind"] for lane in view["lanes"]}
    assert {"rank", "node"} <= kinds
    bars = [b for lane in view["lanes"] for b in lane["bars"]]
    assert {b["category"] for b in bars} >= {"gpu.xid", "peer.failure"}
    assert api.get("/openapi.json").status_code == 401  # behind a token unless api.open_docs
    assert api.get("/openapi.json", "team-a").json()["paths"].keys() >= {
        "/api/v1/experiments",
        "/api/v1/experiments/{namespace}/{name}/explanation",
        "/api/v1/evidence/{evidence_id}",
    }


def test_every_request_is_audited(api: Api, world: World) -> None:
    api.get("/api/v1/experiments", "team-b")
    api.get(f"/api/v1/experiments/{world.a[0]}/{world.a[1]}", "team-b")
    api.get("/api/v1/experiments")
    lines = [orjson.loads(line) for line in api.audit.getvalue().splitlines()]
    assert [(e["who"], e["path"].split("/")[-1], e["status"]) for e in lines] == [
        ("token:team-b", "experiments", 200),
        ("token:team-b", world.a[1], 404),
        ("anonymous", "experiments", 401),
    ]


def test_a_login_link_sets_the_cookie_for_the_browser(api: Api, world: World) -> None:
    answer = api.client.get(f"/login?token={TOKENS['team-a']}&next=/", follow_redirects=False)
    assert answer.status_code == 303 and "httponly" in answer.headers["set-cookie"].lower()
    assert api.client.get("/").status_code == 200  # the cookie now stands for the token
    assert TOKENS["team-a"] not in api.audit.getvalue() and "token=REDACTED" in api.audit.getvalue()
    assert api.client.get("/login?token=wrong&next=/", follow_redirects=False).status_code == 401


def test_the_trusted_proxy_is_believed_only_from_its_addresses(world: World) -> None:
    from tests.api.conftest import access_for

    access = access_for(world)
    headers = {"x-forwarded-user": "ana@example.com", "x-forwarded-groups": "team-a-devs, staff"}
    ana = access.principal("10.1.2.3", headers)
    assert ana is not None and ana.name == "ana@example.com" and ana.via == "proxy"
    assert ana.may_read(world.a[0]) and not ana.may_read(world.b[0])
    assert access.principal("192.168.0.9", headers) is None  # anyone can send the header
    assert access.principal("10.1.2.3", {"x-forwarded-groups": "team-a-devs"}) is None  # no user


def test_the_documented_serving_sections_are_valid(tmp_path: Path) -> None:
    import re

    from whyjob.api.config import load_surface_config

    docs = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    example = next(b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "alerts:" in b)
    path = tmp_path / "config.yaml"
    path.write_text(example)
    config = load_surface_config(path)
    assert config["api"]["groups"] == {"team-a-devs": ["team-a", "team-a-dev"], "sre": ["*"]}
    assert config["alerts"]["window"] == 6 * 3600
    assert config["slack"]["routes"]["ml-*"] == ["#ml-alerts"]


def test_preflight_answers_as_the_command_does_to_anyone_signed_in(api: Api, world: World) -> None:
    import sqlite3

    from whyjob.core.timeutil import format_ts
    from whyjob.explain.preflight import preflight
    from whyjob.explain.ruleset import load_rules

    with sqlite3.connect(world.index) as db:  # team A's Xid 79, the node it fell on
        node, ts = db.execute(
            "SELECT node, ts FROM evidence WHERE kind = 'gpu.xid' AND node IS NOT NULL "
            "AND json_extract(attrs, '$.xid') = 79"
        ).fetchone()
    with SqliteIndex(world.index, readonly=True) as index:
        expected = preflight(index, load_rules(), node, now=ts + 60_000).to_json()
    path = f"/api/v1/nodes/{node}/preflight"
    at = format_ts(ts + 60_000, precise=True)
    assert api.get(path, params={"at": at}).status_code == 401
    for who in ("team-b", "ops"):  # node-level evidence only: nothing of a team's own in it
        got = api.get(path, who, params={"at": at})
        assert got.status_code == 200
        assert got.json()["verdict"] == "unsafe"
        assert got.json() == expected
    assert api.get(path, "ops", params={"window": "soon"}).status_code == 422
    unknown = api.get("/api/v1/nodes/no-such-node/preflight", "ops")
    assert unknown.json()["verdict"] == "unknown"


def test_the_command_asks_a_real_server_as_a_launcher_would(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`whyjob preflight --server` (an init container's call) against uvicorn serving the API."""
    import sqlite3
    import threading
    import time

    import uvicorn
    from typer.testing import CliRunner

    from tests.api.conftest import access_for
    from tests.standins.services import free_port
    from whyjob.api.app import ApiOptions, create_app
    from whyjob.cli.app import app as cli
    from whyjob.core.timeutil import format_ts

    with sqlite3.connect(world.index) as db:
        node, ts = db.execute(
            "SELECT node, ts FROM evidence WHERE kind = 'gpu.xid' AND node IS NOT NULL "
            "AND json_extract(attrs, '$.xid') = 79"
        ).fetchone()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(world.service, ApiOptions(access_for(world))), port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        url = f"http://127.0.0.1:{port}"
        runner = CliRunner()
        args = ["preflight", node, "--server", url, "--at", format_ts(ts + 60_000)]
        monkeypatch.setenv("WHYJOB_TOKEN", TOKENS["team-b"])
        unsafe = runner.invoke(cli, args)
        assert unsafe.exit_code == 1, unsafe.output
        assert f"{node}: UNSAFE" in unsafe.output and "Xid 79" in unsafe.output
        safe = runner.invoke(
            cli, ["preflight", node, "--server", url, "--at", format_ts(ts - 60_000)]
        )
        assert safe.exit_code == 0, safe.output
        monkeypatch.setenv("WHYJOB_TOKEN", "wrong")
        assert runner.invoke(cli, args).exit_code == 2  # refused: a usage error, said on stderr
    finally:
        server.should_exit = True
        thread.join(10)
    down = CliRunner().invoke(cli, ["preflight", node, "--server", url])  # nobody listens now
    assert down.exit_code == 2 and "could not ask" in down.output
