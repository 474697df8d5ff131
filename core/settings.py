"""Settings: built once by a surface (the CLI, the API) and passed down; never read at import.

Precedence, highest first: command-line flags, environment variables, the config file,
defaults. Every key is documented in docs/configuration.md, and a test keeps the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from whyjob.core.configfile import TOP_KEYS
from whyjob.core.errors import ConfigError
from whyjob.core.experiments import DEFAULT_LAUNCHERS, NAME_RANKS, Launcher

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = [
    "IngestLimits",
    "Settings",
    "cache_dir",
    "default_config_path",
    "default_index_path",
    "load_settings",
]


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable)
    return Path(value) if value else Path.home() / fallback


def default_index_path() -> Path:
    """$XDG_DATA_HOME/whyjob/index.sqlite, i.e. ~/.local/share/whyjob/index.sqlite."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "whyjob" / "index.sqlite"


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/whyjob, i.e. ~/.cache/whyjob: what is kept to go faster next time."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "whyjob"


def default_config_path() -> Path:
    """$XDG_CONFIG_HOME/whyjob/config.yaml, i.e. ~/.config/whyjob/config.yaml."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "whyjob" / "config.yaml"


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """What one imported file may cost, so a hostile or broken file cannot take the machine.

    line_bytes: a longer text line is cut there, kept with a marker, and counted.
    inflated_bytes: a gzip file that inflates past this is rejected whole (a zip bomb).
    document_bytes: a JSON or YAML document parsed whole that is larger is rejected (a
      pretty-printed Kubernetes List is read item by item, so the bound is per item there).
    """

    line_bytes: int = 64 << 10
    inflated_bytes: int = 1 << 30
    document_bytes: int = 256 << 20


INGEST_KEYS: Final = {
    "max_line": ("size", 64 << 10),
    "max_inflated": ("size", 1 << 30),
    "max_document": ("size", 256 << 20),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a whyjob process is configured with.

    index: the SQLite index file.
    cluster: the cluster name stamped on ingested records (None: leave unset).
    launchers: how experiments are recognised from pod labels, tried in order.
    rule_paths: extra rule folders or files, loaded after the shipped rules.
    config_path: the config file these settings were read from, if any.
    log_markers: extra regexes for log lines by kind: checkpoint, progress, error.
    limits: what one imported file may cost (the `ingest:` section).
    """

    index: Path = field(default_factory=default_index_path)
    elastic: ElasticSettings | None = None  # set: the index is on Elasticsearch, not `index`
    cluster: str | None = None
    launchers: tuple[Launcher, ...] = DEFAULT_LAUNCHERS
    rule_paths: tuple[Path, ...] = ()
    config_path: Path | None = None
    log_markers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    limits: IngestLimits = field(default_factory=IngestLimits)

    @property
    def location(self) -> Path | ElasticSettings:
        """Where the index is: the SQLite file, or the Elasticsearch cluster."""
        return self.elastic if self.elastic is not None else self.index

    def describe(self) -> str:
        """The index's place, for messages."""
        if self.elastic is not None:
            return f"{self.elastic.urls[0]} ({self.elastic.prefix}-*)"
        return str(self.index)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given fields replaced; None values are ignored."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


