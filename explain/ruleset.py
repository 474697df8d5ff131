"""Rules as data: loading, validating and overriding the YAML rule files (docs/rules.md).

Two layers, as in Sigma: a *signal* matches one evidence record; an *explanation* correlates
signals around an attempt's end, across the related entities (the attempt itself, its pod, its
node, instance, GPUs and ASG, the experiment, the peer ranks), and names a taxonomy category
with a grade. Loading is strict: unknown keys, bad regexes, unknown categories and references to
signals or lists that do not exist are errors naming the file and line. Shipped rules load
first; user folders come after and may `override: true` a shipped id or `disable` it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import pickle
import re
import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from whyjob.core.errors import ConfigError
from whyjob.core.evidence import ENTITY_KEYS
from whyjob.core.taxonomy import CATEGORIES, Grade
from whyjob.core.yamllines import Located, load_located, not_valid_yaml, plain
from whyjob.explain.pattern import LazyPattern
from whyjob.explain.prefilter import required_literals
from whyjob.explain.templating import OPTIONAL_PART

__all__ = [
    "FORMAT",
    "SCOPES",
    "Condition",
    "Explanation",
    "Requirement",
    "RuleSet",
    "Signal",
    "load_rules",
    "parse_duration",
]

FORMAT: Final = "whyjob.rules/v1"
SCOPES: Final = frozenset(
    {"attempt", "pod", "node", "instance", "gpu", "asg", "host", "experiment", "peers"}
)
OPERATORS: Final = frozenset(
    {
        "eq",
        "ne",
        "in",
        "not_in",
        "regex",
        "not_regex",
        "contains",
        "gt",
        "gte",
        "lt",
        "lte",
        "exists",
    }
)
_TOP_FIELDS: Final = frozenset({"kind", "source", "message", "severity", *ENTITY_KEYS})
_FILE_KEYS: Final = frozenset(
    {"format", "pack", "description", "lists", "signals", "explanations", "disable"}
)
_SIGNAL_KEYS: Final = frozenset({"id", "title", "kind", "where", "capture", "override", "tags"})
_EXPLANATION_KEYS: Final = frozenset(
    {
        "id",
        "title",
        "category",
        "grade",
        "priority",
        "when",
        "unless",
        "collateral",
        "generic",
        "summary",
        "missing",
        "root",
        "status",
        "override",
        "tags",
        "detail",
        "states",
    }
)
ATTEMPT_STATES: Final = frozenset({"terminated", "waiting", "pending", "unknown"})
_REQUIREMENT_KEYS: Final = frozenset(
    {"signal", "scope", "window", "min_count", "as", "since_start"}
)
_STATUSES: Final = frozenset({"stable", "incubating", "deprecated"})
_DURATION: Final = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_duration(value: object) -> int:
    """'30s', '5m', '2h', '1d' or a number of seconds, as milliseconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return int(value * 1000)
    match = _DURATION.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 2h)")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True, slots=True)
