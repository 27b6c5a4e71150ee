"""`store` of a question whose own file is broken by a hand edit: stored beside it, and says
so (it said nothing, and the broken file waited to become a duplicate once fixed)."""

from __future__ import annotations

import json
from pathlib import Path


def test_store_beside_a_broken_file_of_its_name_warns(project: Path, cli) -> None:
    broken = project / "knowledge" / "sql" / "what-is-x.md"
    text = "---\nnl: What is x\ntags: [a\n---\n\n```sql\nSELECT 1\n```\n"
    broken.write_text(text)
    result = cli("store", "--nl", "What is x", "--sql", "SELECT 2", "--no-schema")
    assert result.exit_code == 0, result.output
    assert "Stored: knowledge/sql/what-is-x-2.md" in result.output
    assert ("warning: knowledge/sql/what-is-x.md:3: front matter is not valid YAML") \
        in result.output, result.output
    assert "so this one went to knowledge/sql/what-is-x-2.md" in result.output
    assert broken.read_text() == text                     # left exactly as it was
    again = json.loads(cli("store", "--nl", "Other", "--sql", "SELECT 3", "--json").output)
    assert not any("cannot be read as a pair" in n for n in again["notes"])
