"""`whyjob bench`: the speed figures the design commits to, measured and printed.

ingest: raw `kubectl get events -o json` into a fresh index, records per second.
explain: explain latency on an index of a million or more records.
cli: wall time of `whyjob --help` and `whyjob EXPERIMENT` as separate processes.
api: latency of the explanation route of `whyjob serve` under concurrent clients.
accuracy: per-category precision and recall over the simulator's scenarios and many seeds.
realworld: accuracy on real failure text from public bug reports.
fuzz: mutated real exports through ingest and diagnose: crashes, hangs, peak memory.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from whyjob.cli.state import fail, state_of

if TYPE_CHECKING:
    from whyjob.cli.accuracy import Scorecard
    from whyjob.core.index import Index
    from whyjob.explain.ruleset import RuleSet

__all__ = ["app"]

app = typer.Typer(
    help="Measure ingest throughput, explain and API latency, CLI start-up, accuracy, and "
    "robustness under hostile input.",
    no_args_is_help=True,
)


Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="sqlite, or elasticsearch: the cluster of the config file's index section or "
        "WHYJOB_ES_URL, in fresh indices of its own (whyjob-bench-*), deleted afterwards.",
    ),
]


def _bench_index(ctx: typer.Context, backend: str, path: Path) -> Index:
    """A fresh index of the backend asked for (a SQLite file at `path`)."""
    from dataclasses import replace

    from whyjob.core.index import open_index

    if backend == "sqlite":
        return open_index(path, readonly=False)
    if backend != "elasticsearch":
        fail(f"--backend is sqlite or elasticsearch, not {backend!r}", 2)
    elastic = state_of(ctx).settings.elastic
    if elastic is None:
        fail(
            "--backend elasticsearch needs a cluster: the config's index section or WHYJOB_ES_URL",
            2,
        )
    bench = replace(elastic, prefix=f"whyjob-bench-{path.parent.name[-8:].lower()}")
    return open_index(bench, readonly=False)


@app.command("ingest")
def bench_ingest(
    ctx: typer.Context,
    events: Annotated[
        int, typer.Option("--events", help="Raw Kubernetes events to generate.")
    ] = 200_000,
    seed: Annotated[int, typer.Option("--seed")] = 1,
    backend: Backend = "sqlite",
) -> None:
    """Records per second for raw `kubectl get events -A -o json` into a fresh index."""
    import tempfile

    from whyjob.cli.benchdata import write_event_list
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor

    with tempfile.TemporaryDirectory(prefix="whyjob-bench-") as scratch:
        source = Path(scratch) / "events.json"
        started = time.perf_counter()
        write_event_list(source, events, seed)
        size = source.stat().st_size
        typer.echo(
            f"generated {events:,} events ({size / 1e6:,.1f} MB) in {time.perf_counter() - started:.1f} s"
        )
        path = Path(scratch) / "index.sqlite"
        cpu0, wall0 = time.process_time(), time.perf_counter()
        # Closing checkpoints the WAL (SQLite) or refreshes (Elasticsearch): part of the cost.
        with _bench_index(ctx, backend, path) as index:
            summary = Ingestor(index, IngestOptions()).ingest([str(source)])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        again0 = time.perf_counter()
        with _bench_index(ctx, backend, path) as index:
            repeat = Ingestor(index, IngestOptions()).ingest([str(source)])
        again = time.perf_counter() - again0
        stored = summary.total("stored")
        typer.echo(
            f"ingest: {summary.total('read'):,} records, {stored:,} stored in {wall:.2f} s wall / {cpu:.2f} s CPU "
            f"= {stored / wall:,.0f} records/s ({stored / cpu:,.0f} per CPU-second, one core)"
        )
        typer.echo(
            f"re-ingest of the same file: {repeat.total('duplicate'):,} duplicates, "
            f"{repeat.total('stored')} stored, {again:.2f} s"
        )
        if backend == "elasticsearch":
            from whyjob.core.index.elastic import ElasticsearchIndex

            with _bench_index(ctx, backend, path) as index:
                if isinstance(index, ElasticsearchIndex):
                    index.destroy()


@app.command("explain")
def bench_explain(
    ctx: typer.Context,
    records: Annotated[
        int, typer.Option("--records", help="Filler records around the explained experiment.")
    ] = 1_000_000,
    runs: Annotated[int, typer.Option("--runs", help="Timed explains.")] = 20,
    keep: Annotated[
        Path | None,
        typer.Option("--keep", help="Build (or reuse) the benchmark index at this path."),
    ] = None,
    scenario: Annotated[
        str, typer.Option("--scenario", help="Simulator scenario to explain inside the filler.")
    ] = "xid79",
    backend: Backend = "sqlite",
) -> None:
    """Explain latency on an index of at least a million records."""
    import statistics
    import tempfile

    from whyjob.cli.benchdata import build_explain_index, fill_explain_index
    from whyjob.cli.commands import load_ruleset
    from whyjob.core.index.elastic import ElasticsearchIndex
    from whyjob.explain.engine import explain_experiment

    with tempfile.TemporaryDirectory(prefix="whyjob-bench-") as scratch:
        path = keep or Path(scratch) / "index.sqlite"
        started = time.perf_counter()
        if backend == "sqlite":
            name, namespace = build_explain_index(path, records, [scenario])[0]
        else:
            with _bench_index(ctx, backend, Path(scratch) / "index") as filling:
                name, namespace = fill_explain_index(filling, records, [scenario])[0]
        typer.echo(f"index ready in {time.perf_counter() - started:.1f} s: {path}")
        rules = load_ruleset(ctx)
        with _bench_index(
            ctx, backend, path if backend == "sqlite" else Path(scratch) / "index"
        ) as index:
            total = index.counts()["evidence"]
            timings = []
            for _ in range(runs + 1):
                t0 = time.perf_counter()
                explanation = explain_experiment(index, rules, name, namespace)
                timings.append((time.perf_counter() - t0) * 1000)
        timings = timings[1:]  # the first run warms the page cache
        typer.echo(
            f"explain {name!r} on {total:,} records: p50 {statistics.median(timings):.1f} ms, "
            f"p95 {sorted(timings)[int(len(timings) * 0.95) - 1]:.1f} ms, max {max(timings):.1f} ms "
            f"over {runs} runs; {len(explanation.attempts)} attempts, {len(explanation.timeline)} timeline records, "
            f"verdict {explanation.verdict.category}"
        )
        if isinstance(index, ElasticsearchIndex):
            index.destroy()


@app.command("retention")
def bench_retention(
    ctx: typer.Context,
    records: Annotated[
        int, typer.Option("--records", help="Filler records around the explained experiment.")
    ] = 10_000_000,
    keep: Annotated[
        Path | None,
        typer.Option("--keep", help="Build (or reuse) the benchmark index at this path."),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", help="Records deleted per write.")] = 5000,
) -> None:
    """Retention on a large index: the time to drop its oldest day, and explain latency on
    another connection before and while it runs."""
    import statistics
    import tempfile
    import threading

    from whyjob.cli.benchdata import build_explain_index
    from whyjob.cli.commands import load_ruleset
    from whyjob.core.index import SqliteIndex
    from whyjob.core.retention import Policy, prune
    from whyjob.explain.engine import explain_experiment

    def summary(timings: list[float]) -> str:
        ordered = sorted(timings)
        return (
            f"p50 {statistics.median(ordered):.1f} ms, "
            f"p95 {ordered[max(0, int(len(ordered) * 0.95) - 1)]:.1f} ms, max {ordered[-1]:.1f} ms "
            f"({len(ordered)} explains)"
        )

    with tempfile.TemporaryDirectory(prefix="whyjob-bench-") as scratch:
        path = keep or Path(scratch) / "index.sqlite"
        started = time.perf_counter()
        name, namespace = build_explain_index(path, records, ["xid79"])[0]
        rules = load_ruleset(ctx)
        with SqliteIndex(path) as index:
            total = index.counts()["evidence"]
            oldest = index.time_range()[0] or 0
        typer.echo(f"index ready in {time.perf_counter() - started:.1f} s: {total:,} records")
        stop = threading.Event()
        timings: dict[str, list[float]] = {"before": [], "during": []}
        phase = ["before"]

        def explain_forever() -> None:
            with SqliteIndex(path, readonly=True) as reader:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    explain_experiment(reader, rules, name, namespace)
                    timings[phase[0]].append((time.perf_counter() - t0) * 1000)

        reader = threading.Thread(target=explain_forever)
        reader.start()
        time.sleep(5)
        phase[0] = "during"
        # Everything older than a day after the oldest record: the oldest day, of every kind.
        day_later = oldest + 86_400_000
        policy = Policy(default_ms=1, batch=batch, configured=True)
        t0 = time.perf_counter()
        with SqliteIndex(path) as index:
            done = prune(index, policy, day_later + 1)
            left = index.counts()["evidence"]
        took = time.perf_counter() - t0
        stop.set()
        reader.join()
        typer.echo(
            f"dropped the oldest day: {done.total:,} records in {took:.1f} s "
            f"({done.total / max(took, 1e-9):,.0f} records/s, batches of {batch:,}); "
            f"{left:,} left; {done.freed_pages:,} pages given back"
        )
        typer.echo(f"explain {name!r} before: {summary(timings['before'])}")
        if timings["during"]:
            typer.echo(f"explain {name!r} while dropping: {summary(timings['during'])}")


@app.command("api")
def bench_api(
    records: Annotated[
        int, typer.Option("--records", help="Filler records around the incidents.")
    ] = 1_000_000,
    clients: Annotated[int, typer.Option("--clients", help="Concurrent connections.")] = 50,
    requests: Annotated[int, typer.Option("--requests", help="Requests per round.")] = 2000,
    keep: Annotated[
        Path | None,
        typer.Option("--keep", help="Build (or reuse) the benchmark index at this path."),
    ] = None,
    cache: Annotated[
        list[str] | None,
        typer.Option(
            "--cache",
            help="A round: api.cache, and @N for a collector committing N times a second "
            "meanwhile (repeatable) [default: off, 30s, 2s@10].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Explanation-route latency of a real `whyjob serve` under concurrent clients, on an
    index of every simulated incident inside a million filler records."""
    import tempfile

    from whyjob.cli.benchapi import run_round
    from whyjob.cli.benchdata import build_explain_index
    from whyjob.core.index import SqliteIndex
    from whyjob.sim import SCENARIOS

    rounds: list[tuple[str, float]] = []
    for spec in cache or ["off", "30s", "2s@10"]:
        setting, _, rate = spec.partition("@")
        try:
            rounds.append((setting, float(rate) if rate else 0.0))
        except ValueError:
            fail(f"--cache {spec!r}: expected SETTING or SETTING@COMMITS_PER_SECOND", 2)
    with tempfile.TemporaryDirectory(prefix="whyjob-bench-") as scratch:
        path = keep or Path(scratch) / "index.sqlite"
        started = time.perf_counter()
        experiments = build_explain_index(path, records, sorted(SCENARIOS))
        with SqliteIndex(path, readonly=True) as index:
            total = index.counts()["evidence"]
        typer.echo(
            f"index ready in {time.perf_counter() - started:.1f} s: {total:,} records, "
            f"{len(experiments)} incident experiments asked for at random"
        )
        for setting, per_s in rounds:
            try:
                result = run_round(
                    path,
                    Path(scratch),
                    experiments,
                    cache=setting,
                    clients=clients,
                    requests=requests,
                    writer_per_s=per_s,
                )
            except RuntimeError as exc:
                fail(str(exc), 1)
            label = "cache off" if setting in ("off", "0", "0s") else f"cache {setting}"
            if per_s:
                label += f", {per_s:g} commits/s"
            typer.echo(f"{clients} clients, {label}: {result.summary()}")


