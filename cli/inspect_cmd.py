"""Looking into the index: experiments, full-text search, one record, quarantine, stats."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from whyjob.cli.output import Format, JsonFlag, OutputOption, choose, emit
from whyjob.cli.state import fail, state_of

__all__ = ["experiments", "prune", "quarantine", "search", "show", "stats"]


def experiments(
    ctx: typer.Context,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace.")
    ] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.")] = 50,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List the experiments the index knows, newest first (with their cluster when the index
    holds several; -o wide adds the label that named each). Exit 0, 1 without an index."""
    from whyjob.core.timeutil import format_ts

    fmt = choose(output, as_json)
    with state_of(ctx).open_index(readonly=True) as index:
        found = index.experiments(namespace=namespace, limit=limit, cluster=cluster)
    if fmt.data:
        emit(
            {
                "schema": "whyjob.experiments/v1",
                "items": [
                    {
                        "name": e.name,
                        "namespace": e.namespace,
                        "cluster": e.cluster or None,
                        "launcher": e.launcher,
                        "label": e.label,
                        "first_seen": format_ts(e.first_seen),
                        "last_seen": format_ts(e.last_seen),
                    }
                    for e in found
                ],
            },
            fmt,
        )
        return
    if not found:
        typer.echo("no experiments in the index yet: `whyjob ingest PATH` or `whyjob demo`")
        return
    from whyjob.cli.tables import print_table

    # A cluster column only when the index names clusters (always in wide).
    clusters = fmt is Format.wide or any(e.cluster for e in found)
    wide = fmt is Format.wide
    print_table(
        ["experiment", "namespace", *(["cluster"] if clusters else []), "launcher",
         *(["label"] if wide else []), "first seen", "last seen"],
        [
            (e.name, e.namespace, *([e.cluster or "-"] if clusters else []), e.launcher,
             *([e.label] if wide else []), format_ts(e.first_seen), format_ts(e.last_seen))
            for e in found
        ],
    )  # fmt: skip


_MESSAGE_WIDTH = 140  # a record's message on one line of text; -o wide prints it whole


def _line(ev, width: int | None = _MESSAGE_WIDTH) -> str:  # type: ignore[no-untyped-def]
    from whyjob.core.timeutil import format_ts

    where = ev.pod or ev.node or ev.instance_id or ev.gpu_uuid or ev.asg or ev.experiment or "-"
    message = ev.message if width is None else ev.message[:width]
    return f"{format_ts(ev.ts)}  {ev.public_id}  {ev.kind:<22} {where:<36} {message}"


