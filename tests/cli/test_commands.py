"""The command line, in-process: exit codes, messages a person reads, and every --help."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import Run
from whyjob.cli.app import app
from whyjob.cli.main import COMMANDS, route

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_routing_makes_explain_the_default_and_moves_global_options() -> None:
    assert route(["gpt2-run7"]) == ["explain", "gpt2-run7"]
    assert route(["gpt2-run7", "--json"]) == ["explain", "gpt2-run7", "--json"]
    assert route(["ingest", "x", "--index", "i.sqlite"]) == ["--index", "i.sqlite", "ingest", "x"]
    assert route(["--index=i.sqlite", "exp"]) == ["--index=i.sqlite", "explain", "exp"]
    assert route(["--help"]) == ["--help"]
    assert route([]) == []


def test_the_routing_table_knows_every_command() -> None:
    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert registered == COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(run: Run, command: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 4


def test_ingest_then_explain_text_and_json(run: Run, tmp_path: Path) -> None:
    result = run("ingest", str(FIXTURES / "k8s"))
    assert result.exit_code == 0, result.output
    assert "read 20, stored 20, duplicate 0, rejected 0" in result.output
    text = run("gpt2-run7")
    assert text.exit_code == 0
    # worker-3 was never scheduled
    assert "PENDING - container.oom_killed (proven, owner: user)" in text.output
    assert "Restart ledger" in text.output and "Not checked" in text.output
    document = json.loads(run("gpt2-run7", "--json").output)
    assert document["schema"] == "whyjob.explanation/v1"
    assert document["verdict"]["category"] == "container.oom_killed"
    markdown = run("explain", "gpt2-run7", "--markdown").output
    assert markdown.startswith("## gpt2-run7 (ml-research)") and "| # | rank |" in markdown


def test_ingest_exit_code_says_whether_anything_was_rejected(run: Run, tmp_path: Path) -> None:
    broken = tmp_path / "events.json"
    broken.write_text((FIXTURES / "k8s" / "events.json").read_text()[:3000])
    result = run("ingest", str(broken))
    assert result.exit_code == 1
    assert f"{broken}:" in result.output and "truncated JSON document" in result.output
    assert "stored 2" in result.output and "rejected 1" in result.output
    listing = run("quarantine")
    assert "truncated JSON document" in listing.output and str(broken) in listing.output


def test_usage_errors_are_one_line_and_exit_2(run: Run, tmp_path: Path) -> None:
    missing = run("ingest", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2 and "no such file or folder" in missing.output
    assert "Traceback" not in missing.output
    bad_pod = run("ingest", str(tmp_path), "--pod", "just-a-name")
    assert bad_pod.exit_code == 2 and "NAMESPACE/POD" in bad_pod.output
    bad_format = run("ingest", str(tmp_path), "--format", "csv")
    assert bad_format.exit_code == 2 and "is not one of" in bad_format.output


def test_explaining_without_an_index_or_an_unknown_name(run: Run, tmp_path: Path) -> None:
    result = run("gpt2-run7", index=tmp_path / "none.sqlite")
    assert result.exit_code == 1 and "no index at" in result.output
    run("ingest", str(FIXTURES / "k8s"))
    unknown = run("gpt2-run8")
    assert unknown.exit_code == 3 and "did you mean gpt2-run7" in unknown.output


def test_search_show_stats_and_experiments(run: Run) -> None:
    run("ingest", str(FIXTURES / "k8s"))
    found = run("search", "OOMKilled")
    assert found.exit_code == 0 and "container.terminated" in found.output
    line = next(row for row in found.output.splitlines() if "container.terminated" in row)
    record_id = line.split()[1]
    shown = run("show", record_id)
    assert "attrs {" in shown.output and '"exitCode": 137' in shown.output  # the raw pod object
    assert run("show", "7fffffffffffffff").exit_code == 3  # well formed, not there
    assert run("show", "ffffffffffffffff").exit_code == 2  # more than 63 bits: not an id
    stats = run("stats")
    assert "records 20" in stats.output and "container.terminated" in stats.output
    assert "gpt2-run7" in run("experiments").output


def test_simulate_list_and_a_bundle(run: Run, tmp_path: Path) -> None:
    listing = run("simulate", "--list")
    assert "xid79" in listing.output and "maintenance_storm" in listing.output
    result = run("simulate", "spot", "--seed", "3", "--out", str(tmp_path / "b"))
    assert result.exit_code == 0 and (tmp_path / "b" / "truth.json").exists()
    assert run("simulate", "no-such", "--out", str(tmp_path / "c")).exit_code == 2


def test_demo_uses_its_own_index(run: Run, tmp_path: Path) -> None:
    result = run("demo", "eviction", "--seed", "2", index=None)
    assert result.exit_code == 0, result.output
    assert "node.eviction" in result.output
    shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_rules_list_lint_and_test(run: Run, tmp_path: Path) -> None:
    listing = run("rules", "list")
    assert (
        listing.exit_code == 0
        and "container-oom-killed" in listing.output
        and "explanations" in listing.output
    )
    assert "log.cuda-oom" in run("rules", "list", "--signals").output
    tested = run("rules", "test")
    assert tested.exit_code == 0 and " 0 failed" in tested.output
    assert "0 warnings" in run("rules", "lint").output
    broken = tmp_path / "team.yaml"
    broken.write_text(
        "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    where:\n      message: {regex: 'NCCL (WARN'}\n"
    )
    lint = run("rules", "lint", str(broken))
    assert lint.exit_code == 2
    assert f"{broken}:6: bad regex 'NCCL (WARN': missing ), unterminated subpattern" in lint.output
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    where:\n"
        "      message: {regex: 'NCCL WARN|\\d+/\\d+\\s+\\d+m'}\n"
    )
    warned = run("rules", "lint", str(slow)).output
    assert "signal 's': a branch of its message regex needs no word" in warned, warned
    quadratic = tmp_path / "quadratic.yaml"
    quadratic.write_text(
        "format: whyjob.rules/v1\nsignals:\n  - id: q\n    kind: log.error\n    where:\n"
        "      message: {regex: 'for removal'}\n    capture: '(?P<what>\\S+) for removal'\n"
    )
    backtracks = run("rules", "lint", str(quadratic)).output
    assert "signal 'q': '(?P<what>\\\\S+) for removal' takes" in backtracks, backtracks
    assert "it backtracks" in backtracks


def test_diagnose_reads_files_and_stdin_and_prints_json(run: Run, tmp_path: Path) -> None:
    examples = Path(__file__).parents[2] / "docs" / "examples"
    text = run("diagnose", str(examples / "xid-paste.txt"))
    assert text.exit_code == 0, text.output
    assert text.output.startswith("gpu.xid (proven) - ml-research/llama-ft-worker-2\n")
    assert "\nEvidence\n" in text.output and "xid-paste.txt:37: NVRM: Xid" in text.output
    piped = run("diagnose", "--json", "-", input=(examples / "dataloader-paste.txt").read_bytes())
    document = json.loads(piped.output)
    assert document["schema"] == "whyjob.diagnosis/v1"
    assert (document["category"], document["grade"]) == ("container.oom_killed", "possible")
    assert document["evidence"][0]["origin"] == "<stdin>:9"
    assert not (tmp_path / "index.sqlite").exists()  # nothing is stored


def test_diagnose_usage_errors(run: Run, tmp_path: Path) -> None:
    missing = run("diagnose", str(tmp_path / "nope.txt"))
    assert missing.exit_code == 2 and "nope.txt: No such file or directory" in missing.output
    empty = run("diagnose", "-", input=b"\n\n")
    assert empty.exit_code == 2 and "nothing to diagnose" in empty.output


def test_cli_goes_on_after_a_bad_file_and_says_what_happened(run: Run, tmp_path: Path) -> None:
    (tmp_path / "a-unreadable.json").write_bytes(
        b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40
    )
    bad = json.loads((FIXTURES / "k8s" / "events.json").read_text())
    items = bad["items"]
    assert isinstance(items, list)
    items[0]["metadata"] = "oops"
    (tmp_path / "b-events.json").write_text(json.dumps(bad))
    result = run("ingest", str(tmp_path / "a-unreadable.json"), str(tmp_path / "b-events.json"))
    assert result.exit_code == 3, result.output
    assert "a-unreadable.json: binary file" in result.output
    assert "b-events.json:1: Event without involvedObject" in result.output
    assert f"stored {len(items) - 1}" in result.output
    again = run("ingest", str(tmp_path / "b-events.json"))
    assert again.exit_code == 1 and "stored 0" in again.output  # the rest were kept the first time


def test_preflight_exit_codes_text_and_json(run: Run, tmp_path: Path) -> None:
    from whyjob.core.timeutil import format_ts, parse_ts
    from whyjob.sim import simulate

    truth = simulate("xid79", 7, tmp_path / "bundle", noise=False)
    assert run("ingest", str(tmp_path / "bundle")).exit_code == 0
    root = truth.root
    assert root is not None and root.node is not None and root.failed_at is not None
    at = format_ts(parse_ts(root.failed_at) + 600_000)  # ten minutes after the GPU fell off
    after = run("preflight", root.node, "--at", at)
    assert after.exit_code == 1, after.output
    assert f"{root.node}: UNSAFE" in after.output and "Xid 79" in after.output
    shown = run("preflight", root.node, "no-such-node", "--at", at, "--json")
    assert shown.exit_code == 1
    verdicts = {d["node"]: d["verdict"] for d in json.loads(shown.output)}
    assert verdicts == {root.node: "unsafe", "no-such-node": "unknown"}
    assert run("preflight", "no-such-node").exit_code == 2
    before = run("preflight", root.node, "--at", root.failed_at)  # a moment before the fault
    assert before.exit_code == 0, before.output
    assert run("preflight", root.node, "--window", "soon").exit_code == 2  # a usage error
