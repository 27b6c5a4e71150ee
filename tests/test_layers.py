"""The test suite's own scheme: every file named in a layer exists, every test is in
exactly one layer, the slow files are handed out first, the files of `serial` tests are
listed for the serial run, and the session's indexed example is handed out as a fresh
index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import (
    LAYERS,
    REPO,
    SERIAL_FILES,
    SLOW_FILES,
    SYSTEM_FILES,
    UNIT_FILES,
    layer_of,
    slow_files_first,
)


def test_every_named_file_exists_and_is_in_one_layer() -> None:
    files = {p.stem for p in (REPO / "tests").glob("test_*.py")}
    named = UNIT_FILES | SYSTEM_FILES | SERIAL_FILES | set(SLOW_FILES)
    assert named <= files, f"no such test file: {sorted(named - files)}"
    assert not UNIT_FILES & SYSTEM_FILES
    assert layer_of("test_a_file_nobody_listed") == "integration"


def test_each_collected_test_has_one_layer(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        layers = [m.name for m in item.iter_markers() if m.name in LAYERS]
        assert len(layers) == 1, f"{item.nodeid}: {layers}"


def test_the_slow_files_come_first_and_each_file_stays_together_in_order() -> None:
    slow, later = SLOW_FILES[1], SLOW_FILES[0]
    items = [SimpleNamespace(path=Path(f"tests/{stem}.py"), n=n) for stem, n in [
        ("test_few", 0), ("test_many", 0), (slow, 0), ("test_many", 1), ("test_few", 1),
        (later, 0), ("test_many", 2), (slow, 1)]]
    slow_files_first(items)
    assert [(i.path.stem, i.n) for i in items] == [
        (later, 0), (slow, 0), (slow, 1), ("test_many", 0), ("test_many", 1), ("test_many", 2),
        ("test_few", 0), ("test_few", 1)]


def test_the_parallel_run_lists_the_files_of_serial_tests(tmp_path: Path) -> None:
    """What `make test` runs alone after the parallel run: each file holding a `serial` test
    (by a mark or by SERIAL_FILES), written once under xdist; none is an empty list."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")
    (tests / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "test_b.py").write_text(
        "import pytest\n\n\ndef test_b():\n    pass\n\n\n"
        "@pytest.mark.serial\ndef test_b_alone():\n    pass\n")
    listing = tmp_path / "serial-files"

    def run(*args: str) -> str:
        listing.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-m", "not serial", f"--serial-files={listing}", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
        assert done.returncode == 0, done.stdout + done.stderr
        return listing.read_text(encoding="utf-8")

    assert run("-n", "1", "tests") == "tests/test_b.py\n"  # one xdist worker writes it
    assert run("tests/test_a.py") == ""


def test_the_indexed_example_is_a_fresh_copy(indexed_example: Path,
                                             _indexed_example: Path) -> None:
    from wrenmem import Memory

    assert indexed_example != _indexed_example
    memory = Memory(indexed_example)
    assert memory.check().fresh
    report = memory.sync()
    assert report.embedded == 0, report.summary()
