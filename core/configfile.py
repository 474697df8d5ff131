"""Checked sections of the config file, for the parts of whyjob that read their own section
(`collectors:`, `receiver:`, `agent:`, `api:`, `alerts:`, `slack:`).

Each section is declared as `{key: (type, default)}`; reading it fills the defaults and turns an
unknown key, a wrong type or a bad duration into an error naming the file and the line, with a
suggestion when a close key exists. Types: `str`, `path` (~ expanded), `bool`, `int` (> 0),
`duration` (`30s`, `5m`, `1h` or seconds), `size` (`64KiB`, `1GiB` or bytes), `duration|off` (also `off` or 0: 0.0), `str|off` (a string, or `off`), `list` (of strings), `listen` (`HOST:PORT` or `off`),
`choice:a,b,c`, `map` (names to lists of names).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from whyjob.core.errors import ConfigError
from whyjob.core.yamllines import Located, load_located

__all__ = ["TOP_KEYS", "ConfigFile", "Spec", "parse_duration_s", "parse_size"]

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
    raise ValueError(f"{value!r} is not a size (64KiB, 256MiB, 1GiB or bytes)")


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
    raise ValueError(f"{value!r} is not a duration (30s, 5m, 1h, 7d or seconds)")


class ConfigFile:
    """One config file, read with the line of every value."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.root = load_located(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise ConfigError(
                f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}"
            ) from None
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
                hint = difflib.get_close_matches(key, sorted(known), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise self.error(value, f"unknown key {key!r} in {what}{suggestion}")
        return dict(node.value)

    def section(self, node: Located | None, spec: Spec, name: str) -> dict[str, Any]:
        """A section's values with defaults filled in (an absent section: all defaults)."""
        values = {key: default for key, (_, default) in spec.items()}
        if node is None or node.value is None:
            return values
        for key, value in self.mapping(node, name, set(spec)).items():
            values[key] = self.value(value, spec[key][0], f"{name}.{key}")
        return values

    def value(self, node: Located, kind: str, key: str) -> Any:
        value = node.value
        if kind == "duration|off" and (value is False or value in ("off", 0, "0", "0s")):
            return 0.0  # YAML reads a bare `off` as false
        if kind in ("duration", "duration|off"):
            try:
                return parse_duration_s(value)
            except ValueError as exc:
                also = " or off" if kind == "duration|off" else ""
                raise self.error(node, f"{key}: {exc}{also}") from None
        if kind == "size":
            try:
                return parse_size(value)
            except ValueError as exc:
                raise self.error(node, f"{key}: {exc}") from None
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.error(node, f"{key} takes true or false")
            return value
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise self.error(node, f"{key} takes a positive whole number")
            return value
        if kind == "list":
            if not isinstance(value, list) or not all(isinstance(v.value, str) for v in value):
                raise self.error(node, f"{key} takes a list of names")
            return [v.value for v in value]
        if kind.startswith("choice:"):
            allowed = kind.split(":", 1)[1].split(",")
            if value not in allowed:
                raise self.error(node, f"{key} takes one of {allowed}, not {value!r}")
            return value
        if kind == "listen":
            return self.listen(node, key)
        if kind == "map":  # name -> list of names (groups -> namespaces)
            if not isinstance(value, dict):
                raise self.error(node, f"{key} takes a mapping of names to lists of names")
            return {name: self.value(item, "list", f"{key}.{name}") for name, item in value.items()}
        if kind == "str|off" and (value is False or value == "off"):
            return "off"  # YAML reads a bare `off` as false
        if kind in ("str", "path", "str|off"):
            if not isinstance(value, str) or not value:
                also = " or off" if kind == "str|off" else ""
                raise self.error(node, f"{key} takes a string{also}")
            return Path(value).expanduser() if kind == "path" else value
        raise AssertionError(kind)

    def listen(self, node: Located, key: str) -> tuple[str, int] | None:
        value = node.value
        if value in (None, False, "off"):
            return None
        host, _, port = str(value).rpartition(":")
        if not port.isdigit() or not 0 <= int(port) < 65536:
            raise self.error(node, f"{key} takes HOST:PORT or off, not {value!r}")
        return host or "0.0.0.0", int(port)
