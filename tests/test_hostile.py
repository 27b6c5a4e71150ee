"""Hostile input: no file a user (or an accident) puts in a project crashes, hangs or
exhausts a command, and nothing a user wrote is lost."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.conftest import EXAMPLE_MANIFEST, write_pair


def _runner(root: Path) -> Callable[..., Result]:
    from wrenmem.cli import cli as group

    def run(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(group, ["--project", str(root), *args], input=input,
                                  catch_exceptions=False)

    return run


def _bad_manifest(root: Path) -> Path:
    """The example manifest with a lone surrogate in a model name and in a description,
    and an integer literal too long for int()."""
    doc = json.loads(EXAMPLE_MANIFEST.read_text(encoding="utf-8"))
    doc["models"][0]["name"] = "t\ud800x"
    doc["models"][1]["properties"] = {"description": "bad \udc80 text"}
    text = json.dumps(doc)  # ensure_ascii: surrogates spelled \\ud800
    text = text.replace('"catalog"', '"bignum": ' + "9" * 5000 + ', "catalog"', 1)
    path = root / "target" / "mdl.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")
    return path


# --- item 1: one bad value in the manifest -------------------------------------------------

def test_manifest_surrogates_and_huge_ints_load(tmp_path: Path) -> None:
    from wrenmem.schema.describe import describe
    from wrenmem.schema.manifest import load_manifest

    manifest = load_manifest(_bad_manifest(tmp_path))
    assert manifest.models[0].name == "t\ufffdx"
    describe(manifest).encode("utf-8")


@pytest.mark.parametrize("args", [
    ["list"], ["recall", "-q", "revenue", "--backend", "grep"], ["check"], ["status"],
    ["export"], ["seed"], ["describe"], ["fetch", "-q", "revenue"],
])
def test_bad_manifest_never_crashes_a_command(project: Path, args: list[str]) -> None:
    _bad_manifest(project)
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    result = _runner(project)(*args)
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output
