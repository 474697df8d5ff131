"""No API answer holds a secret: the 44 spellings of tests/collector/test_secrets.py, placed in
every kind of record, imported, then every route that can show them is read."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.collector.test_secrets import SPELLINGS, _write_everything
from whyjob.api.access import Access, Principal, digest
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.evidence import format_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules

TOKEN = "ops-token-0123456789"


def test_no_route_answers_with_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    with SqliteIndex(path) as index:
        Ingestor(index, IngestOptions(year=2026)).ingest(
            [str(p) for p in _write_everything(tmp_path)]
        )
    access = Access(tokens={digest(TOKEN): Principal("ops", frozenset({"*"}))})
    app = create_app(Service(path, load_rules()), ApiOptions(access))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app) as client:
        listing = client.get("/api/v1/experiments", headers=headers)
        assert listing.status_code == 200
        answers = [listing]
        for experiment in listing.json():
            base = f"/api/v1/experiments/{experiment['namespace']}/{experiment['name']}"
            page = f"/experiments/{experiment['namespace']}/{experiment['name']}"
            answers += [
                client.get(p, headers=headers)
                for p in (base, f"{base}/explanation", f"{base}/timeline", page)
            ]
        # Every record in the index, through its own route and page (raw bodies included).
        with SqliteIndex(path, readonly=True) as index:
            ids = [format_id(i) for (i,) in index._db.execute("SELECT id FROM evidence")]
        assert len(ids) > 2 * len(SPELLINGS)
        for record in ids:
            answers.append(client.get(f"/api/v1/evidence/{record}", headers=headers))
            answers.append(client.get(f"/evidence/{record}", headers=headers))
    assert all(a.status_code == 200 for a in answers)
    texts = "\n".join(a.text for a in answers)
    assert "[REDACTED]" in texts  # the records that held secrets are shown, masked
    leaked = [secret for _, secret in SPELLINGS if secret in texts]
    assert not leaked, leaked
