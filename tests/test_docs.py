"""The docs are part of the feature: every command, setting, taxonomy id and kind is written up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from whyjob.cli.main import COMMANDS
from whyjob.core.taxonomy import CATEGORIES
from whyjob.explain.ruleset import load_rules

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_is_in_the_readme(command: str) -> None:
    assert re.search(rf"whyjob[^\n]* {command}\b", README), (
        f"README does not show `whyjob {command}`"
    )


def test_every_config_key_is_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for key in (
        "index",
        "cluster",
        "experiments.labels",
        "experiments.launchers",
        "rules.paths",
        "WHYJOB_INDEX",
        "WHYJOB_CONFIG",
        "WHYJOB_CLUSTER",
        "WHYJOB_ES_URL",
    ):
        assert f"`{key}`" in text, key
    from whyjob.core.settings import INDEX_KEYS

    for key in INDEX_KEYS:
        assert f"`index.{key}`" in text, f"index.{key}"


def test_every_taxonomy_id_is_documented() -> None:
    text = (ROOT / "docs" / "taxonomy.md").read_text()
    for category in CATEGORIES:
        assert f"`{category}`" in text, category


def test_every_kind_a_rule_reads_is_documented() -> None:
    text = (ROOT / "docs" / "evidence.md").read_text()
    for signal in load_rules().signals.values():
        for kind in signal.kinds:
            assert f"`{kind}`" in text, (signal.id, kind)


def test_quick_start_has_exactly_two_commands() -> None:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^\$ (.+)$", section, re.MULTILINE)
    assert len(commands) == 2, commands
    assert (ROOT / commands[0].split()[0]).exists() and (ROOT / commands[1].split()[0]).exists()


def test_every_collector_key_is_documented() -> None:
    from whyjob.collector.live.config import COLLECTOR_KEYS

    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "`metrics.listen`" in text
    for collector, keys in COLLECTOR_KEYS.items():
        for key in keys:
            assert f"`collectors.{collector}.{key}`" in text, f"collectors.{collector}.{key}"


def test_every_receiver_and_agent_key_is_documented() -> None:
    from whyjob.collector.live.config import AGENT_KEYS, MARK_KEYS, RECEIVER_KEYS

    text = (ROOT / "docs" / "configuration.md").read_text()
    for section, keys in (
        ("receiver", RECEIVER_KEYS),
        ("agent", AGENT_KEYS),
        ("mark_nodes", MARK_KEYS),
    ):
        for key in keys:
            assert f"`{section}.{key}`" in text, f"{section}.{key}"


def test_every_surface_key_is_documented() -> None:
    from whyjob.api.config import ALERTS_KEYS, API_KEYS, SLACK_KEYS

    text = (ROOT / "docs" / "configuration.md").read_text()
    for section, keys in (("api", API_KEYS), ("alerts", ALERTS_KEYS), ("slack", SLACK_KEYS)):
        for key in keys:
            assert f"`{section}.{key}`" in text, f"{section}.{key}"
