"""The `whyjob` command line."""
