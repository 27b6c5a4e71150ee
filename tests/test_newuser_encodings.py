"""Files a Windows editor saved as UTF-16 (or UTF-32): each refused by name, saying what to do,
never as a 'binary file' or a byte offset into a BOM; the other files still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_pair

PAIR = "---\nnl: Saved wide\n---\n\n```sql\nSELECT 1\n```\n"


@pytest.mark.parametrize("codec, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"),
                                         ("utf-32", "UTF-32")])
def test_a_wide_pair_file_is_named_with_what_to_do(project: Path, cli, codec: str,
                                                   name: str) -> None:
    data = PAIR.encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data
    (project / "knowledge" / "sql" / "wide.md").write_bytes(data)
    write_pair(project, "fine.md", "Still read", "SELECT 2")
    result = cli("validate", "--no-schema")
    assert result.exit_code == 1
    assert (f"knowledge/sql/wide.md:1:1: WM001 {name} text (it starts with a {name} "
            "byte-order mark): save it as UTF-8") in result.output, result.output
    assert "binary file" not in result.output
    listed = cli("list")
    assert "Still read" in listed.output and f"wide.md:1: {name} text" in listed.output


def test_a_wide_knowledge_file_and_manifest_say_so_too(project: Path, cli) -> None:
    rules = project / "knowledge" / "rules"
    rules.mkdir()
    (rules / "wide.md").write_bytes("## Fiscal year\nStarts in April.\n".encode("utf-16"))
    result = cli("rules")
    assert "knowledge/rules/wide.md:1: UTF-16 text" in result.output, result.output
    (project / "target").mkdir()
    (project / "target" / "mdl.json").write_bytes('{"models": []}'.encode("utf-16"))
    result = cli("describe")
    assert result.exit_code == 1
    assert "manifest is UTF-16 text (it starts with a UTF-16 byte-order mark): save it as UTF-8" \
        in result.output, result.output


def test_a_settings_file_that_is_not_utf8_names_the_byte_and_line(project: Path,
                                                                  cli) -> None:
    (project / "wrenmem.toml").write_bytes(b'backend = "grep"\n# caf\xe9\n')
    result = cli("list")
    assert result.exit_code == 1
    assert "wrenmem.toml: not valid UTF-8 (byte 22, line 2)" in result.output, result.output
    assert "codec" not in result.output


@pytest.mark.parametrize("codec, name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_wide_settings_file_is_named_as_the_other_files_are(project: Path, cli, codec: str,
                                                              name: str) -> None:
    """wrenmem.toml worded UTF-16 itself ("UTF-16 text: save it as UTF-8"), and called
    UTF-32 (whose byte-order mark starts with UTF-16's) UTF-16; it now says what a pair
    file, a knowledge file and the manifest say."""
    (project / "wrenmem.toml").write_bytes('backend = "grep"\n'.encode(codec))
    result = cli("list")
    assert result.exit_code == 1
    assert (f"wrenmem.toml: {name} text (it starts with a {name} byte-order mark): save it "
            "as UTF-8") in result.output, result.output
