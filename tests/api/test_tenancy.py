"""Tenants kept apart on shared nodes: another team's pods ran and failed on the very node that
team A's experiment died on; nothing any route answers team A names them. And the headers
every answer carries."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shutil
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import TOKENS, World, access_for
from whyjob.api.access import Principal
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules

OTHER_NS, OTHER_EXP, OTHER_POD = "tenant-other", "other-secret-exp", "other-secret-exp-worker-0"


@pytest.fixture(scope="module")
def shared(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """World A's index, with another tenant's pod on A's failed node: it failed there too,
    its events and its kernel-free records name it and its namespace."""
    root = tmp_path_factory.mktemp("shared")
    path = root / "index.sqlite"
    shutil.copy(world.index, path)
    namespace, name = world.a
    with SqliteIndex(path) as index:
        explanation = world.service.explanation(Principal("ops", frozenset({"*"})), namespace, name)
        attempt = next(a for a in explanation.attempts if a.category == "gpu.xid")
        node, ended = attempt.node, attempt.ended_at
        assert node and ended
        index.upsert_pods([PodRecord("other-uid", OTHER_NS, OTHER_POD, seen=ended - 600_000,
                                     experiment=OTHER_EXP, node=node, launcher="PyTorchJob",
                                     label="training.kubeflow.org/job-name")])  # fmt: skip
        index.write([
            Evidence(evidence_id("t", "other", str(n)), ended - 60_000 + n, "k8s.pod", kind, message,
                     namespace=OTHER_NS, experiment=OTHER_EXP, pod=OTHER_POD, pod_uid="other-uid",
                     node=node, attrs=attrs)
            for n, (kind, message, attrs) in enumerate([
                ("container.terminated", f"Container of {OTHER_POD} terminated: Error, exit code 1",
                 {"exit_code": 1, "restart": 0, "reason": "Error"}),
                ("k8s.event", f"Killing pod {OTHER_NS}/{OTHER_POD} on {node}", {"reason": "Killing"}),
            ])
        ])  # fmt: skip
    service = Service(path, load_rules())
    app = create_app(service, ApiOptions(access_for(world), audit=io.StringIO()))
    with TestClient(app) as client:
        yield client


def _get(client: TestClient, path: str, who: str | None = "team-a"):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return client.get(path, headers=headers)


def test_no_route_names_the_other_tenant(shared: TestClient, world: World) -> None:
    namespace, name = world.a
    paths = [
        "/api/v1/experiments",
        f"/api/v1/experiments/{namespace}/{name}",
        f"/api/v1/experiments/{namespace}/{name}/explanation",
        f"/api/v1/experiments/{namespace}/{name}/timeline",
        "/",
        f"/experiments/{namespace}/{name}",
    ]
    answers = {path: _get(shared, path) for path in paths}
    explanation = answers[paths[2]].json()
    assert explanation["verdict"]["category"] == "gpu.xid"
    # Every record the explanation cites, through its own route and page.
    ids = set(re.findall(r'"(?:id|evidence_id)":\s*"([0-9a-f]{16})"', answers[paths[2]].text))
    assert ids
    for record in sorted(ids):
        answers[f"/api/v1/evidence/{record}"] = _get(shared, f"/api/v1/evidence/{record}")
        answers[f"/evidence/{record}"] = _get(shared, f"/evidence/{record}")
    for path, answer in answers.items():
        assert answer.status_code == 200, path
        for secret in (OTHER_NS, OTHER_EXP, OTHER_POD):
            assert secret not in answer.text, (path, secret)
    # The node still says it ended other runs: counted, not named.
    (record,) = [r for r in explanation["implicated"] if r["other_failures"]]
    assert record["other_namespaces"] == 1 and record["other_experiments"] == []


def test_security_headers(shared: TestClient, world: World) -> None:
    namespace, name = world.a
    api = _get(shared, f"/api/v1/experiments/{namespace}/{name}/explanation")
    page = _get(shared, f"/experiments/{namespace}/{name}")
    for answer in (api, page):
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["X-Frame-Options"] == "DENY"
    assert api.headers["Cache-Control"] == "no-store"
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    # The hash in the policy is the hash of the script the page really serves.
    (script,) = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    served = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{served}'" in policy


def test_docs_need_a_token_unless_opened(shared: TestClient, world: World) -> None:
    assert _get(shared, "/docs", None).status_code == 401
    assert _get(shared, "/openapi.json", None).status_code == 401
    assert _get(shared, "/docs").status_code == 200
    opened = create_app(world.service, ApiOptions(access_for(world), open_docs=True))
    with TestClient(opened) as client:
        assert client.get("/openapi.json").status_code == 200
