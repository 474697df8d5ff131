"""Rule fixtures: small, hand-written incidents that say which rules must and must not fire.

A fixture file (YAML, `format: whyjob.rule-tests/v1`) lists cases. Each case names an
explanation and places a handful of evidence records around one attempt's end; it expects the
rule to hold (and, optionally, to win with a category and grade) or not to hold. Cases run
against the whole rule set, so they also catch a new rule stealing another rule's incidents.
Used by `whyjob rules test` and by the test suite (every shipped explanation has at least one
positive and one negative case).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whyjob.core.entities import PodRecord
from whyjob.core.errors import ConfigError
from whyjob.core.evidence import ENTITY_KEYS, Evidence, Severity, evidence_id
from whyjob.core.yamllines import Located, load_located, not_valid_yaml, plain
from whyjob.explain.causes import CauseFinder
from whyjob.explain.gather import Scene
from whyjob.explain.matching import Matcher
from whyjob.explain.model import Attempt
from whyjob.explain.ruleset import RuleSet, parse_duration

__all__ = ["Case", "CaseResult", "fixture_files", "load_cases", "run_case"]

FORMAT = "whyjob.rule-tests/v1"
_END = 1_772_625_600_000  # 2026-03-04T12:00:00Z: the attempt's end in every case
_START = _END - 6 * 3_600_000
_UID, _POD, _NS, _CONTAINER = "0b5e2a11-9c44-4f0e-8d1a-5a7e0c3f2b61", "job-worker-1", "ml", "main"
_NODE, _INSTANCE, _GPU, _ASG = (
    "node-a",
    "i-0a1b2c3d4e5f60718",
    "GPU-1111aaaa-2222-3333-4444-555566667777",
    "gpu-asg",
)
_PEER_UID, _PEER_POD = "7d2f1c0a-1b2c-4d3e-9f4a-6b5c4d3e2f1a", "job-worker-0"
_SCOPES = ("attempt", "pod", "node", "instance", "gpu", "asg", "experiment", "peer")
_CASE_KEYS = frozenset({"rule", "name", "expect", "records", "attempt"})
_RECORD_KEYS = frozenset(
    {"kind", "at", "scope", "message", "attrs", "severity", "source", "container"}
)
_EXPECT_KEYS = frozenset({"holds", "wins", "category", "grade"})
_ATTEMPT_KEYS = frozenset({"state", "exit_code", "reason", "restart"})


@dataclass(frozen=True, slots=True)
class Case:
    rule: str
    name: str
    origin: str
    records: tuple[Evidence, ...]
    holds: bool
    wins: bool
    category: str | None
    grade: str | None
    attempt: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    passed: bool
    message: str


def _fail(origin: str, node: Located | None, message: str) -> ConfigError:
    return ConfigError(f"{origin}:{node.line if node else 1}: {message}")


def _severity(value: object) -> int:
    """A fixture's severity: a level name (error, warning, ...) or its number."""
    if isinstance(value, str) and not value.strip().isdigit():
        try:
            return Severity.parse(value)
        except KeyError:
            names = ", ".join(level.name.lower() for level in Severity)
            raise ValueError(f"severity {value!r} is not one of {names}") from None
    return int(str(value))


