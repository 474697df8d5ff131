"""`whyjob collect`: run the collectors the config file names, until stopped."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from whyjob.cli.state import fail, state_of

if TYPE_CHECKING:
    from whyjob.cli.marking import MarkLoop
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["collect", "fewer_malloc_arenas"]


def _start_retention(config: Path, index: Path | ElasticSettings, stop: threading.Event) -> None:
    """The `retention:` policy, applied every `interval` on a connection of its own (each
    batch a short write: the collectors' writer waits for one batch at most)."""
    from whyjob.core.index import open_index
    from whyjob.core.retention import load_policy, prune

    policy = load_policy(config)
    if not policy.configured:
        return

    def run() -> None:
        while not stop.wait(policy.interval_s):
            try:
                with open_index(index, readonly=False, cache_mib=16, mmap_mib=0) as db:
                    done = prune(db, policy, int(time.time() * 1000), stop=stop.is_set)
                if done.total:
                    _say(f"retention: dropped {done.total:,} records")
            except Exception as exc:  # the next round tries again
                _say(f"retention: {type(exc).__name__}: {exc}")

    threading.Thread(target=run, name="whyjob-retention", daemon=True).start()


def _say(line: str) -> None:
    sys.stderr.write(f"whyjob collect: {line}\n")


def _start_marking(
    ctx: typer.Context,
    settings: dict[str, Any],
    index: Path | ElasticSettings,
    stop: threading.Event,
) -> MarkLoop:
    """The opt-in node marker (`mark_nodes:`): its own API client, as it alone writes."""
    from whyjob.cli.commands import load_ruleset
    from whyjob.cli.marking import MarkLoop
    from whyjob.collector.live.kubernetes import api_client_from
    from whyjob.collector.live.nodemarks import NodeMarker

    marker = NodeMarker(api_client_from(settings), settings["label"], taint=settings["taint"])
    loop = MarkLoop(
        index,
        load_ruleset(ctx),
        marker,
        settings,
        say=_say,
        cluster=state_of(ctx).settings.cluster,
    )
    loop.start(stop)
    sys.stderr.write(
        f"whyjob collect: mark_nodes: labelling{' and tainting' if settings['taint'] else ''} "
        f"nodes with a notice ahead as {settings['label']}\n"
    )
    return loop


def collect(
    ctx: typer.Context,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Stop after this many seconds (default: run until SIGTERM or Ctrl-C).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Follow the cluster and the clouds live: the collectors under `collectors:` in the config
    file (--config or WHYJOB_CONFIG; docs/configuration.md), writing into the index, with
    health and lag on the metrics endpoint (`metrics.listen`, default 127.0.0.1:9464)."""
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.live.config import load_collect_config
    from whyjob.collector.live.runner import start_collectors
    from whyjob.core.errors import WhyjobError

    fewer_malloc_arenas()
    state = state_of(ctx)
    settings = state.settings
    if settings.config_path is None:
        fail(
            "no config file: `whyjob --config FILE collect` (or WHYJOB_CONFIG) naming the "
            "collectors to run; see docs/configuration.md",
            2,
        )
    try:
        config = load_collect_config(settings.config_path)
        running = start_collectors(
            config,
            settings.location,
            IngestOptions(
                cluster=settings.cluster,
                launchers=settings.launchers,
                log_markers=settings.log_markers,
                limits=settings.limits,
            ),
        )
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    _start_retention(settings.config_path, settings.location, running.stop_event)
    marking = None
    if config.mark_nodes is not None:
        marking = _start_marking(ctx, config.mark_nodes, settings.location, running.stop_event)
    if not running.collectors and running.receiver is None and marking is None:
        running.stop()
        fail("no collector could start (the lines above say why)", 1)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    where = (
        f" metrics on http://{running.metrics.address[0]}:{running.metrics.address[1]}/metrics"
        if running.metrics
        else ""
    )
    sys.stderr.write(f"whyjob collect: writing to {settings.describe()};{where}\n")
    deadline = None if duration is None else time.monotonic() + duration
    while not done.wait(1.0):
        if running.writer.failed is not None:
            running.stop()
            fail(f"{running.health.fatal}; stopping so that a supervisor restarts this process", 1)
        if deadline is not None and time.monotonic() >= deadline:
            break
    running.stop()
    if marking is not None:
        marking.join(10)
    sys.stderr.write("whyjob collect: stopped\n")


def fewer_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread its own malloc arena (8 per core); a collector's watch threads
    then hold on to freed memory in each of them. Two arenas keep the resident set near what is
    in use. No effect outside glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        ctypes.CDLL(name).mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        return
