"""Why bytes are not read as text, in the words every reader of the project's files uses
(below :mod:`wrenmem.settings`, so ``wrenmem.toml`` is refused in the same words)."""

from __future__ import annotations

_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def wide_encoding(data: bytes) -> str | None:
    """Why text that starts with a UTF-16 or UTF-32 byte-order mark (what some Windows
    editors save) is not read, saying what to do; None for other bytes."""
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            return f"{name} text (it starts with a {name} byte-order mark): save it as UTF-8"
    return None


def not_utf8(data: bytes, error: UnicodeDecodeError, *, line: bool = False) -> str:
    """The reason bytes that are not UTF-8 are refused; ``line``: name the line of the bad
    byte too (for a message that has no ``path:line:`` of its own)."""
    where = f"byte {error.start}"
    if line:
        number = data.count(b"\n", 0, error.start) + 1
        where += f", line {number}"
    return wide_encoding(data) or f"not valid UTF-8 ({where})"