def search(
    ctx: typer.Context,
    query: Annotated[
        str,
        typer.Argument(
            help='Full-text query (SQLite FTS5 syntax: words, "a phrase", AND, OR, prefix*).'
        ),
    ],
    limit: Annotated[int, typer.Option("--limit", help="Most recent matches to show.")] = 50,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Search every record's message (-o wide: whole messages). Exit 0 (also with no
    match), 2 for a malformed query, 1 without an index."""
    from whyjob.core.errors import WhyjobError
    from whyjob.core.evidence import evidence_document

    fmt = choose(output, as_json)
    state = state_of(ctx)
    state.require_index()  # searching must not create an index where there was none
    with state.open_index(readonly=False) as index:
        if index.search_backlog():
            added = index.sync_search()
            sys.stderr.write(f"whyjob: indexed {added:,} new records for search\n")
        try:
            found = index.search(query, limit)
        except WhyjobError as exc:
            fail(str(exc), 2)
    if fmt.data:
        items = [evidence_document(ev) for ev in found]
        emit({"schema": "whyjob.records/v1", "query": query, "items": items}, fmt)
        return
    for ev in found:
        typer.echo(_line(ev, None if fmt is Format.wide else _MESSAGE_WIDTH))
    if not found:
        typer.echo("no matches")


def show(
    ctx: typer.Context,
    ids: Annotated[
        list[str], typer.Argument(help="Evidence ids (16 hex digits, as printed by explain).")
    ],
    raw: Annotated[
        bool, typer.Option("--raw/--no-raw", help="Also print the record as its source gave it.")
    ] = True,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Print evidence records by id, with their attributes and raw source. Exit 0, 2 for a
    malformed id, 3 when an id is not there, 1 without an index."""
    import orjson

    from whyjob.core.evidence import evidence_document, format_id, parse_id

    fmt = choose(output, as_json)
    try:
        wanted = [parse_id(i) for i in ids]
    except ValueError as exc:
        fail(str(exc), 2)
    with state_of(ctx).open_index(readonly=True) as index:
        found = {ev.id: ev for ev in index.get(wanted)}
        if fmt.data:
            items = [
                evidence_document(found[n], _raw_of(index, found[n])[0] if raw else None)
                for n in wanted
                if n in found
            ]
            missing = [format_id(n) for n in wanted if n not in found]
            emit({"schema": "whyjob.records/v1", "items": items, "missing": missing}, fmt)
        for number in wanted if not fmt.data else ():
            ev = found.get(number)
            if ev is None:
                sys.stderr.write(f"whyjob: no record {number:016x} in the index\n")
                continue
            typer.echo(_line(ev))
            entities = ", ".join(f"{k}={v}" for k, v in ev.entities().items())
            typer.echo(f"  source {ev.source}, severity {ev.severity}, from {ev.origin}")
            if entities:
                typer.echo(f"  {entities}")
            if ev.attrs:
                typer.echo(
                    "  attrs " + orjson.dumps(ev.attrs, option=orjson.OPT_SORT_KEYS).decode()
                )
            body, snapshot = _raw_of(index, ev) if raw else (None, None)
            if snapshot is not None:
                typer.echo(f"  from snapshot {snapshot}:")
            if body:
                try:
                    pretty = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
                except orjson.JSONDecodeError:
                    pretty = body.decode("utf-8", "replace")
                typer.echo("  raw:\n    " + pretty.replace("\n", "\n    "))
    if len(found) < len(wanted):
        raise typer.Exit(3)


def _raw_of(index, ev) -> tuple[bytes | None, str | None]:  # type: ignore[no-untyped-def]
    """The record's own raw body, else that of the snapshot it was read from (facts read
    from a pod or node object point at the snapshot that holds it) and the snapshot's id."""
    from whyjob.core.evidence import parse_id

    body: bytes | None = index.raw(ev.id)
    snapshot = ev.attrs.get("snapshot")
    if body is not None or not isinstance(snapshot, str):
        return body, None
    try:
        return index.raw(parse_id(snapshot)), snapshot
    except ValueError:  # not an id: a record from elsewhere that names a snapshot its own way
        return None, None