def _record(origin: str, node: Located, number: int) -> Evidence:
    if not isinstance(node.value, dict):
        raise _fail(origin, node, "a record must be a mapping")
    spec = node.value
    unknown = set(spec) - _RECORD_KEYS
    if unknown:
        raise _fail(origin, node, f"unknown key {sorted(unknown)[0]!r} in a record")
    kind = spec.get("kind")
    if kind is None or not isinstance(kind.value, str):
        raise _fail(origin, node, "a record needs a kind")
    scope = str(spec["scope"].value) if "scope" in spec else "attempt"
    if scope not in _SCOPES:
        raise _fail(origin, spec["scope"], f"scope must be one of {', '.join(_SCOPES)}")
    try:
        offset = _offset(spec["at"].value) if "at" in spec else 0
    except ValueError as exc:
        raise _fail(origin, spec.get("at"), str(exc)) from None
    try:
        severity = _severity(spec["severity"].value) if "severity" in spec else Severity.INFO
    except ValueError as exc:
        raise _fail(origin, spec["severity"], str(exc)) from None
    attrs = plain(spec["attrs"]) if "attrs" in spec else {}
    entities: dict[str, Any] = dict.fromkeys(ENTITY_KEYS)
    if scope in ("attempt", "pod"):
        entities.update(namespace=_NS, pod=_POD, pod_uid=_UID, node=_NODE)
        if scope == "attempt":
            entities["container"] = (
                str(spec["container"].value) if "container" in spec else _CONTAINER
            )
            if kind.value.startswith(("log.", "container.")):
                attrs.setdefault("restart", 0)
    elif scope == "peer":
        entities.update(
            namespace=_NS, pod=_PEER_POD, pod_uid=_PEER_UID, node="node-b", container=_CONTAINER
        )
    elif scope == "node":
        entities["node"] = _NODE
    elif scope == "instance":
        entities["instance_id"] = _INSTANCE
    elif scope == "gpu":
        entities.update(node=_NODE, gpu_uuid=_GPU)
    elif scope == "asg":
        entities["asg"] = _ASG
    else:
        entities.update(namespace=_NS, experiment="job")
    message = str(spec["message"].value) if "message" in spec else kind.value
    attrs.setdefault("seq", number)
    return Evidence(
        id=evidence_id("fixture", origin, str(number)),
        ts=_END + offset,
        source=str(spec["source"].value) if "source" in spec else "fixture",
        kind=kind.value,
        message=message,
        severity=severity,
        attrs=attrs,
        **entities,
    )


def _offset(value: object) -> int:
    text = str(value).strip()
    sign = -1 if text.startswith("-") else 1
    return sign * parse_duration(text.lstrip("+-") or "0s")


def load_cases(path: Path, text: str | None = None) -> list[Case]:
    origin = str(path)
    try:
        root = load_located(text if text is not None else path.read_text(encoding="utf-8"))
    except Exception as exc:  # yaml errors carry a mark with the line
        raise not_valid_yaml(origin, exc) from None
    spec = root.value if isinstance(root.value, dict) else None
    if spec is None or spec.get("format") is None or spec["format"].value != FORMAT:
        raise _fail(origin, root, f"a rule test file starts with `format: {FORMAT}`")
    cases: list[Case] = []
    for node in spec["cases"].value if "cases" in spec else []:
        case = node.value
        if not isinstance(case, dict):
            raise _fail(origin, node, "a case must be a mapping")
        unknown = set(case) - _CASE_KEYS
        if unknown:
            raise _fail(origin, node, f"unknown key {sorted(unknown)[0]!r} in a case")
        rule = case.get("rule")
        if rule is None or not isinstance(rule.value, str):
            raise _fail(origin, node, "a case names its explanation: `rule: <id>`")
        expect = case["expect"].value if "expect" in case else {}
        if not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS or "holds" not in expect:
            raise _fail(
                origin,
                case.get("expect", node),
                "expect needs `holds: true|false` (and may say wins, category, grade)",
            )
        attempt = plain(case["attempt"]) if "attempt" in case else {}
        if set(attempt) - _ATTEMPT_KEYS:
            raise _fail(origin, case["attempt"], f"attempt takes {sorted(_ATTEMPT_KEYS)}")
        records = tuple(
            _record(origin, r, n)
            for n, r in enumerate(case["records"].value if "records" in case else [])
        )
        cases.append(
            Case(
                rule=rule.value,
                name=str(case["name"].value) if "name" in case else f"case {len(cases) + 1}",
                origin=f"{origin}:{node.line}",
                records=records,
                holds=bool(expect["holds"].value),
                wins=bool(expect["wins"].value) if "wins" in expect else False,
                category=str(expect["category"].value) if "category" in expect else None,
                grade=str(expect["grade"].value) if "grade" in expect else None,
                attempt=attempt,
            )
        )
    return cases


