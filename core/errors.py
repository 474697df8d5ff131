"""whyjob's exception tree. Surfaces catch `WhyjobError` and print its message, never a traceback.

Families:
- user input: `InputError` (a file or record a person gave us is malformed), `NotFound`.
- index: `IndexProblem` family (the SQLite file is missing, newer than this whyjob, locked).
- configuration: `ConfigError` (a config file or rule file is wrong; names file and line).
"""

from __future__ import annotations

__all__ = [
    "Ambiguous",
    "ConfigError",
    "IndexLocked",
    "IndexProblem",
    "IndexTooNew",
    "InputError",
    "NotFound",
    "WhyjobError",
]


class WhyjobError(Exception):
    """Base class: an error with a message fit to show a user as it is."""

    exit_code = 1


# -- user input ------------------------------------------------------------------------------


class InputError(WhyjobError):
    """A record or file given to whyjob is malformed. `origin` names the file and line."""

    exit_code = 2

    def __init__(self, reason: str, origin: str | None = None) -> None:
        self.reason = reason
        self.origin = origin
        super().__init__(f"{origin}: {reason}" if origin else reason)


class Ambiguous(WhyjobError):
    """A name that fits several things (an experiment in two namespaces or clusters): the
    message says which option tells them apart. A usage error, as kubectl's are."""

    exit_code = 2


class NotFound(WhyjobError):
    """What was asked for (an experiment, an evidence id) is not in the index."""

    exit_code = 3


# -- the index -------------------------------------------------------------------------------


class IndexProblem(WhyjobError):
    """The index cannot be opened or used."""


class IndexTooNew(IndexProblem):
    """The index was written by a newer whyjob; refuse rather than corrupt it."""


class IndexLocked(IndexProblem):
    """Another process holds the write lock for longer than the busy timeout."""


# -- configuration ---------------------------------------------------------------------------


class ConfigError(WhyjobError):
    """A configuration or rule file is wrong; the message names the file and line."""

    exit_code = 2
