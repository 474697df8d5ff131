"""`whyjob serve`'s probes: liveness answers while the process does, readiness only while the
index it serves answers (the chart's readinessProbe)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from whyjob.api.access import Access
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules


def test_readiness_reads_the_index_and_liveness_does_not(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    options = ApiOptions(Access(tokens={}), ready_for_s=0)  # every probe checks again
    app = create_app(Service(path, load_rules()), options)
    with TestClient(app) as client:
        not_yet = client.get("/readyz")  # the collector has not created it yet
        assert not_yet.status_code == 503 and not_yet.json() == {
            "ready": False,
            "reason": "the index does not answer",  # the details go to the log, not to anyone
        }
        assert client.get("/livez").status_code == 200
        assert client.get("/healthz").status_code == 200

        with SqliteIndex(path):
            pass
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True}

        path.write_bytes(b"this file is no SQLite database at all")
        broken = client.get("/readyz")
        assert broken.status_code == 503 and broken.json()["reason"] == "the index does not answer"
        assert client.get("/livez").status_code == 200