@app.command("cli")
def bench_cli(
    ctx: typer.Context,
    experiment: Annotated[
        str | None,
        typer.Option("--experiment", help="Also time `whyjob EXPERIMENT` against --index."),
    ] = None,
    runs: Annotated[int, typer.Option("--runs")] = 10,
) -> None:
    """Wall time of whole `whyjob` processes: start-up, --help, and an explain."""
    import statistics
    import subprocess

    state = state_of(ctx)
    whyjob = [sys.executable, "-m", "whyjob.cli"]
    cases = [("whyjob --help", [*whyjob, "--help"])]
    if experiment:
        cases.append(
            (f"whyjob {experiment}", [*whyjob, "--index", str(state.settings.index), experiment])
        )
    for label, command in cases:
        timings = []
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            subprocess.run(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
            )
            timings.append(time.perf_counter() - t0)
        timings = timings[1:]
        typer.echo(
            f"{label}: median {statistics.median(timings) * 1000:.0f} ms, max {max(timings) * 1000:.0f} ms over {runs} runs"
        )


_worker_rules: RuleSet | None = None


def _init_worker(extra: list[Path]) -> None:
    global _worker_rules
    from whyjob.explain.ruleset import load_rules

    _worker_rules = load_rules(extra)


def _score(job: tuple[str, int, bool, Path | None]) -> Scorecard:
    from whyjob.cli.accuracy import Scorecard, run_one

    scenario, seed, noise, keep = job
    assert _worker_rules is not None
    try:
        return run_one(scenario, seed, _worker_rules, noise, keep)
    except Exception as exc:  # a crash is a result to report, not a reason to stop the run
        card = Scorecard()
        card.failures.append(f"{scenario} seed {seed}: {type(exc).__name__}: {exc}")
        return card


