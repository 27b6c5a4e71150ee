"""The test suite's own scheme: every file named in a layer exists, every test is in
exactly one layer, and the session's indexed example is handed out as a fresh index."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import LAYERS, REPO, SERIAL_FILES, SYSTEM_FILES, UNIT_FILES, layer_of


def test_every_named_file_exists_and_is_in_one_layer() -> None:
    files = {p.stem for p in (REPO / "tests").glob("test_*.py")}
    named = UNIT_FILES | SYSTEM_FILES | SERIAL_FILES
    assert named <= files, f"no such test file: {sorted(named - files)}"
    assert not UNIT_FILES & SYSTEM_FILES
    assert layer_of("test_a_file_nobody_listed") == "integration"


def test_each_collected_test_has_one_layer(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        layers = [m.name for m in item.iter_markers() if m.name in LAYERS]
        assert len(layers) == 1, f"{item.nodeid}: {layers}"


def test_the_indexed_example_is_a_fresh_copy(indexed_example: Path,
                                             _indexed_example: Path) -> None:
    from wrenmem import Memory

    assert indexed_example != _indexed_example
    memory = Memory(indexed_example)
    assert memory.check().fresh
    report = memory.sync()
    assert report.embedded == 0, report.summary()
