"""File names from questions: Unicode-preserving, safe on every OS, bounded in bytes."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

MAX_SLUG_BYTES = 80
_WINDOWS_RESERVED = {
    "con", "prn", "aux", "nul",
    *(f"com{i}" for i in range(1, 10)),
    *(f"lpt{i}" for i in range(1, 10)),
}
_NOT_WORD = re.compile(r"[^\w]+", re.UNICODE)


def slugify(question: str, max_bytes: int = MAX_SLUG_BYTES) -> str:
    """Turn a question into a file-name stem.

    Letters and digits of any script are kept (NFKC, case-folded); everything else becomes a
    hyphen. The result has no separators, no dots, no leading hyphen, is not a reserved
    Windows device name and is at most ``max_bytes`` of UTF-8.
    """
    text = unicodedata.normalize("NFKC", question).casefold()
    text = text.replace("_", " ")
    slug = _NOT_WORD.sub("-", text).strip("-")
    slug = _truncate_utf8(slug, max_bytes).strip("-")
    if not slug:
        # Of the NFC spelling: an NFD one ("≠" as "=" and a combining stroke) is the same name.
        nfc = unicodedata.normalize("NFC", question)
        digest = hashlib.sha1(nfc.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return f"query-{digest}"
    if slug in _WINDOWS_RESERVED:
        slug = f"{slug}-query"
    return slug


def _truncate_utf8(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    cut = data[:max_bytes].decode("utf-8", errors="ignore")
    # Prefer cutting at a word boundary when one is reasonably close.
    if "-" in cut and len(cut) - cut.rfind("-") < 16:
        cut = cut[: cut.rfind("-")]
    return cut


MAX_SUFFIX = 1000  # numbered names tried for one slug


def numbered_names(folder: Path, stem: str, suffix: str = ".md") -> Iterator[Path]:
    """The names a new file of ``stem`` tries in turn: ``stem.md``, ``stem-2.md``, … up to
    ``stem-999.md``, in ``folder``."""
    for n in range(1, MAX_SUFFIX):
        yield folder / (f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}")
