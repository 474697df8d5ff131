"""`whyjob agent`: the node-local collectors of one GPU node, until stopped."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Annotated

import typer

from whyjob.cli.state import fail, state_of

__all__ = ["agent"]


def agent(
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
    """Follow this node: kernel log (Xid, OOM killer, I/O), the kubelet's container log files,
    and the cloud's maintenance and spot notices, forwarded to `whyjob collect`'s receiver
    through an on-disk spool. Configured by the `agent:` section of the config file
    (docs/configuration.md); meant to run as a DaemonSet (deploy/agent.yaml)."""
    from whyjob.cli.collect_cmd import fewer_malloc_arenas
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.live.agent import start_agent
    from whyjob.collector.live.config import load_collect_config
    from whyjob.core.errors import WhyjobError

    fewer_malloc_arenas()
    settings = state_of(ctx).settings
    if settings.config_path is None:
        fail("no config file: `whyjob --config FILE agent` naming `agent.send_to`", 2)
    try:
        config = load_collect_config(settings.config_path)
        if config.agent is None:
            fail(f"{settings.config_path}: no `agent:` section (docs/configuration.md)", 2)
        running = start_agent(
            config.agent,
            IngestOptions(
                cluster=settings.cluster,
                launchers=settings.launchers,
                log_markers=settings.log_markers,
                limits=settings.limits,
            ),
            metrics_listen=config.metrics_listen,
        )
    except WhyjobError as exc:
        fail(str(exc), exc.exit_code)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    sys.stderr.write(f"whyjob agent: forwarding to {config.agent['send_to']}\n")
    done.wait(duration)
    running.stop()
    sys.stderr.write("whyjob agent: stopped\n")
