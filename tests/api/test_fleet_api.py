"""The fleet over HTTP: the same document as `whyjob nodes --json`, per caller."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.api.conftest import Api, World

SCHEMA = json.loads((Path(__file__).parents[2] / "core" / "schema" / "fleet.v1.json").read_text())


def test_the_fleet_ranks_the_xid_node_first_and_answers_each_team_for_itself(
    api: Api, world: World
) -> None:
    answer = api.get("/api/v1/fleet?since=365d", "ops")
    assert answer.status_code == 200, answer.text
    document = answer.json()
    jsonschema.validate(document, SCHEMA)
    first = document["nodes"][0]
    assert first["by_cause"] == {"gpu.xid": 1} and first["xids"] == {"79": 1}
    assert document["hidden_experiments"] == 0
    team = api.get("/api/v1/fleet?since=365d", "team-a").json()
    readable = api.get("/api/v1/experiments", "team-a").json()
    assert team["experiments"] == len(readable) < document["experiments"]
    # Left to itself, a team's window ends at its own newest run; over the same window, the
    # experiments it may not read are counted, never named.
    assert team["until"] <= document["until"]
    same = api.get(f"/api/v1/fleet?since=365d&until={document['until']}", "team-a").json()
    assert same["experiments"] + same["hidden_experiments"] == document["experiments"]
    assert world.b[0] != world.a[0] and world.b[1] not in json.dumps(team)
    assert api.get("/api/v1/fleet").status_code == 401


def test_a_node_s_history_and_the_errors(api: Api) -> None:
    node = api.get("/api/v1/fleet?since=365d", "ops").json()["nodes"][0]["node"]
    history = api.get(f"/api/v1/nodes/{node}?since=365d", "ops")
    assert history.status_code == 200, history.text
    body = history.json()
    assert body["schema"] == "whyjob.node/v1" and body["node"] == node
    assert any(e["what"] == "fault" and "Xid" in e["message"] for e in body["history"])
    assert api.get("/api/v1/nodes/no-such-node?since=365d", "ops").status_code == 404
    assert api.get("/api/v1/fleet?since=whenever", "ops").status_code == 422