def _combine(bundles: Path, target: Path) -> None:
    """Import every kept bundle into one index, then drop the bundles."""
    import shutil

    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor
    from whyjob.core.index import SqliteIndex

    with SqliteIndex(target) as index:
        Ingestor(index, IngestOptions()).ingest(sorted(str(p) for p in bundles.iterdir()))
    shutil.rmtree(bundles, ignore_errors=True)
    typer.echo(f"every bundle imported into {target}")


@app.command("accuracy")
def bench_accuracy(
    ctx: typer.Context,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds per scenario.")] = 10,
    first_seed: Annotated[
        int,
        typer.Option(
            "--first-seed", help="Start at this seed (fresh seeds check rules not tuned on them)."
        ),
    ] = 1,
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", help="Only these scenarios (repeatable).")
    ] = None,
    noise: Annotated[
        bool, typer.Option("--noise/--no-noise", help="Simulate unrelated activity and clock skew.")
    ] = True,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", help="Worker processes [default: CPU count].")
    ] = 0,
    show_wrong: Annotated[
        int, typer.Option("--show-wrong", help="Print up to this many wrong attempts.")
    ] = 20,
    combined: Annotated[
        Path | None,
        typer.Option(
            "--combined-index",
            help="Also import every simulated bundle into this one index (a fleet to look at "
            "with `whyjob nodes` and `whyjob report`).",
        ),
    ] = None,
) -> None:
    """Per-category precision and recall, and first-domino accuracy, over simulated incidents."""
    import os
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    from whyjob.cli.accuracy import Scorecard, by_scenario
    from whyjob.sim import SCENARIOS

    names = scenario or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        fail(f"unknown scenario(s) {', '.join(unknown)}; see `whyjob simulate --list`", 2)
    kept = Path(tempfile.mkdtemp(prefix="whyjob-bundles-")) if combined else None
    work = [
        (name, seed, noise, kept)
        for name in names
        for seed in range(first_seed, first_seed + seeds)
    ]
    extra = list(state_of(ctx).settings.rule_paths)
    total = Scorecard()
    started = time.perf_counter()
    with ProcessPoolExecutor(
        jobs or os.cpu_count() or 1, initializer=_init_worker, initargs=(extra,)
    ) as pool:
        for card in pool.map(_score, work, chunksize=4):
            total.add(card)
    elapsed = time.perf_counter() - started
    if combined and kept:
        _combine(kept, combined)
    typer.echo(
        f"{len(work)} runs ({len(names)} scenarios x {seeds} seeds from {first_seed}, noise {'on' if noise else 'off'}) in {elapsed:.0f} s; {len(total.outcomes)} attempts scored"
    )
    typer.echo(f"{'category':<24} {'precision':>9} {'recall':>7} {'support':>8}")
    for category, (precision, recall, support) in total.per_category().items():
        typer.echo(f"{category:<24} {precision:>9.3f} {recall:>7.3f} {support:>8}")
    right = sum(o.correct for o in total.outcomes)
    typer.echo(
        f"{'all attempts':<24} {'':>9} {right / max(1, len(total.outcomes)):>7.3f} {len(total.outcomes):>8}"
    )
    typer.echo(
        f"first-domino accuracy: {total.roots_right}/{total.roots_total} = {total.roots_right / max(1, total.roots_total):.3f}"
    )
    weak = [(name, r, t) for name, (r, t) in by_scenario(total).items() if r < t]
    if weak:
        typer.echo("scenarios with misses: " + ", ".join(f"{n} {r}/{t}" for n, r, t in weak))
    for outcome in total.wrong()[:show_wrong]:
        typer.echo(
            f"  wrong: {outcome.scenario} seed {outcome.seed} {outcome.key}: expected {outcome.expected}"
            + (f" <- {outcome.expected_cause}" if outcome.expected_cause else "")
            + f", got {outcome.predicted}"
            + (f" <- {outcome.predicted_cause}" if outcome.predicted_cause else "")
        )
    for failure in total.failures:
        typer.echo(f"  crashed: {failure}")
    if total.failures:
        raise typer.Exit(1)


