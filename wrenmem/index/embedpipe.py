"""A big sync's embedding in a child process, while this one writes the index.

A first index spent half its wall time in Python holding the GIL (LanceDB, full-text terms,
Arrow columns) while the embedder's threads waited. :class:`EmbedPipe` forks a child
(before LanceDB is imported, with no other thread) that embeds the texts in the order and
batches :func:`wrenmem.index.rowwrite.write_plan` asks for and sends the vectors through a
pipe: the same ``embedder.embed`` calls (``tests/test_build_fast.py`` compares). A text
the child was not given, or any failure of it, is embedded here.
"""

from __future__ import annotations

import logging
import os
import signal
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from wrenmem.fs.fsutil import quiet_stdio

log = logging.getLogger(__name__)

PIPE_MIN = 2048  # texts to embed from which a sync forks the embedding child
# A batch takes a second or two; a child silent this long is stuck (or starved): the texts
# it has not sent are embedded here.
SILENCE = 120.0
# Threads that may run while the child is forked: they hold no lock the child takes (the
# terminal's progress line; the child logs nothing and writes only to its pipe).
BENIGN_THREADS = frozenset({"wrenmem-progress"})
# Batches of vectors this process holds at most before the sync takes them (2,048 vectors,
# 4 MB): a child that embeds faster than the sync writes then waits on its pipe, instead of
# the whole table's vectors (200 MB at 100,000 pairs) piling up here.
AHEAD = 8
_HEAD = struct.Struct("<cIII")  # kind, first text, rows, dim; then rows * dim float32
_ERROR_MAX = 4000


