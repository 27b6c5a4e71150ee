"""SQL checks with sqlglot: one well-formed, read-only statement in the pair's dialect.

sqlglot is lenient (``SELECT , FROM t`` parses as ``SELECT FROM t``), so :func:`check_sql`
also rejects what it silently repairs: a clause or separator followed by nothing, a SELECT
without columns, a keyword read as an unquoted name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wrenmem.sql.bounds import SqlOutOfBounds, headroom, parse, position


@dataclass(frozen=True)
class SqlProblem:
    """A problem in a SQL text; ``line``/``col`` are 1-based within the SQL text."""

    message: str
    line: int = 1
    col: int = 1


# Words no dialect accepts as an unquoted table, column or alias name.
RESERVED_NAMES = frozenset(
    "SELECT FROM WHERE GROUP ORDER BY HAVING LIMIT JOIN ON AND OR NOT UNION EXCEPT INTERSECT "
    "AS WITH CASE WHEN THEN ELSE DISTINCT INTO".split())
# Dialects that allow a trailing comma at the end of a SELECT list.
_TRAILING_COMMA_DIALECTS = frozenset({"bigquery", "duckdb", "snowflake", "databricks"})


def unknown_dialect(name: str) -> str | None:
    """Why ``name`` is no sqlglot dialect, with the close name sqlglot suggests
    (``unknown SQL dialect 'postgress' (…); did you mean 'postgres'?``); None when it is one."""
    from sqlglot.dialects.dialect import Dialect

    try:
        Dialect.get_or_raise(name)
    except ValueError as e:
        close = re.search(r"Did you mean ([\w-]+)\?", str(e))
        hint = f"; did you mean {close.group(1)!r}?" if close else ""
        return f"unknown SQL dialect {name!r} (a sqlglot dialect name is needed){hint}"
    return None


def check_sql(sql: str, dialect: str | None) -> list[SqlProblem]:
    """Problems that make ``sql`` unusable as an example: empty list when it is fine."""
    return parse_checked(sql, dialect)[1]


def parse_checked(sql: str, dialect: str | None) -> tuple[Any, list[SqlProblem]]:
    """(the parsed statement, problems): the tree is None unless there is no problem."""
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    dialect = dialect or ""
    label = dialect or "generic"
    unknown = unknown_dialect(dialect) if dialect else None
    if unknown is not None:
        return None, [SqlProblem(unknown)]
    try:
        statements = [s for s in parse(sql, dialect) if s is not None]
    except SqlOutOfBounds as e:
        return None, [SqlProblem(e.reason, e.line, e.col)]
    except ParseError as e:
        return None, [_parse_problem(e, label)]
    except TokenError as e:
        return None, [_token_problem(sql, str(e), label)]
    if not statements:
        return None, [SqlProblem("the SQL is empty")]
    if len(statements) > 1:
        return None, [SqlProblem(f"expected one SQL statement, found {len(statements)}")]
    root = statements[0]
    if isinstance(root, exp.Command):
        return None, [SqlProblem(f"not a statement sqlglot understands: {sql.strip()[:60]!r}")]
    statement_types = (exp.Query, exp.DML, exp.DDL, exp.With, exp.Describe, exp.Pragma,
                       exp.Set, exp.Use, exp.Transaction, exp.Commit, exp.Rollback,
                       exp.Create, exp.Drop, exp.Alter)
    if not isinstance(root, statement_types):
        return None, [SqlProblem(f"not a SQL statement: parses as a bare {root.key} expression")]
    try:
        with headroom():
            problems = _dangling_tokens(sql, dialect) or _repaired_tree(sql, root)
    except SqlOutOfBounds as e:
        return None, [SqlProblem(e.reason, e.line, e.col)]
    return (None, problems) if problems else (root, [])


def _parse_problem(e: Any, label: str) -> SqlProblem:
    first = e.errors[0] if e.errors else {}
    message = first.get("description") or str(e).splitlines()[0]
    highlight = (first.get("highlight") or "").strip()
    missing = re.match(r"Required keyword: '(\w+)' missing for <class '[\w.]+\.(\w+)'>", message)
    if missing:
        message = "incomplete expression" if highlight else (
            f"incomplete {missing.group(2).upper()} expression")
    message = re.sub(r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end of the SQL",
                     message)
    message = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>", r"'\1'", message)
    if highlight and "\n" not in highlight:
        message += f" near {highlight!r}"
    line = int(first.get("line") or 1)
    col = int(first.get("col") or 1)
    if highlight and "\n" not in highlight:  # sqlglot points at the end of the token
        col = max(1, col - len(highlight) + 1)
    return SqlProblem(f"SQL does not parse as {label} SQL: {message}", line, col)


def _token_problem(sql: str, message: str, label: str) -> SqlProblem:
    # "Error tokenizing '<the SQL up to the bad spot>'": point where that context ends.
    found = re.match(r"Error tokenizing '(.*)'$", message, re.S)
    line, col = 1, 1
    if found and found.group(1) and found.group(1) in sql:
        context = found.group(1)
        line, col = position(sql, sql.index(context) + len(context) - 1)
    quote = "an unterminated string or quoted name" if sql.count("'") % 2 or sql.count(
        '"') % 2 else "a character sqlglot cannot read"
    return SqlProblem(f"SQL does not tokenize as {label} SQL: {quote}", line, col)


def _dangling_tokens(sql: str, dialect: str) -> list[SqlProblem]:
    """A clause keyword or separator followed by nothing, or by another clause keyword."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType as T

    needs_operand = {T.COMMA, T.ON, T.WHERE, T.HAVING, T.AND, T.OR, T.SELECT, T.GROUP_BY,
                     T.ORDER_BY, T.FROM, T.JOIN, T.LIMIT, T.USING, T.SET, T.UNION,
                     T.EXCEPT, T.INTERSECT}
    stoppers = {T.COMMA, T.FROM, T.WHERE, T.GROUP_BY, T.ORDER_BY, T.HAVING, T.LIMIT, T.JOIN,
                T.ON, T.R_PAREN, T.SEMICOLON, T.UNION, T.EXCEPT, T.INTERSECT, T.AND, T.OR}
    try:
        tokens = [t for t in Dialect.get_or_raise(dialect or None).tokenize(sql)]
    except Exception:  # parsing succeeded; a tokenizer quirk is no reason to fail the SQL
        return []
    for i, token in enumerate(tokens):
        if token.token_type not in needs_operand:
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if after is not None and after.token_type not in stoppers:
            continue
        if (token.token_type == T.COMMA and after is not None and after.token_type == T.FROM
                and dialect in _TRAILING_COMMA_DIALECTS):
            continue
        what = f"{token.text!r} is followed by {after.text!r}" if after is not None else (
            f"the SQL ends after {token.text!r}")
        line, col = position(sql, token.start)
        return [SqlProblem(f"incomplete SQL: {what}", line, col)]
    return []


