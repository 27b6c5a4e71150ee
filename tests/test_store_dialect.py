"""The dialect of a stored pair: the pair's, else the file's, else an explicit setting, else the
manifest's data source, else the default."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from wrenmem import Memory, SqlCheckError

FIXTURE = Path(__file__).parent / "fixtures" / "mysql-shop"
BACKTICKS = "SELECT `full name` FROM `customers`"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    shutil.copytree(FIXTURE, root)
    return root


def test_store_uses_the_manifest_dialect(shop: Path) -> None:
    result = Memory(shop).store("Customer names", BACKTICKS)
    assert result.pair.dialect == "mysql"
    assert "dialect: mysql" in (shop / result.path).read_text(encoding="utf-8")


def test_an_explicit_setting_wins_over_the_manifest(shop: Path) -> None:
    (shop / "wrenmem.toml").write_text('dialect = "postgres"\n')
    with pytest.raises(SqlCheckError, match="postgres"):
        Memory(shop).store("Customer names", BACKTICKS)
    assert Memory(shop, dialect="mysql").store("Customer names", BACKTICKS).pair.dialect == (
        "mysql")


def test_the_default_applies_without_a_manifest(shop: Path) -> None:
    (shop / "target" / "mdl.json").unlink()
    with pytest.raises(SqlCheckError, match="postgres"):
        Memory(shop).store("Customer names", BACKTICKS)


def test_restore_keeps_dialect_source_and_created_at(shop: Path) -> None:
    memory = Memory(shop)
    first = memory.store("Customer names", BACKTICKS, dialect="mysql", source="import")
    (shop / "target" / "mdl.json").unlink()  # no manifest now: the file's dialect must hold
    again = memory.store("Customer names", "SELECT `id`, `full name` FROM `customers`")
    assert again.path == first.path and again.created is False
    assert again.pair.dialect == "mysql" and again.pair.source == "import"
    assert again.pair.created_at == first.pair.created_at
    assert memory.store("Customer names", BACKTICKS, source="user").pair.source == "user"


def test_check_schema_names_the_place_and_a_suggestion(shop: Path) -> None:
    memory = Memory(shop)
    with pytest.raises(SqlCheckError) as caught:
        memory.store("Statuses", "SELECT `id`\nFROM `orders`\nWHERE `statu` = 'x'",
                     check_schema=True)
    [problem] = caught.value.problems
    assert (problem.line, problem.col) == (3, 7)
    assert "did you mean 'status'" in problem.message
    assert not any(p.name.startswith("statuses") for p in (shop / "knowledge/sql").iterdir())
    # Without check_schema (the CLI's store), only the syntax is checked.
    assert memory.store("Statuses", "SELECT `statu` FROM `orders`").created


def test_cli_store_and_validate_use_the_manifest_dialect(
        shop: Path, cli: Callable[..., Result]) -> None:
    out = cli("store", "--nl", "Customer names", "--sql", BACKTICKS, "--tags", "a,b",
              root=shop)
    assert out.exit_code == 0, out.output
    text = (shop / "knowledge/sql/customer-names.md").read_text(encoding="utf-8")
    assert "dialect: mysql" in text and "tags: [a, b]" in text
    # A hand-written pair without a dialect is validated as MySQL too.
    (shop / "knowledge/sql/hand.md").write_text(
        f"---\nnl: Hand\n---\n\n```sql\n{BACKTICKS}\n```\n", encoding="utf-8")
    assert cli("validate", root=shop).exit_code == 0


def test_cli_dialect_flag_wins_on_restore(shop: Path, cli: Callable[..., Result]) -> None:
    assert cli("store", "--nl", "Names", "--sql", BACKTICKS, root=shop).exit_code == 0
    out = cli("store", "--nl", "Names", "--sql", 'SELECT "full name" FROM customers',
              "--dialect", "postgres", "--json", root=shop)
    assert out.exit_code == 0, out.output
    assert '"dialect": "postgres"' in out.stdout
    # Without --dialect the file's dialect (now postgres) is kept, not the manifest's.
    out = cli("store", "--nl", "Names", "--sql", 'SELECT "id" FROM customers', "--json",
              root=shop)
    assert '"dialect": "postgres"' in out.stdout and '"source": "user"' in out.stdout