def _scene(case: Case) -> tuple[Scene, Attempt]:
    pods = [
        PodRecord(
            uid=_UID,
            namespace=_NS,
            name=_POD,
            seen=_END,
            experiment="job",
            rank="worker-1",
            node=_NODE,
            gpus=8,
        ),
        PodRecord(
            uid=_PEER_UID,
            namespace=_NS,
            name=_PEER_POD,
            seen=_END,
            experiment="job",
            rank="worker-0",
            node="node-b",
            gpus=8,
        ),
    ]
    scene = Scene(
        name="job",
        namespace=_NS,
        launcher="PyTorchJob",
        recognised_by="fixture",
        pods=pods,
        t0=_START - 86_400_000,
        t1=_END + 86_400_000,
    )
    for ev in sorted(case.records, key=lambda e: (e.ts, e.attrs.get("seq", 0))):
        if ev.pod_uid:
            scene.by_pod[ev.pod_uid].append(ev)
        elif ev.gpu_uuid:
            scene.by_gpu[ev.gpu_uuid].append(ev)
        elif ev.node:
            scene.by_node[ev.node].append(ev)
        elif ev.instance_id:
            scene.by_instance[ev.instance_id].append(ev)
        elif ev.asg:
            scene.by_asg[ev.asg].append(ev)
        else:
            scene.experiment_records.append(ev)
    scene.pod_nodes = {_UID: _NODE, _PEER_UID: "node-b"}
    scene.node_instance = {_NODE: _INSTANCE}
    scene.instance_asg = {_INSTANCE: _ASG}
    scene.node_gpus[_NODE].add(_GPU)
    details = case.attempt
    attempt = Attempt(
        id="fixture",
        pod=_POD,
        pod_uid=_UID,
        namespace=_NS,
        container=_CONTAINER,
        restart=int(details.get("restart", 0)),
        rank="worker-1",
        node=_NODE,
        instance_id=_INSTANCE,
        started_at=_START,
        ended_at=_END,
        exit_code=details.get("exit_code"),
        signal=None,
        reason=details.get("reason"),
        state=str(details.get("state", "terminated")),
        gpus=8,
    )
    return scene, attempt


def run_case(rules: RuleSet, case: Case) -> CaseResult:
    if case.rule not in {r.id for r in rules.explanations}:
        return CaseResult(case, False, f"no active explanation {case.rule!r}")
    scene, attempt = _scene(case)
    matches = Matcher(rules).match_all(scene.all_records())
    found = CauseFinder(rules, scene, matches).find(attempt)
    fired = [f.cause.rule for f in found]
    if case.holds != (case.rule in fired):
        verb = "did not hold" if case.holds else "held but should not"
        return CaseResult(case, False, f"{case.rule} {verb}; rules that held: {fired or 'none'}")
    if case.wins and (not found or found[0].cause.rule != case.rule):
        return CaseResult(
            case,
            False,
            f"{case.rule} held but {found[0].cause.rule if found else 'nothing'} ranked first",
        )
    if case.holds:
        cause = next(f.cause for f in found if f.cause.rule == case.rule)
        if case.category and cause.category != case.category:
            return CaseResult(case, False, f"category {cause.category}, expected {case.category}")
        if case.grade and cause.grade != case.grade:
            return CaseResult(case, False, f"grade {cause.grade}, expected {case.grade}")
        if "?" in cause.summary.split():
            return CaseResult(case, False, f"summary has an unfilled field: {cause.summary}")
    return CaseResult(case, True, "ok")


def fixture_files(paths: Iterable[Path], shipped: bool = True) -> list[Path]:
    """Shipped fixtures (rules/tests/) and every `tests/*.yaml` under the given rule folders."""
    from importlib import resources

    found: list[Path] = []
    if shipped:
        root = resources.files("whyjob.rules") / "tests"
        found += sorted(
            Path(str(entry)) for entry in root.iterdir() if entry.name.endswith(".yaml")
        )
    for path in paths:
        folder = path if path.is_dir() else path.parent
        found += sorted(folder.glob("tests/*.yaml"))
    return found


def run_all(rules: RuleSet, files: Sequence[Path]) -> list[CaseResult]:
    return [run_case(rules, case) for path in files for case in load_cases(path)]