@app.command("realworld")
def bench_realworld(
    ctx: typer.Context,
    cases: Annotated[
        Path,
        typer.Option("--cases", help="Corpus of real excerpts (JSON Lines, one case a line)."),
    ] = Path("tests/fixtures/realworld/cases.jsonl"),
    show_wrong: Annotated[
        int, typer.Option("--show-wrong", help="Print up to this many wrong cases.")
    ] = 30,
    show_holdout: Annotated[
        bool,
        typer.Option(
            "--show-holdout",
            help="Also list the holdout's wrong cases (off: look at them only after tuning).",
        ),
    ] = False,
    category: Annotated[
        list[str] | None,
        typer.Option("--category", help="Only cases labelled with these ids (repeatable)."),
    ] = None,
) -> None:
    """Accuracy on real failure text from public bug reports: per-category precision and
    recall, owner flips and a confusion list, on the tuning part and on the holdout."""
    from whyjob.cli.commands import load_ruleset
    from whyjob.cli.pasted import diagnose_text
    from whyjob.cli.realworld import Report, load_cases, score
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.core.errors import WhyjobError

    try:
        corpus = load_cases(cases)
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    if category:
        corpus = [c for c in corpus if c.category in category]
    rules = load_ruleset(ctx)
    settings = state_of(ctx).settings
    # A fixed clock: a case is diagnosed the same way whenever the benchmark runs.
    options = IngestOptions(
        launchers=settings.launchers, log_markers=settings.log_markers, at=1_780_000_000_000
    )

    def run(text: str) -> tuple[str, str, str]:
        found = diagnose_text(text, rules, options)
        return found.category, found.grade, found.summary

    started = time.perf_counter()
    report = Report(list(score(corpus, run)))
    elapsed = time.perf_counter() - started
    ambiguous = len(report.results) - len(report.scored)
    typer.echo(
        f"{len(report.results)} cases ({ambiguous} ambiguous, not scored) from {cases} "
        f"in {elapsed:.1f} s ({elapsed / max(1, len(report.results)) * 1000:.0f} ms a case)"
    )
    parts = [("all", report), ("tuning", report.part(holdout=False))]
    parts.append(("holdout", report.part(holdout=True)))
    typer.echo(
        "accuracy: "
        + "   ".join(
            f"{label} {part.accuracy():.3f} ({sum(r.correct for r in part.scored)}/{len(part.scored)})"
            for label, part in parts
        )
    )
    flips = report.flips()
    typer.echo(
        f"owner flips: {len(flips)}"
        + (" (" + ", ".join(r.case.id for r in flips) + ")" if flips else "")
    )
    typer.echo(f"{'category':<24} {'precision':>9} {'recall':>7} {'support':>8}")
    for name, (precision, recall, support) in report.per_category().items():
        typer.echo(f"{name:<24} {precision:>9.3f} {recall:>7.3f} {support:>8}")
    shown = report if show_holdout else report.part(holdout=False)
    confusion = shown.confusion()
    if confusion:
        typer.echo(
            "confusion (labelled -> answered" + ("" if show_holdout else ", tuning part") + ")"
        )
        for expected, predicted, ids in confusion:
            typer.echo(f"  {expected} -> {predicted}: {len(ids)}  {' '.join(ids[:6])}")
    wrong = shown.wrong()
    for result in wrong[:show_wrong]:
        typer.echo(
            f"  wrong: {result.case.id} [{result.case.kind}]: labelled {result.case.category}, "
            f"answered {result.predicted} ({result.grade}): {result.summary[:160]}"
        )
    if len(wrong) > show_wrong:
        typer.echo(f"  ({len(wrong) - show_wrong} more wrong cases: --show-wrong)")
    hidden = len(report.part(holdout=True).wrong())
    if hidden and not show_holdout:
        typer.echo(f"  ({hidden} wrong holdout cases not listed: --show-holdout)")


