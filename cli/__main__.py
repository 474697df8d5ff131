"""`python -m whyjob.cli` is `whyjob`."""

from whyjob.cli.main import main

main()
