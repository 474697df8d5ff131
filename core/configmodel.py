"""The config file's sections as pydantic models, made from their specs (core/configfile.py).

One model per section, generated from its `{key: (kind, default)}` spec rather than written out:
the specs stay the one declaration that the defaults (a service started without a config file),
the docs test (every key documented) and the models all read, so a key cannot be added to one
and forgotten in another. The models are strict (a quoted "3" is not a number, true is not a
number) and forbid unknown keys; pydantic's errors are turned back into whyjob's one-line
messages at the line of the value (`config.yaml:12: alerts.window: '5x' is not a duration ...`).

Imported only by `ConfigFile.section`, when a section is present: importing pydantic and building
a first model costs about 100 ms, which the services that read these sections pay once at start
and `whyjob EXPERIMENT` never does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model
from pydantic_core import ErrorDetails

from whyjob.core.configfile import ConfigFile, Spec, describe, parse_duration_s, unknown_key
from whyjob.core.yamllines import Located, plain

__all__ = ["validate_section"]

_SIZES: Final = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _off(value: object) -> bool:
    return value is False or value == "off"  # YAML reads a bare `off` as false


def _duration(value: object) -> object:
    """`5m` to 300.0; numbers are left to the model (strict, > 0, finite)."""
    return parse_duration_s(value) if isinstance(value, str) else value


def _duration_or_zero(value: object) -> object:
    return 0.0 if _off(value) or value in (0, "0", "0s") else _duration(value)


def _duration_or_none(value: object) -> object:
    """`off` (a kind kept forever) to None; an empty value or 0 is a mistake, not `off`: a
    half-edited line must not turn retention off for the noisiest kind."""
    if _off(value):
        return None
    if value is None or value == 0:
        raise ValueError("not a duration")
    return _duration(value)


def _size(value: object) -> object:
    """`64KiB` or `"65536"` to 65536; numbers are left to the model (strict int, > 0)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, str) and value[-3:] in _SIZES:
        number = float(value[:-3])  # a ValueError is the model's error
        if math.isfinite(number):
            return int(number * _SIZES[value[-3:]])
    return value


def _size_or_zero(value: object) -> object:
    return 0 if _off(value) or value == 0 else _size(value)


def _str_or_off(value: object) -> object:
    return "off" if _off(value) else value


def _path(value: object) -> object:
    return Path(value).expanduser() if isinstance(value, str) and value else value


def _listen(value: object) -> object:
    """`HOST:PORT` (`:PORT` or a bare port: every address) to (host, port); `off` to None."""
    if value is None or _off(value) or value == 0:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = f":{value}"
    if not isinstance(value, str):
        return value
    host, _, port = value.rpartition(":")
    if not port.isascii() or not port.isdigit():
        raise ValueError("not HOST:PORT")
    return (host or "0.0.0.0", int(port))


_Name = Annotated[str, Field(min_length=1)]
_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_TYPES: Final[dict[str, Any]] = {
    "str": _Name,
    "path": Annotated[Path, BeforeValidator(_path)],
    "bool": bool,
    "int": Annotated[int, Field(gt=0)],
    "duration": Annotated[_Seconds, BeforeValidator(_duration)],
    "duration|off": Annotated[
        float, Field(ge=0, allow_inf_nan=False), BeforeValidator(_duration_or_zero)
    ],
    "size": Annotated[int, Field(gt=0), BeforeValidator(_size)],
    "size|off": Annotated[int, Field(ge=0), BeforeValidator(_size_or_zero)],
    "str|off": Annotated[_Name, BeforeValidator(_str_or_off)],
    "list": list[_Name],
    "listen": Annotated[
        tuple[str, Annotated[int, Field(ge=0, lt=65536)]] | None, BeforeValidator(_listen)
    ],
    "map": dict[str, list[_Name]],
    "kinds": dict[str, Annotated[_Seconds | None, BeforeValidator(_duration_or_none)]],
}
# A map's or a kinds table's entries are checked as this kind.
_ENTRY: Final = {"map": "list", "kinds": "duration|off"}
_MODELS: dict[tuple[str, int], tuple[Spec, type[BaseModel]]] = {}


def _type(kind: str) -> Any:
    if kind.startswith("choice:"):
        return Literal[tuple(kind.split(":", 1)[1].split(","))]
    if kind.startswith("names:"):
        return list[Literal[tuple(kind.split(":", 1)[1].split(","))]]  # type: ignore[misc]
    return _TYPES[kind]


def model(name: str, spec: Spec) -> type[BaseModel]:
    """The section's model, built once per spec (defaults are not validated: None is absent)."""
    cached = _MODELS.get((name, id(spec)))
    if cached is None or cached[0] is not spec:
        fields: dict[str, Any] = {
            key: (_type(kind), default) for key, (kind, default) in spec.items()
        }
        built = create_model(
            f"Section_{name.replace('.', '_')}",
            __config__=ConfigDict(extra="forbid", strict=True),
            **fields,
        )
        cached = _MODELS[(name, id(spec))] = (spec, built)
    return cached[1]


def _at(node: Located, loc: tuple[int | str, ...]) -> Located:
    """The node a pydantic location points at, as deep as the YAML goes."""
    for part in loc:
        keyed = isinstance(node.value, dict) and part in node.value
        indexed = isinstance(node.value, list) and isinstance(part, int) and part < len(node.value)
        if not (keyed or indexed):
            break
        node = node.value[part]
    return node


def _message(node: Located, spec: Spec, name: str, error: ErrorDetails) -> tuple[Located, str]:
    loc = error["loc"]
    if not loc:
        return node, f"{name} must be a mapping"
    field = str(loc[0])
    if error["type"] == "extra_forbidden":
        return _at(node, loc[:1]), unknown_key(field, spec, name)
    kind, key, at = spec[field][0], f"{name}.{field}", _at(node, loc[:1])
    if kind in _ENTRY and len(loc) > 1 and isinstance(at.value, dict):
        kind, key, at = _ENTRY[kind], f"{key}.{loc[1]}", _at(node, loc[:2])
    if kind.startswith("names:") and len(loc) > 1 and isinstance(at.value, list):
        allowed = sorted(kind.split(":", 1)[1].split(","))
        item = _at(at, loc[1:2])
        return item, f"{key}: unknown {item.value!r} (one of {allowed})"
    if kind == "list" and len(loc) > 1 and isinstance(at.value, list):
        at = _at(at, loc[-1:])  # the entry that is not a name
    return at, describe(kind, key, plain(at))


def validate_section(f: ConfigFile, node: Located, spec: Spec, name: str) -> dict[str, Any]:
    """The section's values with defaults filled in; the first problem (an unknown key first,
    then by line) as a ConfigError naming the file and the line."""
    try:
        return dict(model(name, spec).model_validate(plain(node)))
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        unknown = [error for error in errors if error["type"] == "extra_forbidden"]
        found = [_message(node, spec, name, error) for error in unknown or errors]
        at, message = min(found, key=lambda m: m[0].line)
        raise f.error(at, message) from None
