"""Keep the derived index in step after the CLI writes or deletes pair files.

The index module fills this in; with only the core install there is nothing to keep in step.
"""

from __future__ import annotations

from collections.abc import Sequence

from wrenmem.settings import Settings


def after_write(settings: Settings, paths: Sequence[str]) -> str | None:
    """Bring the index up to date for ``paths`` (relative pair paths) if an index exists.

    Returns a short note for the user, or None. Never raises for index trouble: the files
    are already written and are the truth; a later ``sync`` repairs the index.
    """
    return None
