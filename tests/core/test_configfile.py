"""Config sections checked by pydantic models made from their specs: every kind's error comes
back as whyjob's one-line message at the line of the value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from whyjob.api.config import load_surface_config
from whyjob.core.configfile import ConfigFile
from whyjob.core.errors import ConfigError

# One key of every kind (the section is read under the `api:` top-level key).
SPEC: dict[str, tuple[str, Any]] = {
    "name": ("str", None),
    "file": ("path", None),
    "flag": ("bool", False),
    "count": ("int", 3),
    "every": ("duration", 60.0),
    "size": ("size", 1024),
    "cache": ("duration|off", 30.0),
    "cap": ("size|off", 0),
    "kernel": ("str|off", "/dev/kmsg"),
    "items": ("list", []),
    "resources": ("names:pods,nodes", ["pods"]),
    "listen": ("listen", None),
    "mode": ("choice:a,b", "a"),
    "groups": ("map", {}),
    "kinds": ("kinds", {}),
}


def _section(tmp_path: Path, body: str) -> dict[str, Any]:
    path = tmp_path / "config.yaml"
    path.write_text("cluster: east\n# the section under test\napi:\n" + body)
    f = ConfigFile(path)
    return f.section(f.top["api"], SPEC, "api")


def test_every_kind_reads_its_spellings(tmp_path: Path) -> None:
    values = _section(
        tmp_path,
        "  name: x\n  file: ~/f\n  flag: true\n  count: 7\n  every: 5m\n  size: 2KiB\n"
        "  cache: off\n  cap: 1GiB\n  kernel: off\n  items: [a, b]\n  resources: [nodes]\n"
        "  listen: ':9000'\n  mode: b\n  groups: {team: [ns]}\n  kinds: {log.: 7d, gpu.: off}\n",
    )
    assert values == {
        "name": "x",
        "file": Path("~/f").expanduser(),
        "flag": True,
        "count": 7,
        "every": 300.0,
        "size": 2048,
        "cache": 0.0,
        "cap": 1 << 30,
        "kernel": "off",
        "items": ["a", "b"],
        "resources": ["nodes"],
        "listen": ("0.0.0.0", 9000),
        "mode": "b",
        "groups": {"team": ["ns"]},
        "kinds": {"log.": 7 * 86400.0, "gpu.": None},
    }
    defaults = _section(tmp_path, "  name: x\n")
    assert defaults["every"] == 60.0 and defaults["listen"] is None
    defaults["resources"].append("nodes")  # a default list is the section's own copy
    assert _section(tmp_path, "  name: x\n")["resources"] == ["pods"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  name: 3\n", ":4: api.name takes a string"),
        ("  file: ''\n", ":4: api.file takes a string"),
        ("  flag: 'yes'\n", ":4: api.flag takes true or false"),
        ("  count: '3'\n", ":4: api.count takes a positive whole number"),  # a string
        ("  count: true\n", ":4: api.count takes a positive whole number"),  # a bool
        ("  count: 0\n", ":4: api.count takes a positive whole number"),
        ("  every: 5x\n", ":4: api.every: '5x' is not a duration (30s, 5m, 1h, 7d or seconds)"),
        ("  every: -3\n", ":4: api.every: -3 is not a duration"),
        ("  size: 2KB\n", ":4: api.size: '2KB' is not a size (64KiB, 256MiB, 1GiB or bytes)"),
        (
            "  cache: soon\n",
            ":4: api.cache: 'soon' is not a duration (30s, 5m, 1h, 7d or seconds) or off",
        ),
        (
            "  cap: lots\n",
            ":4: api.cap: 'lots' is not a size (64KiB, 256MiB, 1GiB or bytes) or off",
        ),
        ("  kernel: true\n", ":4: api.kernel takes a string or off"),
        ("  items: a\n", ":4: api.items takes a list of names"),
        ("  items:\n    - a\n    - [b]\n", ":6: api.items takes a list of names"),
        (
            "  resources:\n    - pods\n    - jobs\n",
            ":6: api.resources: unknown 'jobs' (one of ['nodes', 'pods'])",
        ),
        ("  listen: localhost\n", ":4: api.listen takes HOST:PORT or off, not 'localhost'"),
        ("  listen: '127.0.0.1:65536'\n", ":4: api.listen takes HOST:PORT or off"),
        ("  mode: c\n", ":4: api.mode takes one of ['a', 'b'], not 'c'"),
        ("  groups:\n    team: ns\n", ":5: api.groups.team takes a list of names"),
        ("  groups: [a]\n", ":4: api.groups takes a mapping of names to lists of names"),
        (
            "  kinds:\n    log.: 7x\n",
            ":5: api.kinds.log.: '7x' is not a duration (30s, 5m, 1h, 7d or seconds) or off",
        ),
        ("  windw: 3\n", ":4: unknown key 'windw' in api"),
        ("  evry: 3\n", ":4: unknown key 'evry' in api (did you mean 'every'?)"),
    ],
)
def test_each_kinds_error_names_the_line(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _section(tmp_path, body)
    assert str(raised.value).startswith(f"{tmp_path / 'config.yaml'}{message}"), str(raised.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # Caught by the models, missed by the hand-written checks they replace.
        ("  every: .inf\n", ":4: api.every: inf is not a duration"),
        ("  cache: 1e400s\n", ":4: api.cache: '1e400s' is not a duration"),
        ("  items: [a, '']\n", ":4: api.items takes a list of names"),
        ("  groups: {team: ['']}\n", ":4: api.groups.team takes a list of names"),
        ("  kinds: {log.: .inf}\n", ":4: api.kinds.log.: inf is not a duration"),
    ],
)
def test_stricter_than_before(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _section(tmp_path, body)
    assert str(raised.value).startswith(f"{tmp_path / 'config.yaml'}{message}"), str(raised.value)


def test_the_first_problem_is_reported_unknown_keys_first(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config.yaml:5: unknown key 'mod' in api"):
        _section(tmp_path, "  count: x\n  mod: a\n  flag: 1\n")
    with pytest.raises(ConfigError, match=r"config.yaml:4: api.count takes"):
        _section(tmp_path, "  count: x\n  flag: 1\n")
    with pytest.raises(ConfigError, match=r"config.yaml:4: api must be a mapping"):
        _section(tmp_path, "  - a\n")


def test_surface_sections_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("alerts:\n  min_restarts: 2\n  window: 5x\n")
    with pytest.raises(
        ConfigError,
        match=r"config.yaml:3: alerts.window: '5x' is not a duration \(30s, 5m, 1h, 7d or seconds\)$",
    ):
        load_surface_config(path)
    path.write_text("alerts:\n  windw: 1h\n")
    with pytest.raises(
        ConfigError,
        match=r"config.yaml:2: unknown key 'windw' in alerts \(did you mean 'window'\?\)",
    ):
        load_surface_config(path)
    path.write_text("slack:\n  per_channel_per_minute: '20'\n")
    with pytest.raises(ConfigError, match=r":2: slack.per_channel_per_minute takes a positive"):
        load_surface_config(path)


def test_the_cli_settings_path_does_not_import_pydantic(tmp_path: Path) -> None:
    """`whyjob EXPERIMENT` reads index: and ingest: by hand: pydantic would add ~90 ms."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "index:\n  backend: elasticsearch\n  urls: [https://es:9200]\n"
        "ingest:\n  max_line: 128KiB\napi:\n  listen: 127.0.0.1:1\n"
    )
    code = (
        "import sys; from pathlib import Path; from whyjob.core.settings import load_settings; "
        f"s = load_settings(Path({str(path)!r}), environ={{}}); "
        "assert s.limits.line_bytes == 128 << 10 and s.elastic is not None; "
        "assert 'pydantic' not in sys.modules, 'pydantic imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
