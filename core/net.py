"""One way to open a listening socket, for every server whyjob runs (serve, the receiver, the
metrics endpoint): bound in the caller, so a port in use fails before anything is said or
started, and port 0 reports the kernel's pick."""

from __future__ import annotations

import socket

__all__ = ["ListenError", "listen_socket"]


class ListenError(OSError):
    """The address cannot be listened on; the message says why in words."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for HOST:PORT. The family comes from the address
    (`::1`, `[::]`, a name that resolves to IPv6), and the protocol is named: asyncio turns
    Nagle's algorithm off only on sockets whose proto is IPPROTO_TCP (socket.create_server
    leaves it 0, and every reply then waited out the client's delayed ACK, 40 ms)."""
    host = host.strip("[]")  # [::]:9464, the usual way to write an IPv6 HOST:PORT
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
