"""SQL in a pair reads no file, reaches no network and has no side effect (issue 39, 1-3,
5, 6, 10): the engine check is sealed, such SQL is refused by every door, ``--force``
included, and nothing a pair says can hold up ``validate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_wrenmem, write_pair
from wrenmem.api import Memory
from wrenmem.errors import SqlCheckError, WrenmemError
from wrenmem.sql.check import outside_problem, parse_checked, write_problem

pytest.importorskip("duckdb")

SECRET = "TOKEN_supersecret_42"


@pytest.fixture
def secret(example_project: Path) -> Path:
    """A file beside the pairs whose one line is a secret (as a token in .git/config)."""
    path = example_project / "secret.txt"
    path.write_text(SECRET + "\n")
    return path


# Each reads a file; DuckDB as it was quoted the file's first line in its binder error.
LEAKS = [
    "SELECT nosuchcol FROM read_csv('{p}', header = true)",
    "SELECT nosuchcol FROM read_csv_auto('{p}')",
    "SELECT nosuchcol FROM '{p}'",
    "SELECT content FROM read_text('{p}')",
    "SELECT * FROM glob('{d}/*')",
    "SELECT * FROM read_parquet('{p}')",
]


@pytest.mark.parametrize("template", LEAKS)
def test_validate_prints_no_file_content(example_project: Path, secret: Path, cli,
                                         template: str) -> None:
    sql = template.format(p=secret, d=secret.parent)
    write_pair(example_project, "leak.md", "Show me the secret", sql, dialect="duckdb")
    result = cli("validate", "--json", root=example_project)
    assert SECRET not in result.output
    problems = [p for p in json.loads(result.output)["problems"]
                if p["path"].endswith("leak.md")]
    assert problems and problems[0]["severity"] == "error", problems
    assert problems[0]["kind"] == "write"
    assert result.exit_code == 1


def test_a_relative_git_config_path_is_refused(example_project: Path, cli,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's own case: a checkout token in .git/config, read by a path relative to
    the project (where pre-commit and the CI workflow run)."""
    (example_project / ".git").mkdir()
    (example_project / ".git/config").write_text(
        "[core]\n\tbare = false\n[http]\n\textraheader = AUTHORIZATION: basic " + SECRET + "\n")
    monkeypatch.chdir(example_project)
    write_pair(example_project, "token.md", "The token", "SELECT name FROM read_csv("
               "'.git/config', header=true, skip=3) GROUP BY 1 HAVING name > 1",
               dialect="duckdb")
    result = cli("validate", root=example_project)
    assert SECRET not in result.output and "basic" not in result.output
    assert "reads a file or reaches the network" in result.output
    assert result.exit_code == 1


def test_the_engine_is_sealed_even_for_sql_that_gets_past_the_refusal(tmp_path: Path) -> None:
    """DuckDB itself reads no file, loads no extension and cannot be unsealed, whatever SQL
    reaches it; a URL installs nothing (a home folder stays empty)."""
    script = f"""
import json, sys
from wrenmem.checks.engine import Engine
engine = Engine(None, {{"orders": {{"id": "INTEGER"}}}})
out = {{}}
for name, sql in [
        ("file", "EXPLAIN SELECT * FROM read_text({str(tmp_path / 'secret.txt')!r})"),
        ("url", "EXPLAIN SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')"),
        ("unseal", "SET enable_external_access = true"),
        ("install", "INSTALL httpfs"),
        ("attach", "ATTACH {str(tmp_path / 'other.db')!r}"),
        ("copy", "COPY orders TO {str(tmp_path / 'out.csv')!r}")]:
    try:
        engine.con.execute(sql)
        out[name] = "ran"
    except Exception as e:
        out[name] = str(e)
print(json.dumps(out))
"""
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert all(v != "ran" for v in out.values()), out
    assert SECRET not in done.stdout
    assert "disabled by configuration" in out["file"] and "disabled" in out["url"]
    assert "locked" in out["unseal"]
    assert list(home.iterdir()) == []  # no ~/.duckdb: no extension was fetched
    assert not (tmp_path / "other.db").exists() and not (tmp_path / "out.csv").exists()


