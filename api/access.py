"""Who is asking, and which namespaces they may read.

Two ways in, configured under `api:`:
- **bearer tokens** from a file (or a mounted Secret): each token names a principal and the
  namespaces it may read (`"*"`: all). The file holds tokens or their SHA-256, so it need not
  hold secrets; lookups hash the presented token, so comparing takes the same time whatever it
  is.
- **a trusted proxy** (an OIDC proxy such as oauth2-proxy in front): the user and groups come
  from its headers, only on requests from the proxy's own addresses; groups map to namespaces.

A request that is neither is refused. Every route checks the namespace of what it returns.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from whyjob.core.errors import ConfigError

__all__ = ["Access", "Principal", "TrustedProxy", "digest", "load_tokens"]


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    namespaces: frozenset[str]
    via: str = "token"

    @property
    def everything(self) -> bool:
        return "*" in self.namespaces

    def may_read(self, namespace: str | None) -> bool:
        return self.everything or (namespace is not None and namespace in self.namespaces)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(path: Path) -> dict[str, Principal]:
    """`tokens: [{name, token | sha256, namespaces: [...]}]` → {sha256: principal}."""
    try:
        document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the tokens file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    entries = document.get("tokens") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected `tokens:` with a list of {{name, token, namespaces}}")
    out: dict[str, Principal] = {}
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"{path}: token {number} needs a name")
        secret = entry.get("token")
        hashed = entry.get("sha256") or (digest(str(secret)) if secret else None)
        namespaces = entry.get("namespaces")
        if not hashed or not isinstance(namespaces, list) or not namespaces:
            raise ConfigError(
                f"{path}: token {entry['name']!r} needs `token` (or `sha256`) and `namespaces`"
            )
        out[str(hashed).lower()] = Principal(entry["name"], frozenset(str(n) for n in namespaces))
    return out


@dataclass(frozen=True, slots=True)
class TrustedProxy:
    """Identity from an authenticating proxy's headers, believed only from its addresses."""

    proxies: Sequence[str]  # CIDRs the proxy connects from
    groups: Mapping[str, Sequence[str]]  # group -> namespaces
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    _networks: tuple[Any, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            networks = tuple(ipaddress.ip_network(cidr, strict=False) for cidr in self.proxies)
        except ValueError as exc:
            raise ConfigError(f"api.trusted_proxy.proxies: {exc}") from None
        object.__setattr__(self, "_networks", networks)

    def principal(self, client: str | None, headers: Mapping[str, str]) -> Principal | None:
        user = headers.get(self.user_header.lower()) or headers.get(self.user_header)
        if not user or client is None:
            return None
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return None
        if not any(address in network for network in self._networks):
            return None  # the header is only as good as who set it
        raw = headers.get(self.groups_header.lower()) or headers.get(self.groups_header) or ""
        namespaces = {ns for group in raw.split(",") for ns in self.groups.get(group.strip(), ())}
        return Principal(user, frozenset(namespaces), via="proxy")


@dataclass(frozen=True, slots=True)
class Access:
    tokens: Mapping[str, Principal]
    proxy: TrustedProxy | None = None

    def principal(self, client: str | None, headers: Mapping[str, str]) -> Principal | None:
        authorization = headers.get("authorization") or headers.get("Authorization") or ""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token:
            return self.tokens.get(digest(token.strip()))
        if self.proxy is not None:
            return self.proxy.principal(client, headers)
        return None
