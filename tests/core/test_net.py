"""Listening sockets for every server whyjob runs: the family from the address, a port in
use or a name that does not resolve said in words."""

from __future__ import annotations

import socket

import pytest

from whyjob.core.net import ListenError, listen_socket


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_ipv4_with_the_kernels_port_and_nagle_off_for_asyncio() -> None:
    with listen_socket("127.0.0.1", 0) as sock:
        assert sock.family == socket.AF_INET and sock.getsockname()[1] > 0
        assert sock.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only then


@pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback here")
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_ipv6_addresses_bracketed_or_not(host: str) -> None:
    with listen_socket(host, 0) as sock:
        assert sock.family == socket.AF_INET6 and sock.getsockname()[0] == "::1"


def test_a_port_in_use_and_a_name_that_does_not_resolve_are_said_in_words() -> None:
    with listen_socket("127.0.0.1", 0) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(ListenError, match=f"^cannot listen on 127.0.0.1:{port}: Address"):
            listen_socket("127.0.0.1", port)
    with pytest.raises(ListenError, match=r"cannot listen on no-such-host\.invalid:80: ") as raised:
        listen_socket("no-such-host.invalid", 80)
    assert "Unknown error" not in str(raised.value)