def _repaired_tree(sql: str, root: Any) -> list[SqlProblem]:
    """What sqlglot read only by repairing: no select list, a keyword used as a name."""
    from sqlglot import exp

    for node in root.walk():
        if isinstance(node, exp.Select) and not node.expressions:
            return [SqlProblem("incomplete SQL: a SELECT without any column")]
        if (isinstance(node, exp.Identifier) and not node.quoted
                and str(node.this).upper() in RESERVED_NAMES):
            start = node.meta.get("start")
            line, col = position(sql, start) if isinstance(start, int) else (1, 1)
            return [SqlProblem(f"incomplete SQL: the keyword {node.this!r} is read as a name "
                               "(quote it if it really is one)", line, col)]
    return []


def write_problem(tree: Any, sql: str = "", dialect: str | None = None) -> SqlProblem | None:
    """Why the statement ``tree`` (parsed from ``sql``; None when it did not parse) is not
    one read-only query, or None. Refused: DML, DDL, DCL, ``SELECT … INTO``, a data-modifying
    CTE, a locking read and a call with side effects (:data:`SIDE_EFFECTS`). SQL that does not
    parse is read token by token, so that ``--force`` never lets a write through."""
    from sqlglot import exp

    if tree is None:
        return _unparsed_write(sql, dialect)
    if not isinstance(tree, exp.Query):
        return SqlProblem(f"not a read-only query: {_statement_name(_first_word(sql))} "
                          f"changes the database; {_OPT_OUT}")
    for node in tree.walk():
        if isinstance(node, exp.Into):
            line, col = _node_position(sql, node)
            return SqlProblem(f"not a read-only query: SELECT … INTO creates a table; {_OPT_OUT}",
                              line, col)
        if isinstance(node, exp.Lock):
            line, col = _node_position(sql, node)
            kind = "FOR UPDATE" if node.args.get("update") else "FOR SHARE"
            return SqlProblem(f"not a read-only query: a locking read ({kind}) takes row "
                              f"locks; {_OPT_OUT}", line, col)
        if node is not tree and isinstance(node, exp.DML | exp.DDL | exp.Create | exp.Drop
                                           | exp.Alter | exp.Command):
            line, col = _node_position(sql, node)
            word = type(node).__name__.upper()
            return SqlProblem(f"not a read-only query: it holds {_statement_name(word)} (a "
                              f"data-modifying WITH); {_OPT_OUT}", line, col)
        name = _called(node)
        if name is not None and _side_effect(name, dialect):
            line, col = _node_position(sql, node)
            return SqlProblem(f"not a read-only query: {name}() has side effects; {_OPT_OUT}",
                              line, col)
    return None


