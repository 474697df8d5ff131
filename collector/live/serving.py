"""An ASGI app served by uvicorn from a thread of its own, for the collector's endpoints (the
receiver, the metrics and probes): the socket bound in the caller, so a port in use fails
there and port 0's pick is known before start; started only once it answers; stopped within
a bound."""

from __future__ import annotations

import threading
import time
from typing import Any

from whyjob.core.net import listen_socket

__all__ = ["ThreadedServer"]


class ThreadedServer:
    def __init__(
        self, app: Any, host: str, port: int, *, name: str, grace_s: int | None = None
    ) -> None:
        import uvicorn

        self.name = name
        self._socket = listen_socket(host, port)
        config = uvicorn.Config(
            app,
            log_level="warning",
            log_config=None,  # the process's logging is its own, not reconfigured per server
            access_log=False,  # scrapes, probes and agents' posts would drown the process's log
            lifespan="off",
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=grace_s,  # requests under way get this long on stop
        )
        self._server = uvicorn.Server(config)
        self._grace_s = grace_s
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=name, daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def start(self, *, within_s: float = 10) -> None:
        """Returns once the server answers; a server that did not start closes its socket."""
        self._thread.start()
        deadline = time.monotonic() + within_s
        while not self._server.started:  # uvicorn offers no event to wait on
            if not self._thread.is_alive() or time.monotonic() > deadline:
                address = self.address
                self.stop()
                raise RuntimeError(f"the {self.name} on {address} did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=(self._grace_s or 0) + 10)
        self._socket.close()