def can_fork(embedder: Any) -> bool:
    """Whether this process may fork the embedding child now: a ``fork_safe`` embedder, no
    LanceDB imported, no other thread (but the progress line's). ``WRENMEM_EMBED_PROCESS=0``
    turns it off."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()
              and t.name not in BENIGN_THREADS]
    return bool(getattr(embedder, "fork_safe", False) and hasattr(os, "fork")
                and sys.platform != "win32" and "lancedb" not in sys.modules
                and threading.current_thread() is threading.main_thread() and not others
                and os.environ.get("WRENMEM_EMBED_PROCESS", "1").strip() != "0")


class EmbedPipe:
    """A forked child that prepares the model at once, then embeds the texts :meth:`start`
    gives it, ``batch`` at a time, in order (:meth:`close` without a start: it just ends)."""

    def __init__(self, embedder: Any, batch: int):
        self.texts: list[str] = []
        self._position: dict[str, int] = {}
        self._batch = batch
        self._rows: dict[int, Any] = {}  # first text of a batch -> its vectors
        self._dim: int | None = None
        self._over = False  # the child finished, failed or died: no more batches
        self._waiting = 0  # callers waiting for a batch not read yet (the reader reads on)
        self._failure: str | None = None
        self._cond = threading.Condition()
        read, write = os.pipe()
        asks, told = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the child: embed, send, and leave without any cleanup
            os.close(read)
            os.close(told)
            _child(embedder, asks, batch, write)
        os.close(write)
        os.close(asks)
        self._told: int | None = told
        self._reader = threading.Thread(target=self._read, args=(read,), daemon=True,
                                        name="wrenmem-embed-pipe")
        self._reader.start()

    def start(self, texts: Sequence[str]) -> None:
        """Have the child embed ``texts`` (once)."""
        import marshal

        self.texts = list(texts)
        self._position = {t: n for n, t in enumerate(self.texts)}
        data = marshal.dumps(self.texts)
        try:
            if self._told is None:
                raise OSError("already started")
            _send(self._told, len(data).to_bytes(8, "little") + data)
        except OSError as e:  # the child is gone: the texts are embedded here
            self._finish(f"cannot reach the embedding process: {e}")
        self._close_told()

    def _close_told(self) -> None:
        if self._told is not None:
            os.close(self._told)
            self._told = None

    def dim(self) -> int | None:
        """The vectors' dimension (waits for the first batch); None if the child failed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._dim is not None or self._over, SILENCE):
                self._over, self._failure = True, f"no vectors for {SILENCE:.0f} s"
                self._stop()
            return self._dim

    def embed(self, texts: Sequence[str], fallback: Callable[[list[str]], Any]) -> Any:
        """The vectors of ``texts``: the child's, waiting for them, or ``fallback``'s (this
        process's embedder) for the texts the child was not given or could not embed."""
        import numpy as np

        got: list[Any] = [self._vector(t) for t in texts]
        missing = [n for n, v in enumerate(got) if v is None]
        if missing:
            if self._failure is not None:
                log.debug("the embedding process failed (%s): embedding here",
                          self._failure)
            made = fallback([texts[n] for n in missing])
            for n, vector in zip(missing, made, strict=True):
                got[n] = vector
        return np.vstack(got).astype(np.float32, copy=False) if got else np.zeros((0, 0))

    def close(self) -> None:
        """Stop the child if it still runs, and reap it."""
        with self._cond:
            self._over = True  # a reader waiting for room stops
            self._cond.notify_all()
        self._close_told()
        self._stop()
        try:
            os.waitpid(self._pid, 0)
        except ChildProcessError:
            pass
        self._reader.join(timeout=5)

    def _stop(self) -> None:
        try:
            os.kill(self._pid, signal.SIGTERM)
        except OSError:
            pass

    def _vector(self, text: str) -> Any:
        at = self._position.get(text)
        if at is None:
            return None
        first = at - at % self._batch
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()  # a reader holding AHEAD batches reads on
            try:
                if not self._cond.wait_for(lambda: first in self._rows or self._over, SILENCE):
                    self._over, self._failure = True, f"no vectors for {SILENCE:.0f} s"
                    self._stop()
            finally:
                self._waiting -= 1
            rows = self._rows.get(first)
            if rows is None:
                return None
            if at - first == len(rows) - 1:  # the batch's last text: no longer needed
                del self._rows[first]
                self._cond.notify_all()
            return rows[at - first]

    def _read(self, fd: int) -> None:
        import numpy as np

        try:
            with os.fdopen(fd, "rb") as stream:
                while True:
                    head = stream.read(_HEAD.size)
                    if len(head) < _HEAD.size:
                        self._finish("the embedding process ended early")
                        return
                    kind, first, rows, dim = _HEAD.unpack(head)
                    payload = stream.read(rows * dim * 4 if kind == b"V" else rows)
                    if kind == b"E":
                        self._finish(None)
                        return
                    if kind == b"X":
                        self._finish(payload.decode("utf-8", "replace"))
                        return
                    block = np.frombuffer(payload, dtype=np.float32).reshape(rows, dim)
                    with self._cond:
                        self._rows[first] = block
                        self._dim = dim
                        self._cond.notify_all()
                        self._cond.wait_for(lambda: len(self._rows) < AHEAD or self._waiting
                                            or self._over)
        except Exception as e:  # a broken pipe: the texts are embedded here instead
            self._finish(str(e))

    def _finish(self, failure: str | None) -> None:
        with self._cond:
            self._over = True
            self._failure = failure
            self._cond.notify_all()


def _child(embedder: Any, asks: int, batch: int, fd: int) -> None:
    """The forked child's whole life: never returns into the parent's code."""
    code = 0
    try:
        import marshal

        import numpy as np

        quiet_stdio()  # a caller reading this process's output never waits for the child
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: just stop
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        logging.disable(logging.CRITICAL)  # a handler's lock may be held by another thread
        getattr(embedder, "prepare", embedder.load)()  # while the parent reads the files
        with os.fdopen(asks, "rb") as stream:
            size = stream.read(8)
            if len(size) < 8:
                os._exit(0)  # the sync needs no child after all
            texts = marshal.loads(stream.read(int.from_bytes(size, "little")))
        for first in range(0, len(texts), batch):
            vectors = np.ascontiguousarray(_child_embed(embedder, texts[first:first + batch]),
                                           dtype=np.float32)
            rows, dim = vectors.shape
            _send(fd, _HEAD.pack(b"V", first, rows, dim) + vectors.tobytes())
        _send(fd, _HEAD.pack(b"E", 0, 0, 0))
    except BaseException as e:  # told to the parent, which embeds the rest itself
        code = 1
        try:
            message = f"{type(e).__name__}: {e}".encode()[:_ERROR_MAX]
            _send(fd, _HEAD.pack(b"X", 0, len(message), 0) + message)
        except BaseException:  # the parent is gone
            pass
    finally:
        os._exit(code)


def _child_embed(embedder: Any, texts: list[str]) -> Any:
    return embedder.embed(texts)


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
