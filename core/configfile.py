"""Checked sections of the config file, for the parts of whyjob that read their own section
(`collectors:`, `receiver:`, `agent:`, `api:`, `alerts:`, `slack:`, `retention:`, ...).

Each section is declared as `{key: (kind, default)}`; reading it fills the defaults and turns an
unknown key, a wrong type or a bad duration into an error naming the file and the line, with a
suggestion when a close key exists. Kinds: `str`, `path` (~ expanded), `bool`, `int` (> 0),
`duration` (`30s`, `5m`, `1h` or seconds), `size` (`64KiB`, `1GiB` or bytes), `duration|off`
(also `off` or 0: 0.0), `size|off` (also `off` or 0: 0), `str|off` (a string, or `off`), `list`
(of strings), `names:a,b` (a list of some of a, b), `listen` (`HOST:PORT` or `off`),
`choice:a,b,c`, `map` (names to lists of names), `kinds` (names to `duration|off`, off: None).

`ConfigFile.section` checks a section with a pydantic model made from its spec
(core/configmodel.py, imported only then); `ConfigFile.startup_section` is the small hand-written
checker kept for what every CLI start reads (core/settings.py says why, with the figure).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from whyjob.core.errors import ConfigError
from whyjob.core.yamllines import Located, load_located, not_valid_yaml

__all__ = [
    "TOP_KEYS",
    "ConfigFile",
    "Spec",
    "describe",
    "parse_duration_s",
    "parse_size",
    "unknown_key",
]

# Every top-level key of the config file; core/settings.py reads the first six.
TOP_KEYS: Final = frozenset(
    {
        "index", "cluster", "experiments", "rules", "logs",
        "ingest", "metrics", "receiver", "collectors", "agent", "api", "alerts", "slack",
        "preflight", "mark_nodes", "retention",
    }
)  # fmt: skip
Spec = Mapping[str, tuple[str, Any]]
_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZES: Final = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_DURATION: Final = "is not a duration (30s, 5m, 1h, 7d or seconds)"
_SIZE: Final = "is not a size (64KiB, 256MiB, 1GiB or bytes)"


def parse_size(value: object) -> int:
    """`64KiB`, `256MiB`, `1GiB`, or a number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    if isinstance(value, str) and value[-3:] in _SIZES:
        try:
            number = float(value[:-3])
        except ValueError:
            pass
        else:
            if math.isfinite(number) and number * _SIZES[value[-3:]] >= 1:
                return int(number * _SIZES[value[-3:]])
    raise ValueError(f"{value!r} {_SIZE}")


def parse_duration_s(value: object) -> float:
    """`30s`, `5m`, `1h`, or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str) and value[-1:] in _UNITS:
        try:
            number = float(value[:-1])
        except ValueError:
            pass
        else:
            if number > 0:
                return number * _UNITS[value[-1]]
    raise ValueError(f"{value!r} {_DURATION}")


def unknown_key(key: str, known: set[str] | Spec, what: str) -> str:
    """`unknown key 'windw' in alerts (did you mean 'window'?)`."""
    hint = difflib.get_close_matches(key, sorted(known), n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown key {key!r} in {what}{suggestion}"


def describe(kind: str, key: str, value: object) -> str:
    """What a value of `kind` takes, for the message when `value` is not one."""
    off = " or off" if kind.endswith("|off") else ""
    if kind.startswith("duration"):
        return f"{key}: {value!r} {_DURATION}{off}"
    if kind.startswith("size"):
        return f"{key}: {value!r} {_SIZE}{off}"
    if kind.startswith("choice:"):
        return f"{key} takes one of {kind.split(':', 1)[1].split(',')}, not {value!r}"
    if kind == "listen":
        return f"{key} takes HOST:PORT or off, not {value!r}"
    return f"{key} {_TAKES[kind.split(':', 1)[0]]}{off}"


_TAKES: Final = {
    "bool": "takes true or false",
    "int": "takes a positive whole number",
    "list": "takes a list of names",
    "names": "takes a list of names",
    "map": "takes a mapping of names to lists of names",
    "kinds": "takes a mapping of record kinds to durations or off",
    "str": "takes a string",
    "path": "takes a string",
    "str|off": "takes a string",
}


class ConfigFile:
    """One config file, read with the line of every value."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.root = load_located(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise not_valid_yaml(str(path), exc) from None
        self.top = (
            self.mapping(self.root, "the config file", set(TOP_KEYS)) if self.root.value else {}
        )

    def error(self, node: Located | None, message: str) -> ConfigError:
        line = f":{node.line}" if node is not None else ""
        return ConfigError(f"{self.path}{line}: {message}")

    def mapping(self, node: Located, what: str, known: set[str]) -> dict[str, Located]:
        if not isinstance(node.value, dict):
            raise self.error(node, f"{what} must be a mapping")
        for key, value in node.value.items():
            if key not in known:
                raise self.error(value, unknown_key(key, known, what))
        return dict(node.value)

    def section(self, node: Located | None, spec: Spec, name: str) -> dict[str, Any]:
        """A section's values with defaults filled in (an absent section: all defaults).

        Checked by a pydantic model made from `spec`: pydantic is imported only here, when a
        section is present.
        """
        if node is None or node.value is None:
            return {key: default for key, (_, default) in spec.items()}
        from whyjob.core.configmodel import validate_section

        return validate_section(self, node, spec, name)

    def startup_section(self, node: Located | None, spec: Spec, name: str) -> dict[str, Any]:
        """`section` without pydantic, for the sections every CLI start reads (`index:`,
        `ingest:`); kinds `str`, `path`, `list`, `choice:` and `size` only."""
        values = {key: default for key, (_, default) in spec.items()}
        if node is None or node.value is None:
            return values
        for key, value in self.mapping(node, name, set(spec)).items():
            kind, where = spec[key][0], f"{name}.{key}"
            try:
                values[key] = _startup_value(kind, value.value)
            except ValueError:
                raise self.error(value, describe(kind, where, value.value)) from None
        return values


def _startup_value(kind: str, value: Any) -> Any:
    """A value of `index:` or `ingest:`; a ValueError when it is not one of its kind."""
    if kind == "size":
        return parse_size(value)
    if kind == "list":
        if isinstance(value, list) and all(isinstance(v.value, str) for v in value):
            return [v.value for v in value]
    elif kind.startswith("choice:"):
        if value in kind.split(":", 1)[1].split(","):
            return value
    elif kind in ("str", "path"):
        if isinstance(value, str) and value:
            return Path(value).expanduser() if kind == "path" else value
    else:
        raise AssertionError(f"{kind}: a kind for ConfigFile.section")
    raise ValueError(kind)
