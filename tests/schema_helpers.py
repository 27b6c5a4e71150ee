"""Helpers for the schema index tests: edit the manifest, make it look settled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def edit_manifest(path: Path, change: Any) -> None:
    """Apply ``change(doc)`` to the manifest JSON and make the file look settled (not racy)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    settle(path)


def settle(path: Path, seconds: float = 10) -> None:
    """Set the file's mtime in the past. Its change time (ctime), which the stat-keyed caches
    compare, a utime sets to now: a test that needs a cache to trust the stat also waits a
    short racy window out (tests.conftest.settle)."""
    past = time.time() - seconds
    os.utime(path, (past, past))
