"""A verification covers what an agent relies on: question, phrasings, SQL, dialect and
datasource (issue 39, item 12); replacing another reviewer is said (item 13)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from wrenmem.pairs.catalog import read_pair_file
from wrenmem.pairs.pairfile import parse_pair, render_pair, sql_fingerprint

SQL = "SELECT store_id, SUM(amount) AS revenue FROM orders GROUP BY store_id"
REL = "knowledge/sql/rev.md"


def _verified(project: Path, cli, by: str = "Ann") -> Path:
    path = project / REL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nnl: Revenue per store\nalso:\n  - store revenue\n"
                    f"datasource: shop\ndialect: duckdb\nsource: user\n---\n\n```sql\n{SQL}\n```\n")
    result = cli("verify", REL, "--by", by, root=project)
    assert result.exit_code == 0, result.output
    assert read_pair_file(path, REL)[0].verified
    return path


@pytest.mark.parametrize("edit", [
    ("nl: Revenue per store", "nl: Revenue per customer"),
    ("  - store revenue", "  - customer revenue"),
    ("dialect: duckdb", "dialect: postgres"),
    ("datasource: shop", "datasource: other"),
    ("GROUP BY store_id", "GROUP BY store_id ORDER BY 2"),
])
def test_editing_what_was_verified_unverifies(project: Path, cli, edit: tuple[str, str]) -> None:
    path = _verified(project, cli)
    path.write_text(path.read_text().replace(*edit))
    pair = read_pair_file(path, REL)[0]
    assert not pair.verified and pair.unreviewed
    listed = json.loads(cli("list", "--verified", "--json", root=project).output)
    assert REL not in {p["path"] for p in (listed["pairs"] if isinstance(listed, dict)
                                            else listed)}


def test_whitespace_notes_and_tags_keep_it_verified(project: Path, cli) -> None:
    path = _verified(project, cli)
    text = path.read_text().replace("GROUP BY store_id", "GROUP BY\n    store_id")
    path.write_text(text + "\nA note.\n")
    assert read_pair_file(path, REL)[0].verified


def test_an_old_sql_only_fingerprint_needs_verify_again(project: Path, cli) -> None:
    path = project / REL
    path.parent.mkdir(parents=True, exist_ok=True)
    old = (f"---\nnl: Revenue per store\nsource: user\nverified_by: Bo\n"
           f"verified_at: 2026-01-01T00:00:00Z\nverified_sql: {sql_fingerprint(SQL)}\n---\n\n"
           f"```sql\n{SQL}\n```\n")
    path.write_text(old)
    pair = read_pair_file(path, REL)[0]  # still reads, keys kept
    assert pair.extra["verified_sql"] == sql_fingerprint(SQL)
    assert not pair.verified and pair.unreviewed and pair.old_fingerprint
    assert render_pair(pair) == old  # fmt keeps the old keys as they are
    result = cli("verify", REL, "--by", "Bo", root=project)
    assert result.exit_code == 0, result.output
    again = parse_pair(path.read_text())
    assert again.verified and "verified_sql" not in again.extra
    assert re.fullmatch(r"[0-9a-f]{16}", again.extra["verified_pair"])


def test_store_over_a_verified_pair_with_another_dialect_drops_it(project: Path, cli) -> None:
    from wrenmem.api import Memory

    path = _verified(project, cli)
    Memory(project, backend="grep").store("Revenue per store", SQL, dialect="postgres",
                                          force=True)
    pair = read_pair_file(path, REL)[0]
    assert pair.dialect == "postgres" and not pair.verified
    assert "verified_by" not in pair.extra and pair.extra.get("reviewed") is False


def test_verify_says_whom_it_replaces(project: Path, cli) -> None:
    path = _verified(project, cli, by="Ann")
    at = parse_pair(path.read_text()).extra["verified_at"]
    result = cli("verify", REL, "--by", "Bo", root=project)
    assert result.exit_code == 0
    assert f"replaces the verification by Ann at {at}" in result.output
    assert parse_pair(path.read_text()).extra["verified_by"] == "Bo"
    data = json.loads(cli("verify", REL, "--by", "Cy", "--json", root=project).output)
    assert data[0]["replaced"] == {"verified_by": "Bo", "verified_at": data[0]["replaced"][
        "verified_at"]} and data[0]["replaced"]["verified_at"]
    same = json.loads(cli("verify", REL, "--by", "Cy", "--json", root=project).output)
    assert same[0]["replaced"] is None and same[0]["changed"] is False