def outside_problem(tree: Any, sql: str = "", dialect: str | None = None
                    ) -> SqlProblem | None:
    """Why the SQL would read a file or reach the network (a table function such as
    ``read_csv``, ``pg_read_file`` or ``OPENROWSET``, or a path or URL as a table name), or
    None. No opt-out accepts it: a pair reads only the database's tables. ``tree`` is None
    when the SQL did not parse; it is then read token by token."""
    from sqlglot import exp

    if tree is None:
        found = _unparsed_call(sql, dialect, _outside)
        return None if found is None else SqlProblem(
            f"not allowed: {found[0]}() reads a file or reaches the network", *found[1])
    for node in tree.walk():
        name = _called(node)
        if name is not None and _outside(name, dialect):
            line, col = _node_position(sql, node)
            return SqlProblem(f"not allowed: {name}() reads a file or reaches the network",
                              line, col)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and (
                _PATH_LIKE.search(node.name)):
            line, col = _node_position(sql, node)
            return SqlProblem(f"not allowed: the table name {node.name!r} is a file path or "
                              f"URL (a pair reads only the database's tables)", line, col)
    return None


# Functions that read files or reach the network, whatever the dialect: DuckDB's file
# readers matter in every dialect, since the engine check binds the SQL transpiled to
# DuckDB. Names are lower case; a name ending in "." or "$" covers every function it
# prefixes (Oracle's packages, Snowflake's SYSTEM$ functions).
OUTSIDE: dict[str, frozenset[str]] = {
    "duckdb": frozenset(
        "read_csv read_csv_auto sniff_csv read_parquet parquet_scan parquet_metadata "
        "parquet_schema parquet_file_metadata parquet_kv_metadata parquet_bloom_probe "
        "read_json read_json_auto read_json_objects read_json_objects_auto read_ndjson "
        "read_ndjson_auto read_ndjson_objects read_text read_blob glob read_xlsx st_read "
        "st_read_meta iceberg_scan iceberg_metadata iceberg_snapshots delta_scan sqlite_scan "
        "sqlite_attach postgres_scan postgres_scan_pushdown postgres_attach postgres_query "
        "postgres_execute mysql_scan mysql_query mysql_execute getenv duckdb_secrets "
        "which_secret query query_table".split()),
    "postgres": frozenset(
        "pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file pg_ls_logdir pg_ls_waldir "
        "pg_ls_tmpdir pg_ls_archive_statusdir pg_logdir_ls lo_import lo_export dblink "
        "dblink_exec dblink_connect dblink_connect_u dblink_send_query dblink_open "
        "dblink_fetch query_to_xml query_to_xml_and_xmlschema query_to_xmlschema "
        "cursor_to_xml pg_file_write pg_file_rename pg_file_unlink pg_file_sync".split()),
    "mysql": frozenset({"load_file"}),
    "sqlite": frozenset("readfile writefile edit fsdir load_extension".split()),
    "tsql": frozenset(
        "openrowset opendatasource openquery xp_cmdshell xp_dirtree xp_fileexist "
        "xp_subdirs xp_regread sp_oacreate sp_oamethod".split()),
    "oracle": frozenset(
        "utl_http. utl_file. utl_tcp. utl_smtp. utl_inaddr. utl_url. dbms_ldap. "
        "dbms_xslprocessor. httpuritype".split()),
    "bigquery": frozenset({"external_query"}),
    "spark": frozenset("reflect java_method read_files".split()),
    "snowflake": frozenset("get_presigned_url build_scoped_file_url build_stage_file_url "
                           "infer_schema".split()),
}
# ClickHouse's table functions have plain names (``file``, ``url``): refused in ClickHouse
# pairs only, and the DuckDB engine has no functions of those names.
OUTSIDE_IN_DIALECT: dict[str, frozenset[str]] = {
    "clickhouse": frozenset(
        "file url urlcluster s3 s3cluster gcs hdfs hdfscluster azureblobstorage remote "
        "remotesecure cluster clusterallreplicas mysql postgresql sqlite mongodb redis jdbc "
        "odbc input executable iceberg deltalake hudi".split()),
}
# Functions with side effects (a change, a lock, a wait, a signal) by dialect; applied in
# every dialect, since no name here means something harmless elsewhere.
SIDE_EFFECTS: dict[str, frozenset[str]] = {
    "postgres": frozenset(
        "nextval setval set_config pg_terminate_backend pg_cancel_backend pg_reload_conf "
        "pg_rotate_logfile pg_switch_wal pg_create_restore_point pg_promote pg_start_backup "
        "pg_stop_backup pg_backup_start pg_backup_stop pg_create_physical_replication_slot "
        "pg_create_logical_replication_slot pg_drop_replication_slot "
        "pg_copy_logical_replication_slot pg_replication_origin_create pg_replication_origin_drop "
        "pg_logical_emit_message pg_notify pg_advisory_lock pg_advisory_lock_shared "
        "pg_advisory_xact_lock pg_advisory_xact_lock_shared pg_try_advisory_lock "
        "pg_try_advisory_lock_shared pg_try_advisory_xact_lock pg_advisory_unlock "
        "pg_advisory_unlock_all pg_sleep pg_sleep_for pg_sleep_until lo_create lo_creat "
        "lo_unlink lo_put lo_from_bytea lo_truncate txid_current pg_current_xact_id "
        "pg_stat_reset pg_stat_reset_shared pg_stat_reset_single_table_counters "
        "pg_wal_replay_pause pg_wal_replay_resume pg_import_system_collations "
        "pg_log_backend_memory_contexts".split()),
    "mysql": frozenset("sleep benchmark get_lock release_lock release_all_locks "
                       "master_pos_wait source_pos_wait sys_exec sys_eval".split()),
    "tsql": frozenset({"next_value_for"}),
    "oracle": frozenset("dbms_lock. dbms_pipe. dbms_scheduler. dbms_job. dbms_session. "
                        "dbms_alert.".split()),
    "snowflake": frozenset({"system$"}),
    "duckdb": frozenset({"nextval", "setval"}),
}
_OUTSIDE_ALL = frozenset().union(*OUTSIDE.values())
_SIDE_EFFECTS_ALL = frozenset().union(*SIDE_EFFECTS.values())
# A table name that is a path or a URL (DuckDB reads ``FROM 'orders.csv'`` as a file).
_PATH_LIKE = re.compile(r"[/\\]|://|\.(?:csv|tsv|parquet|json|jsonl|ndjson|txt|gz|zst|xlsx|"
                        r"arrow|db|sqlite|duckdb)$", re.I)


