"""Secrets never reach the index: 44 spellings of a secret, placed in every kind of record
(event messages, pod env values, the last-applied-configuration annotation, termination
messages, kernel lines, container log lines, a quarantined line), imported, then looked for
in the bytes of the SQLite file and in every API answer about the experiment."""

from __future__ import annotations

import copy
import json
import sqlite3
import time
from pathlib import Path

import pytest

from tests.collector.conftest import Ingest
from whyjob.collector.redaction import redact_text
from whyjob.core.index import SqliteIndex

FIXTURES = Path(__file__).parents[1] / "fixtures"
UID = "5d1c9a2b-7e3f-4c1a-9b2d-0f6e8a7c4b31"

# (how it is spelled, the secret in it). Real shapes: tokens as their services issue them
# (made up, never live), key=value forms as shells, YAML, JSON and CLIs write them.
SPELLINGS: list[tuple[str, str]] = [
    ("WANDB_API_KEY={s}", "0f3a9c51d2b84e67a1c0f3a9c51d2b84e67a1c0f"),
    ("DB_PASSWORD={s}", "Tr0ub4dor-and-3"),
    ("export AWS_SECRET_ACCESS_KEY={s}", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEQ"),
    ("AWS_ACCESS_KEY_ID={s}", "AKIAQ3EGRJ7UXZMP4N2B"),
    ("aws_session_token = {s}", "FwoGZXIvYXdzEJr//////////wEaDJh2cU5u"),
    ('{{"password": "{s}"}}', "pa55w0rd-json-value"),
    ('{{"api_key":"{s}"}}', "k-5b8e1f2a9c7d4e3b"),
    ("password: {s}", "yaml-pass-9w8e7r"),
    ("passwd={s}", "old-school-pw-77"),
    ("MYSQL_ROOT_PASSWORD={s}", "root-pw-334455"),
    ("HF_TOKEN={s}", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678"),
    ("using token {s}", "hf_ZxCvBnMaSdFgHjKlQwErTyUiOp98765432"),
    ("git clone https://{s}@github.com/org/repo", "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("gh auth with {s}", "ghs_0123456789abcdefghijABCDEFGHIJ012345"),
    ("GITHUB_TOKEN={s}", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("gitlab {s}", "glpat-x8Yz7Wv6Ut5Sr4Qp3On2"),
    ("slack bot {s}", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack app {s}", "xapp-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef"),
    (
        "webhook {s}",
        "https://hooks.slack.com/services/T01ABCD2E/B03FGHI4J/kLmNoPqRsTuVwXyZ01234567",
    ),
    ("Authorization: Bearer {s}", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.c2lnbmF0dXJl"),
    ('"Authorization": "Bearer {s}"', "opaque-bearer-7f6e5d4c3b2a"),
    ("authorization: Basic {s}", "dXNlcjpodW50ZXIyLWJhc2lj"),
    ("jwt={s}", "eyJ0eXAiOiJKV1QifQ.eyJ1c2VyIjoiYm9iIn0.ZmFrZXNpZw"),
    ("postgres://trainer:{s}@db.internal:5432/runs", "url-pw-q1w2e3"),
    ("redis://:{s}@cache:6379", "redis-pw-z9x8c7"),
    ("OPENAI_API_KEY={s}", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789"),
    ("anthropic {s}", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
    ("STRIPE_KEY={s}", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("sendgrid {s}", "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"),
    ("--hf-token {s}", "hf_CommandLineTokenValue0123456789abcd"),
    ("--password={s}", "cli-pw-equals-55"),
    ("MLFLOW_TRACKING_PASSWORD={s}", "mlflow-pw-123987"),
    ("COMET_API_KEY={s}", "cometkey8877665544332211"),
    ("NEPTUNE_API_TOKEN={s}", "neptune-token-aa11bb22cc33"),
    ("AZURE_CLIENT_SECRET={s}", "az~Q8R7.secret_value-x"),
    ("AccountKey={s}", "A" * 86 + "=="),
    ("GOOGLE_API_KEY={s}", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
    ("gcloud {s}", "ya29.a0AfH6SMBxyzxyzxyzxyzxyzxyzxyzxyz"),
    ("NPM_TOKEN={s}", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("docker login -p {s}", "dckr_pat_AbCdEfGhIjKlMnOpQrStUv"),
    ("pypi {s}", "pypi-AgEIcHlwaS5vcmc" + "x" * 72),
    ("SENTRY_DSN=https://{s}@o123.ingest.sentry.io/456", "abcdef0123456789abcdef0123456789"),
    (
        "key file:\n-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    ),
    ("ssh_private_key: {s}", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
]


def _each_spelling(prefix: str) -> str:
    """One line per spelling, a second apart, each after `prefix` (its {mm}:{ss} filled)."""
    return "".join(
        prefix.format(mm=f"{n // 60:02d}", ss=f"{n % 60:02d}")
        + spelling.format(s=secret).replace("\n", " ")
        + "\n"
        for n, (spelling, secret) in enumerate(SPELLINGS)
    )


def test_there_are_at_least_forty_spellings() -> None:
    assert len(SPELLINGS) >= 40 and len({s for _, s in SPELLINGS}) == len(SPELLINGS)


@pytest.mark.parametrize(("spelling", "secret"), SPELLINGS, ids=[s[:24] for s, _ in SPELLINGS])
def test_each_spelling_is_masked_and_its_context_kept(spelling: str, secret: str) -> None:
    text = spelling.format(s=secret)
    masked = redact_text(text)
    assert secret not in masked and "[REDACTED]" in masked, masked
    # The words around the secret stay: a person still sees what the line was about.
    first_word = text.split()[0].split("=")[0].strip("{\"'")[:6]
    assert first_word in masked


def test_ordinary_text_is_left_alone() -> None:
    for text in (
        'Error: secret "hf-token" not found',
        "secretName: hf-token",
        "max_tokens: 512, num_tokens=2048",
        "volume kube-api-access-7x2k serviceAccountToken",
        "tokenizer_config.json loaded",
        "key: nvidia.com/gpu operator: Exists effect: NoSchedule",
        "https://github.com/pytorch/pytorch/issues/1",
        "loss=2.31 step=400 lr=3e-4",
        "pad_token_id: 50256, label_key: labels, cache_key=abc123, partition_key: user_id",
        '{"secret": true, "token": 512}',
        'MountVolume.SetUp failed for volume "db-secret" : secret "db-secret" not found',
        "secret:\n    secretName: creds",
        "eos_token: </s>, pad_token: <pad>, unk_token: [UNK]",
    ):
        assert redact_text(text) == text, redact_text(text)


def test_camel_case_and_more_names_are_secret() -> None:
    for text, secret in (
        ("secretAccessKey: AbCdEf0123456789", "AbCdEf0123456789"),
        ("awsSecretAccessKey=XyZ0123456789abc", "XyZ0123456789abc"),
        ("minio.secretKey=minio-s3cret-77", "minio-s3cret-77"),
        ("cmd=WANDB_API_KEY=abcdef0123456789", "abcdef0123456789"),
    ):
        assert secret not in redact_text(text), text


def test_no_rule_backtracks_on_a_long_line() -> None:
    """Redaction runs on every record before it is stored: a hostile 20,000-character line
    must cost milliseconds, whatever its shape."""
    from whyjob.collector.redaction import _EXTRA_SHAPES, _KEY_VALUE_RULES, _detect_secrets_shapes
    from whyjob.explain.regexcost import slowest_probe

    slow = []
    for pattern in (*_KEY_VALUE_RULES, *_EXTRA_SHAPES, *_detect_secrets_shapes()):
        shape, took = slowest_probe(pattern)
        if took > 0.05:
            slow.append((pattern.pattern[:60], shape, round(took, 3)))
    assert not slow, slow
    for hostile in ("key_" * 5000, "\\" * 10000, "eyJ-" * 5000, "token_" * 3000, "://x:" * 4000):
        started = time.perf_counter()
        redact_text(hostile)
        assert time.perf_counter() - started < 1.0, hostile[:12]


def _pod_with_secrets() -> dict[str, object]:
    pod: dict[str, object] = json.loads((FIXTURES / "k8s" / "pod-crashloop.json").read_text())
    env = [
        {"name": f"SECRET_{n}", "value": f"prefix {spelling.format(s=secret)}"}
        for n, (spelling, secret) in enumerate(SPELLINGS)
    ] + [
        {"name": "WANDB_API_KEY", "value": SPELLINGS[0][1]},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    ]
    spec = pod["spec"]
    assert isinstance(spec, dict)
    spec["containers"][0]["env"] = env
    applied = copy.deepcopy(pod)
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    metadata["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied),
        "team.example.com/notes": " ".join(s.format(s=x) for s, x in SPELLINGS[:12]),
    }
    status = pod["status"]
    assert isinstance(status, dict)
    for container in status["containerStatuses"]:
        last = container.get("lastState", {}).get("terminated")
        if last is not None:
            last["message"] = "\n".join(s.format(s=x) for s, x in SPELLINGS)
    return pod


def _write_everything(root: Path) -> list[Path]:
    pod = root / "pod.json"
    pod.write_text(json.dumps(_pod_with_secrets()))
    events: dict[str, object] = json.loads((FIXTURES / "k8s" / "events.json").read_text())
    items = events["items"]
    assert isinstance(items, list)
    template = items[0]
    items.extend(
        {
            **template,
            "metadata": {**template["metadata"], "name": f"leak.{n}", "uid": f"leak-{n}"},
            "message": f"Error: {spelling.format(s=secret)}",
        }
        for n, (spelling, secret) in enumerate(SPELLINGS)
    )
    (root / "events.json").write_text(json.dumps(events))
    kern = root / "nodes" / "ip-10-0-12-34.us-west-2.compute.internal" / "kern.log"
    kern.parent.mkdir(parents=True)
    kern.write_text(
        _each_spelling("2026-03-04T10:{mm}:{ss}+0000 ip-10-0-12-34 kernel: audit: cmd=")
    )
    log = root / "var/log/pods" / f"ml-research_gpt2-run7-worker-1_{UID}" / "pytorch" / "1.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        _each_spelling("2026-03-04T10:{mm}:{ss}.000000000Z stderr F ")
        + "not a CRI line, quarantined with its bytes: DB_PASSWORD=Tr0ub4dor-and-3\n"
    )
    return [pod, root / "events.json", kern, log]


def test_no_secret_reaches_the_index_file(
    ingest: Ingest, index: SqliteIndex, tmp_path: Path
) -> None:
    summary = ingest(*_write_everything(tmp_path), year=2026)
    assert summary.total("stored") > 2 * len(SPELLINGS)
    assert summary.total("rejected") >= 1  # the quarantined line is in the index too
    index.close()
    stored = b"".join(p.read_bytes() for p in index.path.parent.glob(index.path.name + "*"))
    leaked = [s for _, s in SPELLINGS if s.encode() in stored]
    if leaked:
        db = sqlite3.connect(index.path)
        where = [
            (kind, message[:120])
            for kind, message, raw in db.execute(
                "SELECT kind, message, body FROM evidence LEFT JOIN raw USING (seq)"
            )
            if any(s in message or (raw and s.encode() in raw) for s in leaked)
        ]
        pytest.fail(f"leaked {leaked} in {where[:5]}")
    assert stored.count(b"[REDACTED]") >= 4 * len(SPELLINGS)
    # and what was kept still reads: the records are there, with their context
    db = sqlite3.connect(index.path)
    messages = [m for (m,) in db.execute("SELECT message FROM evidence")]
    assert any("Error: WANDB_API_KEY=[REDACTED]" in m for m in messages), messages[:5]
    db.close()
