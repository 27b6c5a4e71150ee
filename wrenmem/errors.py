"""The one exception hierarchy of wrenmem; the CLI turns these into messages and exit codes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def log_to_stderr(verbose: int = 0) -> None:
    """wrenmem's diagnostics on stderr, as ``wrenmem: message`` (warnings; -v info, -vv
    debug): the one logging set-up of the CLI and its fast path."""
    import logging

    logging.basicConfig(level=logging.WARNING - 10 * min(verbose, 2),
                        format="wrenmem: %(message)s")


class WrenmemError(Exception):
    """Base of every error wrenmem raises on purpose."""


class LocatedError(WrenmemError):
    """An error that points at a place in a file: rendered as ``path:line: reason``."""

    def __init__(self, path: str | Path, reason: str, line: int = 1, col: int | None = None):
        self.path = str(path)
        self.reason = reason
        self.line = line
        self.col = col
        super().__init__(self.location() + ": " + reason)

    def location(self) -> str:
        loc = f"{self.path}:{self.line}"
        return f"{loc}:{self.col}" if self.col is not None else loc


class PairError(LocatedError):
    """A file under the knowledge folder that is not a valid NL→SQL pair."""


class UnreadableFileError(WrenmemError):
    """A file wrenmem refuses to read: not a regular file, or larger than allowed."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class SettingsError(WrenmemError):
    """A bad value in flags, environment or ``wrenmem.toml``."""


class ManifestError(WrenmemError):
    """A Wren MDL manifest that cannot be used."""


class ManifestNotFoundError(ManifestError):
    """No file where the ``manifest`` setting says the manifest is."""


class ExtraMissingError(WrenmemError):
    """An optional dependency (an install extra) is not installed."""


class IndexStorageError(WrenmemError):
    """The index's storage (object store or folder) refused or failed an operation."""


class DiskFullError(IndexStorageError):
    """A write failed for want of space (ENOSPC, or LanceDB's "No space left on device");
    ``short``: what failed and the free space, without the advice."""

    def __init__(self, message: str, short: str = ""):
        super().__init__(message)
        self.short = short or message


class ReaderRoleError(WrenmemError):
    """A write of the shared index was asked of a reader (``role = "reader"``)."""


class LockTimeoutError(WrenmemError):
    """Another wrenmem process held the lock for too long."""


class SqlCheckError(WrenmemError):
    """SQL that does not parse in its dialect (or names unknown tables or columns).

    ``problems`` are the checker's findings, each with ``message``, ``line`` and ``col``
    (1-based within the SQL text).
    """

    def __init__(self, problems: Sequence[Any], prefix: str = "not stored"):
        self.problems = list(problems)
        self.prefix = prefix
        listed = "; ".join(f"{p.line}:{p.col}: {p.message}" for p in self.problems)
        super().__init__(f"{prefix}: the SQL has {len(self.problems)} problem(s): {listed}")
