"""File writes a warm process may make after the schema index is up to date (the schema
cache for the next process, the table's compaction): queued inside :func:`collect`, made
in order on one worker thread by :func:`write_in_background` (docs/watcher.md). Nothing is
lost if a reader comes first: the cache is keyed by the manifest's content."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

log = logging.getLogger(__name__)

Write = Callable[[], object]
_local = threading.local()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


@contextmanager
def collect() -> Iterator[list[Write]]:
    """Writes asked for by :func:`write` in this thread, inside the block, are queued in
    the list yielded (in order) instead of made."""
    queued: list[Write] = []
    outer = getattr(_local, "queued", None)
    _local.queued = queued
    try:
        yield queued
    finally:
        _local.queued = outer


def write(task: Write) -> None:
    """Make the write now, or queue it inside :func:`collect`."""
    queued: list[Write] | None = getattr(_local, "queued", None)
    if queued is None:
        task()
    else:
        queued.append(task)


def write_in_background(tasks: list[Write]) -> Future[None] | None:
    """Make the queued writes on the one writer thread (after any queued before them);
    None when there is nothing to write. The interpreter waits for it at exit."""
    global _pool
    if not tasks:
        return None
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wrenmem-schema-files")
        return _pool.submit(_run, list(tasks))


def _run(tasks: list[Write]) -> None:
    for task in tasks:
        try:
            task()
        except Exception as e:  # derived files: the next process rebuilds what is missing
            log.debug("schema file not written: %s", e)