def test_a_fifo_or_stdin_in_a_pair_does_not_hold_up_validate(example_project: Path) -> None:
    fifo = example_project / "pipe.csv"
    os.mkfifo(fifo)
    write_pair(example_project, "stdin.md", "From stdin",
               "SELECT * FROM read_csv('/dev/stdin')", dialect="duckdb")
    write_pair(example_project, "fifo.md", "From a pipe",
               f"SELECT * FROM read_csv('{fifo}')", dialect="duckdb")
    write_pair(example_project, "bare.md", "From a bare pipe", "SELECT * FROM 'pipe.csv'",
               dialect="duckdb")
    # stdin left open and never written to: a read of it would wait for ever
    with subprocess.Popen([sys.executable, "-m", "wrenmem", "validate"], cwd=example_project,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}) as proc:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("validate hung on a pair that reads a pipe")
    assert proc.returncode == 1, err
    for name in ("stdin.md", "fifo.md", "bare.md"):
        assert any(name in line and "not allowed" in line for line in out.splitlines()), out


FORCED = [("postgres", "SELECT 1; DELETE FROM orders"),
          ("postgres", "(DELETE FROM orders)"),
          ("mysql", "SELECT * FROM orders INTO OUTFILE '/tmp/wrenmem-outfile'"),
          ("postgres", "SELECT 1;\n-- and then\nDROP TABLE orders"),
          ("postgres", "SELECT * FROM read_csv('/etc/passwd'"),  # unclosed: does not parse
          ("postgres", "SELECT pg_terminate_backend(pid FROM pg_stat_activity")]


@pytest.mark.parametrize(("dialect", "sql"), FORCED)
def test_force_never_keeps_sql_that_writes(example_project: Path, dialect: str,
                                           sql: str) -> None:
    before = sorted((example_project / "knowledge").rglob("*"))
    memory = Memory(example_project)
    with pytest.raises(SqlCheckError) as raised:
        memory.store("Sneak a write in", sql, dialect=dialect, force=True)
    assert "read-only" in str(raised.value)
    assert sorted((example_project / "knowledge").rglob("*")) == before


@pytest.mark.parametrize(("dialect", "sql"), FORCED[:3])
def test_cli_store_and_import_force_refuse_them_too(example_project: Path, cli, dialect: str,
                                                    sql: str, tmp_path: Path) -> None:
    before = sorted((example_project / "knowledge").rglob("*"))
    stored = cli("store", "--nl", "Sneak a write in", "--sql", sql, "--dialect", dialect,
                 "--force", root=example_project)
    assert stored.exit_code == 1 and "not a read-only query" in stored.output
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps({"pairs": [{"nl": "Sneak a write in", "sql": sql,
                                               "dialect": dialect}]}))
    imported = cli("import", str(batch), "--force", root=example_project)
    assert imported.exit_code != 0 and "writes" in imported.output
    assert sorted((example_project / "knowledge").rglob("*")) == before


SIDE_EFFECTS = [
    ("postgres", "SELECT lo_export(1, '/tmp/x')"),
    ("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"),
    ("postgres", "SELECT * FROM dblink_exec('host=x', 'DELETE FROM orders')"),
    ("postgres", "SELECT set_config('search_path', 'evil', false)"),
    ("postgres", "SELECT pg_catalog.set_config('a', 'b', false)"),
    ("postgres", "SELECT nextval('orders_id_seq')"),
    ("postgres", "SELECT * FROM orders FOR UPDATE"),
    ("postgres", "SELECT pg_read_file('/etc/passwd')"),
    ("postgres", "SELECT pg_sleep(1000)"),
    ("mysql", "SELECT LOAD_FILE('/etc/passwd')"),
    ("mysql", "SELECT SLEEP(1000)"),
    ("snowflake", "SELECT SYSTEM$CANCEL_ALL_QUERIES(1)"),
    ("snowflake", "SELECT orders_seq.nextval"),
    ("tsql", "SELECT * FROM OPENROWSET('SQLNCLI', 'Server=x', 'SELECT 1')"),
    ("tsql", "SELECT NEXT VALUE FOR orders_seq"),
    ("oracle", "SELECT UTL_HTTP.REQUEST('http://x') FROM dual"),
    ("duckdb", "SELECT * FROM query('DELETE FROM orders')"),
    ("duckdb", "SELECT getenv('HOME')"),
    ("sqlite", "SELECT load_extension('evil')"),
    ("clickhouse", "SELECT * FROM url('http://x/data.csv', CSV)"),
    ("spark", "SELECT reflect('java.lang.Runtime', 'getRuntime')"),
]


