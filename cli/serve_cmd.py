"""`whyjob serve`: the HTTP API, the web timeline, Slack's slash command and the loop alerts."""

from __future__ import annotations

import sys
import threading
from typing import Annotated

import typer

from whyjob.cli.commands import load_ruleset
from whyjob.cli.state import fail, state_of

__all__ = ["serve"]


def serve(
    ctx: typer.Context,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", help="HOST:PORT [default: api.listen, 127.0.0.1:8080].", show_default=False
        ),
    ] = None,
) -> None:
    """Serve the index over HTTP: the API (OpenAPI at /docs), the web timeline, Slack's
    /whyjob command, and the stuck-restart-loop alerts (Alertmanager, webhook, Slack). Access
    by bearer tokens or a trusted OIDC proxy, namespace by namespace (docs/configuration.md)."""
    import uvicorn

    from whyjob.api.config import load_surface_config
    from whyjob.api.serve import build
    from whyjob.core.errors import WhyjobError

    settings = state_of(ctx).settings
    try:
        config = load_surface_config(settings.config_path)
        if listen is not None:
            host, _, port = listen.rpartition(":")
            config["api"]["listen"] = (host or "127.0.0.1", int(port))
        if config["api"]["public_url"] is None:
            host, port_number = config["api"]["listen"]
            config["api"]["public_url"] = f"http://{host}:{port_number}"
        served = build(config, settings.location, load_ruleset(ctx))
    except (WhyjobError, ValueError) as exc:
        fail(str(exc), getattr(exc, "exit_code", 2))
    address, number = served.listen
    from whyjob.core.net import ListenError, listen_socket

    try:
        # Bound before anything is said or started: a busy port is the first and only line.
        listener = listen_socket(address, number)
    except ListenError as exc:
        fail(str(exc), 1)
    for note in served.notes:
        sys.stderr.write(f"whyjob serve: {note}\n")
    stop = threading.Event()
    watch = threading.Thread(
        target=served.watch,
        args=(config["alerts"]["interval"], config["alerts"]["window"], stop),
        name="whyjob-loop-watch",
        daemon=True,
    )
    if served.detector is not None or served.notify is not None or served.risk is not None:
        watch.start()
    sys.stderr.write(
        f"whyjob serve: http://{address}:{number} (API docs at /docs) over {settings.describe()}\n"
    )
    try:
        # proxy_headers=False: the client address must be the connection's own, or the trusted
        # proxy check would believe an X-Forwarded-For anyone can send.
        server = uvicorn.Server(
            uvicorn.Config(served.app, log_level="warning", proxy_headers=False)
        )
        server.run(sockets=[listener])
    finally:
        stop.set()
        if watch.is_alive():  # let it end its round and give the Lease up
            watch.join(timeout=30)
