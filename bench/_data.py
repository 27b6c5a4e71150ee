"""Where the benchmarks find the public data sets (see ``data/README.md`` there for sources
and licences): ``$WRENMEM_BENCH_DATA`` if set, else ``../shared/data`` beside the repository.

Tests never read it: they use the small copies in ``tests/fixtures/``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """``$WRENMEM_BENCH_DATA``, else ``<repo>/../shared/data``."""
    return Path(os.environ.get("WRENMEM_BENCH_DATA") or REPO.parent / "shared" / "data")


DATA = data_dir()