def _listed(name: str, names: frozenset[str]) -> bool:
    low = name.lower()
    last = low.rsplit(".", 1)[-1]
    return low in names or last in names or any(
        low.startswith(p) for p in names if p.endswith((".", "$")))


def _outside(name: str, dialect: str | None) -> bool:
    return _listed(name, _OUTSIDE_ALL) or _listed(
        name, OUTSIDE_IN_DIALECT.get(dialect or "", frozenset()))


def _side_effect(name: str, dialect: str | None) -> bool:
    return _listed(name, _SIDE_EFFECTS_ALL)


def _called(node: Any) -> str | None:
    """The name a function call in the tree calls (with its package: ``utl_http.request``),
    ``seq.nextval`` (a sequence's next value in Oracle and Snowflake), or None."""
    from sqlglot import exp

    if isinstance(node, exp.Column) and node.table and node.name.lower() in (
            "nextval", "currval"):
        return f"{node.table}.{node.name}"
    if isinstance(node, exp.Anonymous):
        name = str(node.name)
    elif isinstance(node, exp.Func):
        name = node.sql_name()
    else:
        return None
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return f"{parent.this.sql()}.{name}"
    return name


def _tokens(sql: str, dialect: str | None) -> list[tuple[str, str]]:
    """(token type, text) of the SQL; a tokenizer failure falls back to words and marks
    with the strings, quoted names and comments taken out."""
    from sqlglot.dialects.dialect import Dialect

    try:
        return [(t.token_type.name, t.text) for t in
                Dialect.get_or_raise(dialect or None).tokenize(sql)]
    except Exception:
        bare = re.sub(r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|--[^\n]*|/\*.*?(?:\*/|$)", " ",
                      sql, flags=re.S)
        return [("VAR" if re.match(r"[A-Za-z_]", w) else "MARK", w)
                for w in re.findall(r"[A-Za-z_][\w$]*|[;(]", bare)]