class Condition:
    """One test on one field of an evidence record."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class Signal:
    id: str
    title: str
    kinds: frozenset[str]
    where: tuple[Condition, ...]
    capture: LazyPattern | None
    origin: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Requirement:
    """One of `signals` seen in `scope` between `before` ms before and `after` ms after the
    anchor (the attempt's end)."""

    signals: frozenset[str]
    scopes: tuple[str, ...]
    before: int
    after: int
    min_count: int
    alias: str
    since_start: bool = False  # only records from after the attempt started (a state, not a notice)


@dataclass(frozen=True, slots=True)
class Explanation:
    id: str
    title: str
    category: str
    grade: str
    priority: int
    when: tuple[Requirement, ...]
    unless: tuple[Requirement, ...]
    collateral: bool
    summary: str
    missing: tuple[str, ...]
    root: str  # the alias whose earliest record is when the cause happened
    status: str
    origin: str
    detail: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    states: frozenset[str] = ATTEMPT_STATES
    # A catch-all ("a Python exception ended the program"): ranked below every specific cause,
    # whatever the grades, so it wins only when nothing more specific explains the end.
    generic: bool = False


@dataclass(slots=True)
class RuleSet:
    signals: dict[str, Signal]
    explanations: list[Explanation]
    files: list[str]
    version: str
    disabled: set[str] = field(default_factory=set)

    def signals_by_kind(self) -> dict[str, list[Signal]]:
        out: dict[str, list[Signal]] = {}
        for signal in self.signals.values():
            for kind in signal.kinds:
                out.setdefault(kind, []).append(signal)
        return out


# -- loading -------------------------------------------------------------------------------


class _File:
    """Error helpers bound to one rule file."""

    def __init__(self, name: str) -> None:
        self.name = name

    def error(self, node: Located | None, message: str) -> ConfigError:
        where = f"{self.name}:{node.line}" if node is not None else self.name
        return ConfigError(f"{where}: {message}")

    def mapping(self, node: Located, what: str, allowed: frozenset[str]) -> dict[str, Located]:
        if not isinstance(node.value, dict):
            raise self.error(node, f"{what} must be a mapping")
        for key, value in node.value.items():
            if key not in allowed:
                hint = difflib.get_close_matches(key, sorted(allowed), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise self.error(value, f"unknown key {key!r} in {what}{suggestion}")
        return dict(node.value)

    def text(self, node: Located | None, what: str, *, required: bool = True) -> str:
        if node is None:
            if required:
                raise self.error(None, f"{what} is required")
            return ""
        if not isinstance(node.value, str) or not node.value.strip():
            raise self.error(node, f"{what} must be a non-empty string")
        return node.value

    def seq(self, node: Located | None, what: str) -> list[Located]:
        if node is None:
            return []
        if not isinstance(node.value, list):
            raise self.error(node, f"{what} must be a list")
        return list(node.value)


def _field_path(f: _File, node: Located, key: str) -> tuple[str, ...]:
    parts = tuple(key.split("."))
    if parts[0] == "attrs" and len(parts) >= 2 and all(parts):
        return parts
    if len(parts) == 1 and parts[0] in _TOP_FIELDS:
        return parts
    raise f.error(node, f"unknown field {key!r}: use one of {sorted(_TOP_FIELDS)} or attrs.<name>")


def _condition(
    f: _File, path: tuple[str, ...], node: Located, lists: Mapping[str, list[Any]]
) -> list[Condition]:
    spec = node.value
    if not isinstance(spec, dict):
        # Shorthand: a scalar is `eq`, a list or a $list reference is `in`.
        if isinstance(spec, str) and spec.startswith("$"):
            return [Condition(path, "in", frozenset(_resolve_list(f, node, lists)))]
        value = plain(node)
        if isinstance(value, list):
            return [Condition(path, "in", frozenset(value))]
        return [Condition(path, "eq", value)]
    out: list[Condition] = []
    for op, arg in spec.items():
        if op not in OPERATORS:
            hint = difflib.get_close_matches(op, sorted(OPERATORS), n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise f.error(arg, f"unknown operator {op!r}{suggestion}")
        if op == "not_regex" and (isinstance(arg.value, list) or str(arg.value).startswith("$")):
            out.extend(Condition(path, op, p) for p in _patterns(f, arg, lists))
            continue
        value = plain(arg)
        if op in ("in", "not_in"):
            if isinstance(arg.value, str) and arg.value.startswith("$"):
                value = _resolve_list(f, arg, lists)
            elif not isinstance(value, list):
                raise f.error(arg, f"{op} takes a list or a $list reference")
            value = frozenset(value)
        elif op in ("regex", "not_regex"):
            value = _compile(f, arg)
        elif op == "exists" and not isinstance(value, bool):
            raise f.error(arg, "exists takes true or false")
        elif op in ("gt", "gte", "lt", "lte") and not isinstance(value, int | float):
            raise f.error(arg, f"{op} takes a number")
        out.append(Condition(path, op, value))
    return out


def _patterns(f: _File, node: Located, lists: Mapping[str, list[Any]]) -> list[LazyPattern]:
    """A `not_regex` given as a list of regexes and $list references (of regexes): none of
    them may match. A pack's shared exclusions live in one list that way."""
    items = node.value if isinstance(node.value, list) else [node]
    out: list[LazyPattern] = []
    for item in items:
        if isinstance(item.value, str) and item.value.startswith("$"):
            out.extend(_compile(f, Located(p, item.line)) for p in _resolve_list(f, item, lists))
        else:
            out.append(_compile(f, item))
    return out


def _resolve_list(f: _File, node: Located, lists: Mapping[str, list[Any]]) -> list[Any]:
    name = str(node.value)[1:]
    if name not in lists:
        raise f.error(node, f"unknown list ${name} (lists: {sorted(lists) or 'none'})")
    return lists[name]


def _compile(f: _File, node: Located) -> LazyPattern:
    """Compiled now, so a bad regex is an error with its file and line; kept with its source
    (what a cached rule set carries) and its prefilter literals."""
    if not isinstance(node.value, str):
        raise f.error(node, "a regex must be a string")
    try:
        pattern = LazyPattern(node.value, compiled=re.compile(node.value))
    except re.error as exc:
        raise f.error(node, f"bad regex {node.value!r}: {exc}") from None
    required_literals(pattern)  # worked out once, kept with the pattern
    return pattern


def _signal(f: _File, node: Located, lists: Mapping[str, list[Any]]) -> tuple[Signal, bool]:
    spec = f.mapping(node, "a signal", _SIGNAL_KEYS)
    signal_id = f.text(spec.get("id"), "signal id")
    kinds_node = spec.get("kind")
    if kinds_node is None:
        raise f.error(node, f"signal {signal_id!r} needs a kind")
    if isinstance(kinds_node.value, str) and kinds_node.value.startswith("$"):
        kind_names = frozenset(str(k) for k in _resolve_list(f, kinds_node, lists))
    else:
        kinds = kinds_node.value if isinstance(kinds_node.value, list) else [kinds_node]
        kind_names = frozenset(f.text(k, "kind") for k in kinds)
    where: list[Condition] = []
    where_node = spec.get("where")
    if where_node is not None:
        for key, value in f.mapping(where_node, "where", frozenset(where_node.value or {})).items():
            where.extend(_condition(f, _field_path(f, value, key), value, lists))
    capture = _compile(f, spec["capture"]) if "capture" in spec else None
    override = bool(spec["override"].value) if "override" in spec else False
    return (
        Signal(
            id=signal_id,
            title=f.text(spec.get("title"), f"title of signal {signal_id!r}", required=False)
            or signal_id,
            kinds=kind_names,
            where=tuple(where),
            capture=capture,
            origin=f"{f.name}:{node.line}",
            tags=tuple(str(t) for t in plain(spec["tags"])) if "tags" in spec else (),
        ),
        override,
    )


def _requirement(f: _File, node: Located, lists: Mapping[str, list[Any]]) -> Requirement:
    spec = f.mapping(node, "a condition", _REQUIREMENT_KEYS)
    signal_node = spec.get("signal")
    if signal_node is None:
        raise f.error(node, "a condition needs a signal (an id, a list of ids, or a $list)")
    if isinstance(signal_node.value, str) and signal_node.value.startswith("$"):
        names = [str(n) for n in _resolve_list(f, signal_node, lists)]
    elif isinstance(signal_node.value, list):
        names = []
        for item in signal_node.value:
            name = f.text(item, "signal")
            names.extend(_resolve_list(f, item, lists) if name.startswith("$") else [name])
    else:
        names = [f.text(signal_node, "signal")]
    if not names:
        raise f.error(signal_node, "the signal list is empty")
    signal = names[0]
    scope = spec.get("scope")
    if scope is not None and isinstance(scope.value, list):
        scopes = tuple(f.text(item, "scope") for item in scope.value)
    else:
        scopes = (f.text(scope, "scope", required=False) or "attempt",)
    for name in scopes:
        if name not in SCOPES:
            raise f.error(scope, f"unknown scope {name!r} (one of {sorted(SCOPES)})")
    before, after = 3_600_000, 120_000
    if "window" in spec:
        window = f.mapping(spec["window"], "window", frozenset({"before", "after"}))
        try:
            before = parse_duration(window["before"].value) if "before" in window else before
            after = parse_duration(window["after"].value) if "after" in window else after
        except ValueError as exc:
            raise f.error(spec["window"], str(exc)) from None
    alias = f.text(spec.get("as"), "as", required=False) or re.sub(r"\W", "_", signal)
    if not _IDENTIFIER.match(alias):
        raise f.error(spec.get("as"), f"{alias!r} is not a usable name (letters, digits, _)")
    count = spec.get("min_count")
    min_count = count.value if count is not None else 1
    if not isinstance(min_count, int) or min_count < 1:
        raise f.error(count, "min_count must be a positive integer")
    since = spec.get("since_start")
    if since is not None and not isinstance(since.value, bool):
        raise f.error(since, "since_start takes true or false")
    return Requirement(
        frozenset(names), scopes, before, after, min_count, alias, bool(since and since.value)
    )


def _template_names(f: _File, node: Located, template: str) -> None:
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    except ValueError as exc:
        raise f.error(node, f"bad template: {exc}") from None
    if re.search(r"[\[\]]", OPTIONAL_PART.sub("", template)):
        raise f.error(node, "template: square brackets mark an optional part, unnested")
    for name in fields:
        if not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?(\|[A-Za-z_]\w*(\.[A-Za-z_]\w*)?)*$", name):
            raise f.error(
                node, f"summary field {{{name}}}: use {{name}}, {{alias.field}} or {{a.x|b.y}}"
            )


def _explanation(
    f: _File, node: Located, lists: Mapping[str, list[Any]]
) -> tuple[Explanation, bool]:
    spec = f.mapping(node, "an explanation", _EXPLANATION_KEYS)
    rule_id = f.text(spec.get("id"), "explanation id")
    category = f.text(spec.get("category"), f"category of {rule_id!r}")
    if category not in CATEGORIES:
        hint = difflib.get_close_matches(category, sorted(CATEGORIES), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise f.error(spec["category"], f"{category!r} is not a taxonomy id{suggestion}")
    grade = f.text(spec.get("grade"), f"grade of {rule_id!r}")
    if grade not in {g.value for g in Grade}:
        raise f.error(spec["grade"], f"grade must be proven, likely or possible, not {grade!r}")
    priority = spec["priority"].value if "priority" in spec else 50
    if not isinstance(priority, int):
        raise f.error(spec["priority"], "priority must be an integer")
    when = tuple(_requirement(f, r, lists) for r in f.seq(spec.get("when"), "when"))
    if not when:
        raise f.error(node, f"explanation {rule_id!r} needs at least one `when` condition")
    unless = tuple(_requirement(f, r, lists) for r in f.seq(spec.get("unless"), "unless"))
    aliases = [r.alias for r in when]
    if len(set(aliases)) != len(aliases):
        raise f.error(spec["when"], "two conditions share a name: give one an `as:`")
    summary = f.text(spec.get("summary"), f"summary of {rule_id!r}")
    _template_names(f, spec["summary"], summary)
    root = f.text(spec.get("root"), "root", required=False) or when[0].alias
    if root not in aliases:
        raise f.error(spec.get("root"), f"root {root!r} is not one of the conditions {aliases}")
    status = f.text(spec.get("status"), "status", required=False) or "stable"
    if status not in _STATUSES:
        raise f.error(spec["status"], f"status must be one of {sorted(_STATUSES)}")
    missing_nodes = f.seq(spec.get("missing"), "missing")
    missing = tuple(f.text(m, "missing note") for m in missing_nodes)
    for note_node, note in zip(missing_nodes, missing, strict=True):
        _template_names(f, note_node, note)
    detail_node = spec.get("detail")
    detail: dict[str, str] = {}
    if detail_node is not None:
        for key, value in f.mapping(
            detail_node, "detail", frozenset(detail_node.value or {})
        ).items():
            detail[key] = f.text(value, f"detail.{key}")
            _template_names(f, value, detail[key])
    states = ATTEMPT_STATES
    if "states" in spec:
        states = frozenset(f.text(n, "state") for n in f.seq(spec["states"], "states"))
        if states - ATTEMPT_STATES:
            raise f.error(spec["states"], f"states must be among {sorted(ATTEMPT_STATES)}")
    override = bool(spec["override"].value) if "override" in spec else False
    return (
        Explanation(
            id=rule_id,
            title=f.text(spec.get("title"), "title", required=False) or rule_id,
            category=category,
            grade=grade,
            priority=priority,
            when=when,
            unless=unless,
            collateral=_flag(f, spec, "collateral"),
            summary=summary.strip(),
            missing=missing,
            root=root,
            status=status,
            origin=f"{f.name}:{node.line}",
            detail=detail,
            tags=tuple(str(t) for t in plain(spec["tags"])) if "tags" in spec else (),
            states=states,
            generic=_flag(f, spec, "generic"),
        ),
        override,
    )


def _flag(f: _File, spec: Mapping[str, Located], key: str) -> bool:
    node = spec.get(key)
    if node is None:
        return False
    if not isinstance(node.value, bool):
        raise f.error(node, f"{key} takes true or false")
    return node.value


def _shipped() -> list[tuple[str, str]]:
    root = resources.files("whyjob.rules")
    return [
        (f"rules/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    ]


def _user_files(paths: Iterable[Path]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        if not path.exists():
            raise ConfigError(f"{path}: no such rule file or folder")
        # A folder's rule files, not the fixtures kept in its tests/ subfolders.
        files = (
            [f for f in sorted(path.rglob("*.y*ml")) if "tests" not in f.relative_to(path).parts]
            if path.is_dir()
            else [path]
        )

        for file in files:
            try:
                found.append((str(file), file.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{file}: cannot read rule file: {exc}") from None
    return found


def load_rules(extra: Sequence[Path] = (), *, shipped: bool = True) -> RuleSet:
    """The shipped rules, then each extra file or folder in order.

    A rule set is kept in the user's cache once read, keyed by every file's name and text and
    by the code that reads them, and read back from there while none changes: parsing the YAML
    and compiling a few hundred regexes was a third of a `whyjob EXPERIMENT` (about 100 ms),
    a pickle read back takes a few; its regexes compile when first searched."""
    sources = (_shipped() if shipped else []) + _user_files(extra)
    path = _cache_path(sources)
    cached = _cached(path)
    if cached is not None:
        return cached
    rules = _read(sources)
    _keep(path, rules)
    return rules


# The modules whose code decides what a loaded rule set is: a change to any makes a new key.
_CODE: Final = ("ruleset.py", "pattern.py", "prefilter.py")
_CACHE_KEPT = 8  # rule sets kept (several configs' extra rule folders), newest first


def _cache_path(sources: Sequence[tuple[str, str]]) -> Path | None:
    from whyjob.core.settings import cache_dir

    key = hashlib.sha256(FORMAT.encode() + sys.version.encode())
    here = Path(__file__).parent
    for name in _CODE:
        try:
            stat = (here / name).stat()
        except OSError:
            return None
        key.update(f"{name}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    for name, text in sources:
        key.update(name.encode() + b"\0" + text.encode() + b"\0")
    return cache_dir() / f"rules-{key.hexdigest()[:24]}.pickle"


def _cached(path: Path | None) -> RuleSet | None:
    if path is None:
        return None
    try:
        with path.open("rb") as file:
            rules = pickle.load(file)
    except Exception:  # absent, unreadable, or written by other code: read the files instead
        return None
    return rules if isinstance(rules, RuleSet) else None


def _keep(path: Path | None, rules: RuleSet) -> None:
    """Written beside and renamed into place (readers never see half a file); the oldest
    beyond the few kept are dropped. A cache that cannot be written is no error."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_bytes(pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(path)
        kept = sorted(path.parent.glob("rules-*.pickle"), key=lambda p: p.stat().st_mtime)
        for old in kept[:-_CACHE_KEPT]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def _read(sources: Sequence[tuple[str, str]]) -> RuleSet:
    signals: dict[str, Signal] = {}
    explanations: dict[str, Explanation] = {}
    lists: dict[str, list[Any]] = {}  # shared: a later file may use an earlier file's lists
    disabled: set[str] = set()
    problems: list[str] = []
    digest = hashlib.sha256()
    for name, text in sources:
        digest.update(name.encode() + b"\0" + text.encode())
        f = _File(name)
        try:
            root = load_located(text)
        except Exception as exc:  # yaml errors carry a mark with the line
            raise not_valid_yaml(name, exc) from None
        if root.value is None:
            continue
        spec = f.mapping(root, "a rule file", _FILE_KEYS)
        version = f.text(spec.get("format"), "format")
        if version != FORMAT:
            raise f.error(
                spec["format"], f"format {version!r} is not {FORMAT!r}; this whyjob reads {FORMAT}"
            )
        if "lists" in spec:
            for key, value in f.mapping(
                spec["lists"], "lists", frozenset(spec["lists"].value or {})
            ).items():
                if not isinstance(value.value, list):
                    raise f.error(value, f"list {key!r} must be a list")
                if key in lists:
                    raise f.error(value, f"list {key!r} is already defined in an earlier file")
                lists[key] = plain(value)
        # Each signal and explanation is checked on its own, so a rule author sees every
        # problem of a file at once rather than one per run.
        for node in f.seq(spec.get("signals"), "signals"):
            try:
                signal, override = _signal(f, node, lists)
                if signal.id in signals and not override:
                    raise f.error(
                        node,
                        f"signal {signal.id!r} is already defined at {signals[signal.id].origin} (add `override: true` to replace it)",
                    )
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            signals[signal.id] = signal
        for node in f.seq(spec.get("explanations"), "explanations"):
            try:
                rule, override = _explanation(f, node, lists)
                if rule.id in explanations and not override:
                    raise f.error(
                        node,
                        f"explanation {rule.id!r} is already defined at {explanations[rule.id].origin} (add `override: true` to replace it)",
                    )
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            explanations[rule.id] = rule
        for node in f.seq(spec.get("disable"), "disable"):
            disabled.add(f.text(node, "disable entry"))
    for rule in explanations.values():
        for requirement in (*rule.when, *rule.unless):
            for name in sorted(requirement.signals - set(signals)):
                hint = difflib.get_close_matches(name, sorted(signals), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                problems.append(
                    f"{rule.origin}: explanation {rule.id!r} uses unknown signal {name!r}{suggestion}"
                )
    if problems:
        raise ConfigError(
            problems[0]
            if len(problems) == 1
            else f"{len(problems)} problems in the rule files:\n" + "\n".join(problems)
        )
    unknown = disabled - set(explanations) - set(signals)
    if unknown:
        raise ConfigError(f"disable names rules that do not exist: {sorted(unknown)}")
    active = [
        r
        for r in explanations.values()
        if r.id not in disabled
        and r.status != "deprecated"
        # A rule that needs a disabled signal can never hold: drop it with the signal.
        and not any(req.signals <= disabled for req in r.when)
    ]
    return RuleSet(
        signals={k: v for k, v in signals.items() if k not in disabled},
        explanations=sorted(active, key=lambda r: (-Grade(r.grade).rank, -r.priority, r.id)),
        files=[name for name, _ in sources],
        version=digest.hexdigest()[:12],
        disabled=disabled,
    )
