"""`whyjob rules list|lint|test`: the rule packs, checked and exercised."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from whyjob.cli.output import JsonFlag, OutputOption, choose, emit
from whyjob.cli.state import fail, state_of

if TYPE_CHECKING:
    from whyjob.explain.ruleset import RuleSet

__all__ = ["app"]

app = typer.Typer(
    help="List, check and test the rule packs (shipped and your own).", no_args_is_help=True
)

_Paths = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Extra rule files or folders, loaded after the shipped ones.", show_default=False
    ),
]


def _load(ctx: typer.Context, paths: list[Path] | None):  # type: ignore[no-untyped-def]
    from whyjob.core.errors import WhyjobError
    from whyjob.explain.ruleset import load_rules

    try:
        return load_rules([*state_of(ctx).settings.rule_paths, *(paths or [])])
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)


@app.command("list")
def list_rules(
    ctx: typer.Context,
    paths: _Paths = None,
    signals: Annotated[
        bool, typer.Option("--signals", help="List the signals instead of the explanations.")
    ] = False,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """The explanations in the order they rank (grade, then priority), or the signals.
    Exit 0, 2 when a rule file is wrong."""
    fmt = choose(output, as_json)
    rules = _load(ctx, paths)
    if fmt.data:
        emit(
            {
                "schema": "whyjob.rules/v1",
                "version": rules.version,
                "explanations": [
                    {"id": r.id, "category": r.category, "grade": r.grade,
                     "priority": r.priority, "origin": r.origin}
                    for r in rules.explanations
                ],
                "signals": [
                    {"id": s.id, "kinds": sorted(s.kinds), "origin": s.origin}
                    for s in sorted(rules.signals.values(), key=lambda s: s.id)
                ],
            },
            fmt,
        )  # fmt: skip
        return
    if signals:
        for signal in sorted(rules.signals.values(), key=lambda s: s.id):
            typer.echo(f"{signal.id:<28} {','.join(sorted(signal.kinds)):<32} {signal.origin}")
        return
    typer.echo(f"{'explanation':<34} {'category':<24} {'grade':<9} {'prio':>4}  origin")
    for rule in rules.explanations:
        typer.echo(
            f"{rule.id:<34} {rule.category:<24} {rule.grade:<9} {rule.priority:>4}  {rule.origin}"
        )
    typer.echo(
        f"{len(rules.explanations)} explanations, {len(rules.signals)} signals from {len(rules.files)} files; version {rules.version}"
    )


@app.command("lint")
def lint(ctx: typer.Context, paths: _Paths = None) -> None:
    """Load the rules strictly; report errors (file:line) and what is unused or untested."""
    from whyjob.explain.prefilter import required_literals
    from whyjob.explain.testing import fixture_files, load_cases

    rules = _load(ctx, paths)
    used = {
        name
        for rule in rules.explanations
        for req in (*rule.when, *rule.unless)
        for name in req.signals
    }
    warnings = [
        f"{signal.origin}: signal {signal.id!r} is used by no explanation"
        for signal in rules.signals.values()
        if signal.id not in used
    ]
    warnings.extend(
        f"{signal.origin}: signal {signal.id!r}: a branch of its message regex needs no word of "
        "three or more characters, so the regex runs on every record (docs/rules.md)"
        for signal in rules.signals.values()
        for condition in signal.where
        if condition.path == ("message",)
        and condition.op == "regex"
        and required_literals(condition.value) is None
    )
    warnings.extend(_backtracking(rules))
    tested: dict[str, set[bool]] = {}
    for path in fixture_files(paths or []):
        for case in load_cases(path):
            tested.setdefault(case.rule, set()).add(case.holds)
    for rule in rules.explanations:
        kinds = tested.get(rule.id, set())
        if kinds != {True, False}:
            missing = " and no ".join(
                k for k, v in (("positive", True), ("negative", False)) if v not in kinds
            )

            warnings.append(f"{rule.origin}: explanation {rule.id!r} has no {missing} test case")
    for warning in warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(
        f"{len(rules.files)} rule files load cleanly: {len(rules.explanations)} explanations, {len(rules.signals)} signals, {len(warnings)} warnings"
    )


# A pattern that takes this long on a 20,000-character line backtracks: a quadratic one takes
# seconds there (at 64 KiB, the import's line limit, ten times that). A linear scan stays far
# below: a plain pattern well under a millisecond, the widest alternation shipped (the ~80
# wordings of log.completed) 15 ms, which a loaded CI runner must not turn into a warning.
_SLOW_PROBE_S = 0.06


def _backtracking(rules: RuleSet) -> list[str]:
    from whyjob.explain.regexcost import PROBE_CHARS, slowest_probe

    out = []
    for signal in rules.signals.values():
        patterns = [c.value for c in signal.where if c.op in ("regex", "not_regex")]
        patterns += [signal.capture] if signal.capture is not None else []
        for pattern in patterns:
            shape, took = slowest_probe(pattern.compiled())
            if took > _SLOW_PROBE_S:
                out.append(
                    f"{signal.origin}: signal {signal.id!r}: {pattern.pattern[:60]!r} takes "
                    f"{took * 1000:.0f} ms on a {PROBE_CHARS:,}-character line of {shape!r}: it "
                    "backtracks; anchor where a token starts, e.g. (?<!\\S) (docs/rules.md)"
                )
    return out


@app.command("test")
def test(
    ctx: typer.Context,
    paths: _Paths = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Print passing cases too.")
    ] = False,
) -> None:
    """Run the rule fixtures (rules/tests/*.yaml, and tests/*.yaml beside your rule files)."""
    from whyjob.core.errors import WhyjobError
    from whyjob.explain.testing import fixture_files, run_all

    rules = _load(ctx, paths)
    try:
        results = run_all(rules, fixture_files(paths or []))
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    failed = [r for r in results if not r.passed]
    for result in results:
        if verbose or not result.passed:
            mark = "ok  " if result.passed else "FAIL"
            typer.echo(
                f"{mark} {result.case.rule}: {result.case.name}  ({result.case.origin})"
                + ("" if result.passed else f"\n     {result.message}")
            )
    typer.echo(
        f"{len(results) - len(failed)} passed, {len(failed)} failed, {len({r.case.rule for r in results})} explanations covered"
    )
    if failed:
        raise typer.Exit(1)
