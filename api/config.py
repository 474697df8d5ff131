"""The `api:`, `alerts:`, `slack:` and `preflight:` sections of the config file
(docs/configuration.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from whyjob.core.configfile import ConfigFile
from whyjob.explain.preflight import PREFLIGHT_KEYS

__all__ = ["ALERTS_KEYS", "API_KEYS", "SLACK_KEYS", "load_surface_config"]

API_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "listen": ("listen", ("127.0.0.1", 8080)),
    "tokens": ("path", None),
    "proxy_cidrs": ("list", []),
    "proxy_user_header": ("str", "X-Forwarded-User"),
    "proxy_groups_header": ("str", "X-Forwarded-Groups"),
    "groups": ("map", {}),
    "audit_log": ("path", None),
    "public_url": ("str", None),  # None: http://LISTEN
    "login_links": ("bool", False),
    "open_docs": ("bool", False),  # /docs and /openapi.json without a token
    "cache": ("duration|off", 30.0),
    # Several replicas: a Lease (NAMESPACE/NAME) picks the one that sends alerts and Slack.
    "lease": ("str", None),
    "lease_duration": ("duration", 15.0),
    "kubeconfig": ("path", None),
    "context": ("str", None),
    "in_cluster": ("bool", False),
}
ALERTS_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "min_restarts": ("int", 3),
    "window": ("duration", 6 * 3600.0),
    "interval": ("duration", 60.0),
    "alertmanager": ("str", None),
    "webhook": ("str", None),
    "slack": ("bool", True),
}
SLACK_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "token": ("str", None),
    "signing_secret": ("str", None),
    "base_url": ("str", None),
    "default_channel": ("str", None),
    "routes": ("map", {}),
    "owner_label": ("str", "whyjob.io/owner"),
    "per_channel_per_minute": ("int", 20),
    "state": ("path", None),
    "command_namespaces": ("list", []),
}


def load_surface_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """The sections with defaults filled in (all defaults without a config file)."""
    if path is None:
        slack = {k: d for k, (_, d) in SLACK_KEYS.items()}
        slack["token"] = os.environ.get("WHYJOB_SLACK_TOKEN")
        slack["signing_secret"] = os.environ.get("WHYJOB_SLACK_SIGNING_SECRET")
        return {
            "api": {k: d for k, (_, d) in API_KEYS.items()},
            "alerts": {k: d for k, (_, d) in ALERTS_KEYS.items()},
            "slack": slack,
            "preflight": {k: d for k, (_, d) in PREFLIGHT_KEYS.items()},
        }
    f = ConfigFile(path)
    slack = f.section(f.top.get("slack"), SLACK_KEYS, "slack")
    # Secrets may stay out of the file: mounted as environment variables from a Secret.
    slack["token"] = slack["token"] or os.environ.get("WHYJOB_SLACK_TOKEN")
    slack["signing_secret"] = slack["signing_secret"] or os.environ.get(
        "WHYJOB_SLACK_SIGNING_SECRET"
    )
    api = f.section(f.top.get("api"), API_KEYS, "api")
    lease = api["lease"]
    if lease is not None and (
        lease.count("/") != 1 or lease.startswith("/") or lease.endswith("/")
    ):
        raise f.error(f.top.get("api"), f"api.lease {lease!r} is NAMESPACE/NAME of a Lease")
    if api["lease_duration"] < 3:
        raise f.error(
            f.top.get("api"),
            f"api.lease_duration {api['lease_duration']:g}s is too short: the holder renews every "
            "2/15 of it and must within 2/3 of it (3s at least; 15s is client-go's default)",
        )
    return {
        "api": api,
        "alerts": f.section(f.top.get("alerts"), ALERTS_KEYS, "alerts"),
        "slack": slack,
        "preflight": f.section(f.top.get("preflight"), PREFLIGHT_KEYS, "preflight"),
    }