def quarantine(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", help="Most recent rejections to show.")] = 50,
    body: Annotated[
        bool, typer.Option("--body", help="Also print the rejected bytes (first 400).")
    ] = False,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List records that were rejected at import, with file, line and reason. Exit 0, 1
    without an index."""
    from whyjob.core.timeutil import format_ts

    fmt = choose(output, as_json)
    with state_of(ctx).open_index(readonly=True) as index:
        rows = index.quarantined(limit)
    if fmt.data:
        items = [
            {
                "at": format_ts(at),
                "origin": origin,
                "format": kind or None,
                "reason": reason,
                "body": bytes(data[:400]).decode("utf-8", "replace") if body and data else None,
            }
            for _, at, origin, kind, reason, data in rows
        ]
        emit({"schema": "whyjob.quarantine/v1", "items": items}, fmt)
        return
    if not rows:
        typer.echo("nothing in quarantine")
        return
    for _, at, origin, kind, reason, data in rows:
        typer.echo(f"{format_ts(at)}  {origin}  [{kind or '-'}]  {reason}")
        if body and data:
            typer.echo(
                "    " + bytes(data[:400]).decode("utf-8", "replace").replace("\n", "\n    ")
            )


def stats(ctx: typer.Context, output: OutputOption = None, as_json: JsonFlag = False) -> None:
    """How much the index holds, by table and by kind, and what retention will drop next.
    Exit 0, 1 without an index."""
    import time

    from whyjob.core.errors import WhyjobError
    from whyjob.core.retention import load_policy, plan
    from whyjob.core.timeutil import format_duration, format_ts

    state = state_of(ctx)
    try:
        policy = load_policy(state.settings.config_path)
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    with state.open_index(readonly=True) as index:
        counts = index.counts()
        kinds = index.kinds()
        first, last = index.time_range()
        expiring = plan(index, policy, int(time.time() * 1000))
        used = index.used_bytes()
    size = state.settings.index.stat().st_size if state.settings.elastic is None else used
    fmt = choose(output, as_json)
    if fmt.data:
        emit(_stats_document(state.settings.describe(), size, counts, kinds, (first, last),
                             policy, expiring), fmt)  # fmt: skip
        return
    typer.echo(f"index {state.settings.describe()} ({size / 1e6:,.1f} MB)")
    typer.echo(f"records {counts['evidence']:,} from {format_ts(first)} to {format_ts(last)}")
    typer.echo(
        f"pods {counts['pods']:,}, experiments {counts['experiments']:,}, bindings {counts['bindings']:,}, "
        f"quarantined {counts['quarantine']:,}, imports {counts['imports']:,}"
    )
    for kind, n in kinds.items():
        keep = policy.keep_ms(kind) if policy.configured else None
        kept = ""
        if keep is not None:
            days, rest = divmod(keep, 86_400_000)
            kept = f"  kept {days}d" if days and not rest else f"  kept {format_duration(keep)}"
        gone = expiring.get(kind)
        due = f", {gone[0]:,} due to go (oldest {format_ts(gone[1])})" if gone else ""
        typer.echo(f"  {kind:<24} {n:>12,}{kept}{due}")
    if not policy.configured:
        typer.echo("retention: off (nothing is ever dropped; docs/configuration.md `retention:`)")
    else:
        due_total = sum(n for n, _ in expiring.values())
        over = (
            f"; over {policy.max_bytes / 2**30:,.1f} GiB the shortest-kept kinds go first"
            if policy.max_bytes
            else ""
        )
        typer.echo(f"retention: {due_total:,} records due to go at the next round{over}")


def _stats_document(  # type: ignore[no-untyped-def]
    where: str, size: int, counts, kinds, span, policy, expiring
) -> dict[str, object]:
    from whyjob.core.timeutil import format_ts

    return {
        "schema": "whyjob.stats/v1",
        "index": where,
        "bytes": size,
        "records": counts["evidence"],
        "first": format_ts(span[0]) if span[0] else None,
        "last": format_ts(span[1]) if span[1] else None,
        "counts": dict(counts),
        "kinds": {
            kind: {
                "records": n,
                "keep_ms": policy.keep_ms(kind) if policy.configured else None,
                "due": expiring[kind][0] if kind in expiring else 0,
            }
            for kind, n in kinds.items()
        },
        "retention": {
            "configured": policy.configured,
            "due": sum(n for n, _ in expiring.values()),
            "max_bytes": policy.max_bytes or None,
        },
    }


def prune(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go, drop nothing.")
    ] = False,
) -> None:
    """Apply the `retention:` policy of the config file now: drop the records older than their
    kind's keep, then, over `max_size`, the oldest of the shortest-kept kinds; a batch at a
    time, so readers and collectors go on. `whyjob collect` does the same every `interval`.
    Exit 0, or 2 when no policy is configured."""
    import time

    from whyjob.core.errors import WhyjobError
    from whyjob.core.retention import load_policy, plan
    from whyjob.core.retention import prune as apply

    state = state_of(ctx)
    try:
        policy = load_policy(state.settings.config_path)
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    if not policy.configured:
        fail("no `retention:` section in the config file: nothing is ever dropped without one", 2)
    now = int(time.time() * 1000)
    with state.open_index(readonly=dry_run) as index:
        if dry_run:
            for kind, (n, _) in sorted(plan(index, policy, now).items()):
                typer.echo(f"would drop {n:,} {kind}")
            return
        started = time.perf_counter()
        done = apply(index, policy, now)
    for kind, n in sorted(done.by_age.items()):
        typer.echo(f"dropped {n:,} {kind} (older than its keep)")
    for kind, n in sorted(done.by_size.items()):
        typer.echo(f"dropped {n:,} {kind} (the index was over max_size)")
    typer.echo(
        f"{done.total:,} records dropped in {time.perf_counter() - started:.1f} s; "
        f"{done.freed_pages:,} pages given back to the file system"
    )