# The other top-level sections belong to the parts that read them (core/configfile.py).
_KNOWN_KEYS = TOP_KEYS
_LOG_KEYS = {"checkpoint", "progress", "error"}
_EXPERIMENT_KEYS = {"labels", "launchers"}
_LAUNCHER_KEYS = {"name", "label", "rank_labels", "attempt_label", "match_labels", "name_rank"}


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def _string_list(path: Path, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(path, f"{key} must be a list of non-empty strings")
    return list(value)


def _launchers(path: Path, section: Mapping[str, Any]) -> tuple[Launcher, ...]:
    unknown = set(section) - _EXPERIMENT_KEYS
    if unknown:
        raise _fail(path, f"unknown key experiments.{sorted(unknown)[0]}")
    custom: list[Launcher] = [
        Launcher("experiment label", label)
        for label in _string_list(path, "experiments.labels", section.get("labels", []))
    ]
    entries = section.get("launchers", [])
    if not isinstance(entries, list):
        raise _fail(path, "experiments.launchers must be a list")
    for number, entry in enumerate(entries):
        where = f"experiments.launchers[{number}]"
        if not isinstance(entry, dict):
            raise _fail(path, f"{where} must be a mapping")
        unknown = set(entry) - _LAUNCHER_KEYS
        if unknown:
            raise _fail(path, f"unknown key {where}.{sorted(unknown)[0]}")
        if not isinstance(entry.get("label"), str) or not isinstance(entry.get("name"), str):
            raise _fail(path, f"{where} needs a name and a label (strings)")
        match = entry.get("match_labels", {})
        if not isinstance(match, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in match.items()
        ):
            raise _fail(path, f"{where}.match_labels must map label names to string values")
        name_rank = entry.get("name_rank", "ordinal")
        if name_rank not in NAME_RANKS:
            raise _fail(path, f"{where}.name_rank must be one of {', '.join(NAME_RANKS)}")
        custom.append(
            Launcher(
                name=entry["name"],
                label=entry["label"],
                rank_labels=tuple(
                    _string_list(path, f"{where}.rank_labels", entry.get("rank_labels", []))
                ),
                attempt_label=entry.get("attempt_label"),
                match_labels=tuple(match.items()),
                name_rank=name_rank,
            )
        )
    return (*custom, *DEFAULT_LAUNCHERS)


def _log_markers(path: Path, section: object) -> dict[str, tuple[str, ...]]:
    import re

    if not isinstance(section, dict):
        raise _fail(path, "logs must be a mapping of checkpoint, progress and error patterns")
    unknown = set(section) - _LOG_KEYS
    if unknown:
        raise _fail(path, f"unknown key logs.{sorted(unknown)[0]} (known: {sorted(_LOG_KEYS)})")
    out: dict[str, tuple[str, ...]] = {}
    for kind, patterns in section.items():
        for pattern in _string_list(path, f"logs.{kind}", patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _fail(path, f"logs.{kind}: bad regex {pattern!r}: {exc}") from None
        out[kind] = tuple(patterns)
    return out


# The `index:` section when it is a mapping (a plain string is the SQLite file).
# It and `ingest:` are checked by ConfigFile.startup_section, by hand, not by the pydantic models
# of the services' sections, like the other top-level keys here: every CLI start with a config
# file reads them, and importing pydantic and building their two models measured 89 ms (median
# of 11 runs) against 0.03 ms by hand, on a `whyjob --help` of 116 ms.
INDEX_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "backend": ("choice:sqlite,elasticsearch", "sqlite"),
    "path": ("path", None),
    "urls": ("list", []),
    "api_key": ("str", None),
    "username": ("str", None),
    "password": ("str", None),
    "ca_certs": ("path", None),
    "prefix": ("str", "whyjob"),
}


def _index_section(path: Path) -> dict[str, Any]:
    from whyjob.core.configfile import ConfigFile
    from whyjob.core.index.elastic import ElasticSettings

    f = ConfigFile(path)
    node = f.top["index"]
    values = f.startup_section(node, INDEX_KEYS, "index")
    if values["backend"] == "sqlite":
        return {"index": values["path"]} if values["path"] else {}
    if not values["urls"]:
        raise f.error(node, "index.backend elasticsearch needs index.urls: [https://HOST:9200]")
    return {
        "elastic": ElasticSettings(
            values["urls"],
            api_key=values["api_key"] or os.environ.get("WHYJOB_ES_API_KEY"),
            username=values["username"],
            password=values["password"] or os.environ.get("WHYJOB_ES_PASSWORD"),
            # Relative to the config file, as rule paths are (a mounted Secret beside it).
            ca_certs=path.parent / values["ca_certs"] if values["ca_certs"] else None,
            prefix=values["prefix"],
        )
    }


def _limits(path: Path) -> IngestLimits:
    from whyjob.core.configfile import ConfigFile

    f = ConfigFile(path)
    values = f.startup_section(f.top.get("ingest"), INGEST_KEYS, "ingest")
    return IngestLimits(values["max_line"], values["max_inflated"], values["max_document"])


def _read_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        raise _fail(path, f"{line}not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(path, "the top level must be a mapping of keys")
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise _fail(path, f"unknown key {sorted(unknown)[0]!r} (known: {sorted(_KNOWN_KEYS)})")
    return data


def load_settings(config: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from defaults, then the config file, then WHYJOB_* environment variables.

    `config` names a file that must exist; without it, WHYJOB_CONFIG or the default path is
    read when present.
    """
    env = os.environ if environ is None else environ
    explicit = config or (Path(env["WHYJOB_CONFIG"]) if env.get("WHYJOB_CONFIG") else None)
    path = explicit or default_config_path()
    settings = Settings()
    if explicit is not None and not explicit.exists():
        raise ConfigError(f"{explicit}: no such config file")
    if path.exists():
        data = _read_config(path)
        changes: dict[str, Any] = {"config_path": path}
        if "index" in data:
            if isinstance(data["index"], dict):
                changes.update(_index_section(path))
            else:
                changes["index"] = Path(str(data["index"])).expanduser()
        if "cluster" in data:
            changes["cluster"] = str(data["cluster"])
        if "experiments" in data:
            if not isinstance(data["experiments"], dict):
                raise _fail(path, "experiments must be a mapping")
            changes["launchers"] = _launchers(path, data["experiments"])
        if "rules" in data:
            rules = data["rules"]
            if not isinstance(rules, dict) or set(rules) - {"paths"}:
                raise _fail(path, "rules must be a mapping with one key, paths")
            changes["rule_paths"] = tuple(
                (path.parent / p).expanduser()
                for p in _string_list(path, "rules.paths", rules.get("paths", []))
            )
        if "logs" in data:
            changes["log_markers"] = _log_markers(path, data["logs"])
        if "ingest" in data:
            changes["limits"] = _limits(path)
        settings = replace(settings, **changes)
    if env.get("WHYJOB_INDEX"):
        settings = replace(settings, index=Path(env["WHYJOB_INDEX"]).expanduser(), elastic=None)
    if env.get("WHYJOB_ES_URL"):
        from whyjob.core.index.elastic import ElasticSettings

        # The nodes from the environment; the rest of the file's `index:` section still holds.
        base = settings.elastic or ElasticSettings([])
        settings = replace(
            settings,
            elastic=replace(
                base,
                urls=env["WHYJOB_ES_URL"].split(","),
                api_key=env.get("WHYJOB_ES_API_KEY") or base.api_key,
                password=env.get("WHYJOB_ES_PASSWORD") or base.password,
            ),
        )
    if env.get("WHYJOB_CLUSTER"):
        settings = replace(settings, cluster=env["WHYJOB_CLUSTER"])
    return settings