# Simulated bundles whose files seed the fuzzer by default: every export format, three clouds.
_FUZZ_BUNDLES = (("maintenance", 1), ("maintenance", 2), ("maintenance", 3), ("xid79", 1))


@app.command("fuzz")
def bench_fuzz(
    inputs: Annotated[int, typer.Option("--inputs", help="Mutated files to feed.")] = 20_000,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same mutants.")] = 1,
    seeds: Annotated[
        list[Path] | None,
        typer.Option(
            "--seeds",
            help="Folders or files of real exports to mutate (repeatable) [default: simulated "
            "bundles of every format].",
        ),
    ] = None,
    save: Annotated[
        Path | None, typer.Option("--save", help="Write each crashing input into this folder.")
    ] = None,
) -> None:
    """Feed mutated real exports (wrong JSON types, numbers past 64 bits, 1e999, lone
    surrogates, deep nesting, flipped bytes, NUL bytes, cut files, runaway and garbage lines)
    through `whyjob ingest` into a real index and through `whyjob diagnose`; print crashes,
    inputs slower than 5 s, and peak memory. Exit code 1 when anything escaped or hung."""
    import resource
    import tempfile
    from collections import Counter

    from whyjob.cli.fuzzing import load_seeds, run

    with tempfile.TemporaryDirectory(prefix="whyjob-fuzz-") as scratch:
        folders = list(seeds or ())
        if not folders:
            from whyjob.sim.bundle import simulate

            for scenario, number in _FUZZ_BUNDLES:
                out = Path(scratch) / f"{scenario}-{number}"
                simulate(scenario, number, out)
                folders.append(out)
        corpus = load_seeds(folders)
        if not corpus:
            fail("no seed files found (.json, .jsonl, .yaml, .log, .prom, .txt under 4 MiB)", 2)
        typer.echo(f"{len(corpus)} seed files; feeding {inputs:,} mutants (seed {seed})")

        def progress(done: int) -> None:
            if done % 10_000 == 0:
                typer.echo(f"  {done:,} ...", err=True)

        report = run(
            corpus, inputs, Path(scratch) / "index.sqlite", seed=seed, on_progress=progress
        )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    typer.echo(
        f"{report.inputs:,} inputs in {report.seconds:.1f} s ({report.inputs / max(report.seconds, 1e-9):,.0f}/s): "
        f"{report.records:,} records read, {report.quarantined:,} quarantined"
    )
    typer.echo(
        f"crashes: {len(report.crashes)}   hangs (> 5 s): {len(report.slow)}   "
        f"peak RSS: {peak_mib:,.0f} MiB"
    )
    places = Counter((c.where, c.error.split(":")[0]) for c in report.crashes)
    for (where, error), count in places.most_common(20):
        typer.echo(f"  {count:>5}  {where}  {error}")
    for origin, took in report.slow[:20]:
        typer.echo(f"  slow: {origin} took {took:.1f} s")
    if save is not None and report.crashes:
        save.mkdir(parents=True, exist_ok=True)
        for n, crash in enumerate(report.crashes):
            (save / f"crash-{n:04d}-{Path(crash.origin).name}").write_bytes(crash.data)
        typer.echo(f"crashing inputs written to {save}")
    if report.crashes or report.slow:
        raise typer.Exit(1)
