"""The conventions of kubectl and gh: typos get "did you mean", shell completion (with the
index's experiment names), -o json|yaml|wide on every listing and show command validated
against the documented schemas, exit codes, a bound port before any word, colour rules."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.cli.conftest import Run
from whyjob.cli.main import UnknownCommand, route
from whyjob.cli.output import use_color
from whyjob.collector.ingest.base import IngestOptions, PodRef
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SCHEMAS = ROOT / "core" / "schema"


def _whyjob(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script as a shell runs it (its routing and completion are outside Typer)."""
    return subprocess.run(
        [sys.executable, "-m", "whyjob.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.v1.json").read_text())
    return loaded


@pytest.mark.parametrize(
    ("word", "meant"),
    [("experimnts", "experiments"), ("ingset", "ingest"), ("nodez", "nodes"), ("serv", "serve")],
)
def test_a_mistyped_command_is_not_taken_for_an_experiment(word: str, meant: str) -> None:
    with pytest.raises(UnknownCommand) as raised:
        route([word, "x"] if word == "ingset" else [word])
    assert raised.value.suggestion == meant
    assert f"Did you mean '{meant}'?" in str(raised.value)


def test_experiment_names_still_route_to_explain() -> None:
    assert route(["gpt2-run7", "-o", "json"]) == ["explain", "gpt2-run7", "-o", "json"]
    assert route(["nodes-v2", "-n", "ml", "--cluster", "eu"])[0] == "explain"
    assert route(["baseline"]) == ["explain", "baseline"]  # letters, but close to no command
    with pytest.raises(UnknownCommand) as raised:  # explain takes one name: a command was meant
        route(["gpt2-run7", "other"])
    assert raised.value.suggestion is None


def test_the_console_script_answers_a_typo_with_exit_2() -> None:
    result = _whyjob("experimnts")
    assert result.returncode == 2
    assert result.stderr.startswith("whyjob: error: unknown command 'experimnts'.")
    assert "Did you mean 'experiments'?" in result.stderr and not result.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(run: Run, shell: str) -> None:
    result = run("completion", shell)
    assert result.exit_code == 0
    assert "_WHYJOB_COMPLETE=complete_" in result.output
    assert run("completion", "tcsh").exit_code == 2


@pytest.fixture
def demo_index(tmp_path: Path) -> Path:
    from whyjob.sim import simulate

    truth = simulate("xid79", 3, tmp_path / "bundle")
    path = tmp_path / "completion.sqlite"
    with SqliteIndex(path) as index:
        Ingestor(index, IngestOptions()).ingest([str(tmp_path / "bundle")])
    (path.parent / "name").write_text(truth.experiment_name)
    return path


def test_completion_offers_commands_and_the_indexs_experiments(demo_index: Path) -> None:
    name = (demo_index.parent / "name").read_text()
    protocol = {"_WHYJOB_COMPLETE": "complete_bash", "WHYJOB_INDEX": str(demo_index)}
    first = _whyjob(env={**protocol, "COMP_WORDS": f"whyjob {name[:3]}", "COMP_CWORD": "1"})
    assert name in first.stdout.split()
    commands = _whyjob(env={**protocol, "COMP_WORDS": "whyjob exp", "COMP_CWORD": "1"})
    assert {"explain", "experiments"} <= set(commands.stdout.split())
    explain = _whyjob(env={**protocol, "COMP_WORDS": "whyjob explain ", "COMP_CWORD": "2"})
    assert name in explain.stdout.split()
    nothing = _whyjob(
        env={**protocol, "WHYJOB_INDEX": str(demo_index.parent / "none.sqlite")}
        | {"COMP_WORDS": "whyjob explain ", "COMP_CWORD": "2"}
    )
    assert nothing.returncode == 0 and not nothing.stdout.strip()
    assert not (demo_index.parent / "none.sqlite").exists()  # completion creates no index