@pytest.mark.parametrize(("dialect", "sql"), SIDE_EFFECTS)
def test_side_effects_and_outside_reads_are_refused(dialect: str, sql: str) -> None:
    tree, _problems = parse_checked(sql, dialect)
    found = outside_problem(tree, sql, dialect) or write_problem(tree, sql, dialect)
    assert found is not None, sql
    assert found.message.startswith(("not a read-only query", "not allowed"))


KEPT = [("postgres", "SELECT status, count(*) FROM orders GROUP BY status"),
        ("postgres", "SELECT * FROM orders WHERE note = 'delete; drop table'"),
        ("postgres", "SELECT currval('orders_id_seq') < 10"),  # reads the sequence only
        ("mysql", "SELECT `file`, url FROM links"),  # a column named url is a column
        ("postgres", "SELECT file, url FROM links"),
        ("duckdb", "SELECT upper(name) FROM customers"),
        ("postgres", "SELECT replace(name, 'a', 'b') FROM customers")]


@pytest.mark.parametrize(("dialect", "sql"), KEPT)
def test_plain_queries_are_kept(dialect: str, sql: str) -> None:
    tree, problems = parse_checked(sql, dialect)
    assert not problems
    assert outside_problem(tree, sql, dialect) is None and write_problem(tree, sql,
                                                                         dialect) is None


def test_allow_writes_never_lets_a_pair_read_a_file(example_project: Path, secret: Path,
                                                    cli) -> None:
    write_pair(example_project, "opt-out.md", "Read the secret",
               f"SELECT * FROM read_text('{secret}')", dialect="duckdb",
               **{"allow-writes": "true"})
    result = cli("validate", root=example_project)
    assert result.exit_code == 1 and "reads a file" in result.output
    with pytest.raises(WrenmemError):
        Memory(example_project).store("Read it", f"SELECT * FROM read_text('{secret}')",
                                      dialect="duckdb", allow_writes=True, force=True)


def test_mcp_store_query_cannot_read_the_servers_files(example_project: Path,
                                                       secret: Path) -> None:
    """Through the MCP SDK's client, as an agent: the refusal quotes nothing of the file."""
    pytest.importorskip("mcp")
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main() -> list[str]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "wrenmem", "--project", str(example_project), "mcp", "--backend",
                  "grep"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(example_project))
        texts = []
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for sql in (f"SELECT nosuchcol FROM read_csv('{secret}', header = true)",
                            f"SELECT nosuchcol FROM '{secret}'",
                            "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')"):
                    result = await session.call_tool("store_query", {
                        "question": "What does the file say?", "sql": sql})
                    assert result.is_error
                    texts.append(" ".join(getattr(c, "text", "") for c in result.content))
        return texts

    texts = asyncio.run(asyncio.wait_for(main(), timeout=300))
    assert all(SECRET not in t and "not allowed" in t for t in texts), texts
    assert not list((example_project / "knowledge/sql").glob("what-does*"))


def test_validate_of_a_real_process_reaches_no_network(example_project: Path,
                                                       tmp_path: Path) -> None:
    """An http:// path in a pair: validate refuses it and leaves the home folder empty."""
    write_pair(example_project, "remote.md", "Remote data",
               "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')", dialect="duckdb")
    home = tmp_path / "home"
    home.mkdir()
    done = run_wrenmem(["validate"], example_project, env={"HOME": str(home)}, timeout=120)
    assert done.returncode == 1 and "not allowed" in done.stdout
    assert list(home.iterdir()) == []


def test_a_plan_running_past_its_deadline_is_interrupted() -> None:
    """The engine's deadline interrupts DuckDB, plan after plan (a long count stands in for
    a plan that would not end)."""
    import time

    import duckdb

    from wrenmem.checks.engine import _deadline

    con = duckdb.connect(":memory:")
    try:
        for _ in range(2):
            start = time.monotonic()
            with pytest.raises(duckdb.Error, match="(?i)interrupt"):
                with _deadline(con.interrupt, 0.3):
                    con.execute("SELECT count(*) FROM range(100000000000) a")
            assert time.monotonic() - start < 30
            with _deadline(con.interrupt, 0.3):  # a quick statement after it runs as usual
                assert con.execute("SELECT 42").fetchone() == (42,)
    finally:
        con.close()
