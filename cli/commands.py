"""`whyjob explain`: the question whyjob exists to answer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from whyjob.cli.completion import experiment_names
from whyjob.cli.output import Format, OutputOption, choose, emit, use_color
from whyjob.cli.state import fail, state_of

__all__ = ["explain", "load_ruleset"]


def load_ruleset(ctx: typer.Context, extra: list[Path] | None = None):  # type: ignore[no-untyped-def]
    """The shipped rules plus configured and --rules folders; a bad rule file is a clean error."""
    from whyjob.core.errors import WhyjobError
    from whyjob.explain.ruleset import load_rules

    settings = state_of(ctx).settings
    try:
        return load_rules([*settings.rule_paths, *(extra or [])])
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)


def explain(
    ctx: typer.Context,
    experiment: Annotated[
        str,
        typer.Argument(
            help="The experiment's name (a job, JobSet, Ray cluster or `experiment` label).",
            autocompletion=experiment_names,
        ),
    ],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Namespace, when the name exists in several."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="Cluster, when the name exists in several."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the Explanation as JSON (docs/explanation.md).")
    ] = False,
    output: OutputOption = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print Markdown, for an issue or a notebook.")
    ] = False,
    timeline: Annotated[
        int, typer.Option("--timeline", help="Timeline entries to show in text (0: none, -1: all).")
    ] = 20,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule file or folder (repeatable).")
    ] = None,
    otlp: Annotated[
        str | None,
        typer.Option(
            "--otlp",
            help="Also send the story as a trace to this OTLP/HTTP endpoint (a collector, "
            "Jaeger or Tempo: http://HOST:4318).",
        ),
    ] = None,
) -> None:
    """Explain what happened to an experiment: every attempt, why it ended, and the evidence.
    Exit 0 (whatever happened to it), 3 when no experiment has that name, 2 when it is
    ambiguous (give --namespace or --cluster), 1 without an index."""
    from whyjob.core.errors import WhyjobError
    from whyjob.explain.engine import explain_experiment
    from whyjob.explain.render import render_markdown, render_text

    fmt = choose(output, as_json)
    if markdown and (output is not None or as_json):
        fail("--markdown and -o ask for two formats: give one", 2)
    state = state_of(ctx)
    ruleset = load_ruleset(ctx, rules)
    with state.open_index(readonly=True) as index:
        try:
            explanation = explain_experiment(index, ruleset, experiment, namespace, cluster=cluster)
        except WhyjobError as exc:
            fail(str(exc), exc.exit_code)
    if otlp:
        from whyjob.api.storytrace import export_story, trace_id_of

        try:
            sent = export_story(explanation, otlp)
        except Exception as exc:  # an unreachable collector: say so, the story still prints
            sys.stderr.write(f"whyjob: could not send the trace to {otlp}: {exc}\n")
        else:
            sys.stderr.write(
                f"whyjob: sent {sent} spans to {otlp} (trace {trace_id_of(explanation):032x})\n"
            )
    if fmt.data:
        emit(explanation.to_json(), fmt)
    elif markdown:
        sys.stdout.write(render_markdown(explanation))
    else:
        sys.stdout.write(
            render_text(
                explanation,
                timeline_limit=-1 if fmt is Format.wide else timeline,
                color=use_color(),
            )
        )
