"""`seed --write` run twice: the second run changes no file and says so (it said it had
updated every seed file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import EXAMPLE_MANIFEST


def test_seed_write_again_reports_the_files_unchanged(project: Path, cli) -> None:
    (project / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, project / "target" / "mdl.json")
    first = cli("seed", "--write")
    assert first.exit_code == 0, first.output
    assert first.output.startswith("wrote 26 new and updated 0 seed pair files, 0 unchanged")
    seeds = sorted((project / "knowledge" / "sql" / "seeds").iterdir())
    before = {p: p.stat().st_mtime_ns for p in seeds}
    again = cli("seed", "--write")
    assert again.output.startswith("wrote 0 new and updated 0 seed pair files, 26 unchanged"), \
        again.output
    assert {p: p.stat().st_mtime_ns for p in seeds} == before   # not one file rewritten
    written = json.loads(cli("seed", "--write", "--json").output)["written"]
    assert len(written) == 26 and not any(w["changed"] or w["created"] for w in written)
