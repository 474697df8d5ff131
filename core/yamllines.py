"""YAML loading that remembers where every value came from, so rule errors name the line."""

from __future__ import annotations

from typing import Any

import yaml

from whyjob.core.errors import ConfigError

__all__ = ["Located", "load_located", "not_valid_yaml", "plain"]


class Located:
    """A value with the line it starts on (1-based)."""

    __slots__ = ("line", "value")

    def __init__(self, value: Any, line: int) -> None:
        self.value = value
        self.line = line

    def __repr__(self) -> str:
        return f"Located({self.value!r}, line={self.line})"


def _convert(node: yaml.Node, constructor: yaml.SafeLoader) -> Located:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            key = str(constructor.construct_object(key_node, deep=True))
            if key in out:
                # YAML keeps the last of two equal keys without a word; in a rule file that
                # silently drops what the first one said.
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r} (first on line {out[key].line})",
                    problem_mark=key_node.start_mark,
                )
            out[key] = _convert(value_node, constructor)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(child, constructor) for child in node.value], line)
    return Located(constructor.construct_object(node, deep=True), line)


def load_located(text: str) -> Located:
    """Parse one YAML document into nested `Located` values (raises yaml.YAMLError)."""
    node = yaml.compose(text, Loader=yaml.CSafeLoader)
    if node is None:
        return Located(None, 1)
    return _convert(node, yaml.SafeLoader(""))


def plain(node: Located) -> Any:
    """The value without its line annotations, all the way down."""
    value = node.value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def not_valid_yaml(origin: str, exc: Exception) -> ConfigError:
    """The error for a file `load_located` refused: its name, the line YAML marked, the problem."""
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    return ConfigError(f"{origin}{line}: not valid YAML: {getattr(exc, 'problem', None) or exc}")
