"""The HTTP API and web timeline (whyjob serve)."""