def _document(run: Run, *args: str) -> Any:
    as_json = run(*args, "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)  # notes (search's indexing) go to stderr
    as_yaml = run(*args, "-o", "yaml")
    again = [yaml.safe_load(as_yaml.stdout), json.loads(run(*args, "--json").stdout)]
    for other in again:  # the same document either way, but for when it was made
        if isinstance(other, dict) and "generated_at" in other:
            other["generated_at"] = document["generated_at"]
        assert other == document
    return document


def test_every_listing_and_show_command_prints_its_schema(run: Run) -> None:
    run("ingest", str(FIXTURES / "k8s"))
    experiments = _document(run, "experiments")
    jsonschema.validate(experiments, _schema("experiments"))
    assert "gpt2-run7" in [e["name"] for e in experiments["items"]]

    found = _document(run, "search", "OOMKilled")
    jsonschema.validate(found, _schema("records"))
    assert found["items"] and all("OOMKilled" in r["message"] for r in found["items"])

    record_id = found["items"][0]["id"]
    shown = _document(run, "show", record_id)
    jsonschema.validate(shown, _schema("records"))
    assert shown["items"][0]["id"] == record_id and shown["items"][0]["raw"]

    for name, args in (("quarantine", ["quarantine"]), ("stats", ["stats"])):
        jsonschema.validate(_document(run, *args), _schema(name))
    rules = _document(run, "rules", "list")
    jsonschema.validate(rules, _schema("rules"))
    assert len(rules["explanations"]) > 50

    explanation = _document(run, "gpt2-run7")
    jsonschema.validate(explanation, _schema("explanation"))
    fleet = _document(run, "nodes")
    jsonschema.validate(fleet, _schema("fleet"))
    jsonschema.validate(_document(run, "gpus"), _schema("fleet"))

    assert "label" in run("experiments", "-o", "wide").output.splitlines()[0]
    assert "label" not in run("experiments").output.splitlines()[0]
    conflict = run("experiments", "--json", "-o", "yaml")
    assert conflict.exit_code == 2 and "two formats" in conflict.output


def test_exit_codes(run: Run, tmp_path: Path) -> None:
    missing = tmp_path / "never.sqlite"
    searched = run("search", "xid", index=missing)
    assert searched.exit_code == 1 and "no index at" in searched.output
    assert not missing.exists()  # a search creates no index
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_bytes(b"\x00\x01\x02 not text at all")
    nothing = run("ingest", str(tmp_path / "junk"))
    assert nothing.exit_code == 3, nothing.output
    run("ingest", str(FIXTURES / "k8s"))
    assert run("show", "7fffffffffffffff", "-o", "json").exit_code == 3
    assert run("no-such-run-1").exit_code == 3
    assert run("rules", "list", "-o", "toml").exit_code == 2
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "dup-run-0",
                "namespace": namespace,
                "uid": f"uid-{namespace}",
                "labels": {"experiment": "dup-run"},
                "creationTimestamp": "2026-03-01T10:00:00Z",
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "trainer"}]},
            "status": {"phase": "Running", "startTime": "2026-03-01T10:00:01Z"},
        }
        for namespace in ("team-a", "team-b")
    ]
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": pods}))
    assert run("ingest", str(tmp_path / "pods.json")).exit_code == 0
    ambiguous = run("dup-run")
    assert ambiguous.exit_code == 2 and "pass --namespace" in ambiguous.output
    assert run("dup-run", "-n", "team-a").exit_code == 0


def test_serve_on_a_busy_port_says_so_and_nothing_else(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = _whyjob(
            "--index", str(tmp_path / "i.sqlite"), "serve", "--listen", f"127.0.0.1:{port}"
        )
    assert result.returncode == 1
    assert result.stderr == (
        f"whyjob: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


def test_a_big_file_shows_its_records_moving(tmp_path: Path) -> None:
    lines = [
        f"2026-03-01T00:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i % 100:02d}0Z step {i} loss 1.0"
        for i in range(50_000)
    ]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    calls: list[tuple[int, int, str, int]] = []

    def progress(done: int, total: int, origin: str, records: int) -> None:
        calls.append((done, total, origin, records))

    with SqliteIndex(tmp_path / "i.sqlite") as index:
        options = IngestOptions(pod=PodRef.parse("ml/run-0"))
        Ingestor(index, options, on_progress=progress).ingest([str(tmp_path / "train.log")])
    size = (tmp_path / "train.log").stat().st_size
    inside = [c for c in calls if c[0] == 0 and 0 < c[3] < 50_000]
    assert len(inside) >= 2  # batches reported while the file's bytes were not yet done
    assert [c[3] for c in inside] == sorted(c[3] for c in inside)
    assert calls[-1][:2] == (size, size)


def test_colour_only_on_a_terminal_and_never_under_no_color(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color()
    monkeypatch.delenv("NO_COLOR")
    with (tmp_path / "out.txt").open("w") as file:
        monkeypatch.setattr(sys, "stdout", file)
        assert not use_color()


def test_the_demo_ends_with_the_commands_that_go_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from whyjob.cli.sim_cmd import _next_steps

    folder = tmp_path / "venv" / "bin"
    folder.mkdir(parents=True)
    monkeypatch.setattr(sys, "argv", [str(folder / "whyjob")])
    monkeypatch.setenv("PATH", "/usr/bin")  # whyjob is not on it
    monkeypatch.delenv("WHYJOB_INDEX", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    index = tmp_path / ".local" / "share" / "whyjob" / "demo.sqlite"
    text = _next_steps(index, "t5-3b-lr3e4-10")
    assert (
        'export PATH="$PWD/venv/bin:$PATH" WHYJOB_INDEX=~/.local/share/whyjob/demo.sqlite' in text
    )
    assert "  whyjob t5-3b-lr3e4-10 --timeline 0" in text
    spaced = tmp_path / "my data" / "demo.sqlite"
    assert f"WHYJOB_INDEX='{spaced}'" in _next_steps(spaced, "t5-3b-lr3e4-10")
    monkeypatch.setenv("PATH", str(folder))
    (folder / "whyjob").write_text("#!/bin/sh\n")
    (folder / "whyjob").chmod(0o755)
    monkeypatch.setenv("WHYJOB_INDEX", str(index))
    assert "export" not in _next_steps(index, "t5-3b-lr3e4-10")  # nothing left to set