def _unparsed_call(sql: str, dialect: str | None, listed: Any
                   ) -> tuple[str, tuple[int, int]] | None:
    tokens = _tokens(sql, dialect)
    for (kind, text), (_, after) in zip(tokens, [*tokens[1:], ("", "")], strict=True):
        if after == "(" and kind not in ("STRING", "NUMBER") and listed(text, dialect):
            return text, _spot(sql, text)
    return None


def _unparsed_write(sql: str, dialect: str | None) -> SqlProblem | None:
    tokens = _tokens(sql, dialect)
    start = True
    for kind, text in tokens:
        word = text.upper() if kind not in ("STRING", "IDENTIFIER", "NUMBER") else ""
        if text == ";":
            start = True
            continue
        if (start and word in WRITE_WORDS) or word in WRITES_ANYWHERE:
            what = (f"{_statement_name(word)} changes the database" if start or word != "INTO"
                    else "it holds INTO (SELECT … INTO and INTO OUTFILE write)")
            return SqlProblem(f"not a read-only query: {what}; {_OPT_OUT}", *_spot(sql, text))
        start = start and not word and kind in ("MARK", "L_PAREN")
    found = _unparsed_call(sql, dialect, _side_effect)
    if found is not None:
        return SqlProblem(f"not a read-only query: {found[0]}() has side effects; {_OPT_OUT}",
                          *found[1])
    return None


def _spot(sql: str, text: str) -> tuple[int, int]:
    found = re.search(r"(?<![\w$])" + re.escape(text) + r"(?![\w$])", sql, re.I)
    return position(sql, found.start()) if found else (1, 1)


# First words of statements that change a database, its schema or its permissions.
WRITE_WORDS = frozenset(
    "INSERT UPDATE DELETE MERGE UPSERT REPLACE CREATE DROP ALTER TRUNCATE RENAME GRANT REVOKE "
    "COPY LOAD VACUUM ANALYZE REINDEX CLUSTER COMMENT CALL EXEC EXECUTE DO SET RESET ATTACH "
    "DETACH INSTALL USE BEGIN COMMIT ROLLBACK SAVEPOINT LOCK UNLOCK PRAGMA OPTIMIZE REFRESH "
    "UNLOAD EXPORT IMPORT PUT REMOVE".split())
# Words that write wherever they stand (in SQL that does not parse): a statement inside
# parentheses or after a CTE, ``INTO`` (``SELECT … INTO``, ``INTO OUTFILE``).
WRITES_ANYWHERE = frozenset(
    "INSERT UPDATE DELETE MERGE UPSERT CREATE DROP ALTER TRUNCATE GRANT REVOKE COPY ATTACH "
    "DETACH INSTALL CALL EXEC EXECUTE INTO PRAGMA VACUUM OUTFILE DUMPFILE".split())
_OPT_OUT = ("a pair holds one SELECT (`allow-writes: true` in the pair, or the `allow_writes` "
            "setting, accepts it)")


def _first_word(sql: str) -> str:
    text = re.sub(r"^(\s+|--[^\n]*\n?|/\*.*?\*/)+", "", sql, flags=re.S)
    found = re.match(r"[A-Za-z_]+", text)
    return found.group(0).upper() if found else ""


def _statement_name(word: str) -> str:
    if not word:
        return "a statement that is not a query"
    return f"{'an' if word[0] in 'AEIOU' else 'a'} {word} statement"


def _offset(node: Any) -> int | None:
    for candidate in node.walk():
        start = candidate.meta.get("start") if hasattr(candidate, "meta") else None
        if isinstance(start, int):
            return start
    return None


def _node_position(sql: str, node: Any) -> tuple[int, int]:
    start = _offset(node)
    return position(sql, start) if start is not None else (1, 1)
