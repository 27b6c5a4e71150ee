"""Rule codes of ``validate`` and ``duplicates`` findings, and the ways to accept one.

Every finding carries a stable code so that CI output, a per-pair front-matter key
(``wrenmem-ignore: [WM004]``) and the ``ignore`` setting can name it. The table below is the
documentation: README.md lists the same codes (a test keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# code -> (kind of finding, what it means)
RULES: dict[str, tuple[str, str]] = {
    "WM001": ("pair", "the file cannot be read as a pair (front matter, `nl`, SQL, encoding)"),
    "WM002": ("sql", "the SQL does not parse in its dialect, or is not exactly one statement"),
    "WM003": ("schema", "the SQL names a table (or table alias) the manifest does not have"),
    "WM004": ("schema", "the SQL names a column its table does not have in the manifest"),
    "WM005": ("pair", "`dialect` is not a sqlglot dialect name"),
    "WM006": ("manifest", "the manifest cannot be used, so tables and columns go unchecked"),
    "WM007": ("duplicate", "the same question twice, or one question with two different SQLs"),
    "WM008": ("write", "the SQL writes (DML, DDL, DCL, `SELECT … INTO`): pairs are read-only"),
    "WM009": ("engine", "DuckDB, binding the SQL over empty tables of the manifest, rejects it"),
    "WM010": ("engine-note", "a note, not an error: the engine check could not decide "
                             "(not transpilable, types unknown, the dialect is more lenient)"),
    "WM011": ("stale", "a schema item the pair used when it was verified changed or is gone"),
    "WM012": ("knowledge", "a knowledge file cannot be read (encoding, size, front matter)"),
    "WM013": ("knowledge-empty", "a rule, caveat, metric or glossary term with no text"),
    "WM014": ("knowledge-duplicate", "a glossary term (or synonym) defined twice"),
    "WM015": ("knowledge-schema",
              "a glossary term's `Columns:` names a table or column the manifest lacks"),
}
WARNING_CODES = frozenset({"WM010"})  # reported, never a failure
IGNORE_KEY = "wrenmem-ignore"  # front-matter key of a pair: codes accepted for that pair


def code_for(kind: str, message: str) -> str:
    """The rule code of a finding of ``kind`` with ``message``."""
    if kind == "schema":
        return "WM004" if message.startswith("unknown column") else "WM003"
    if kind == "pair":
        return "WM005" if message.startswith("unknown SQL dialect") else "WM001"
    return _CODE_OF_KIND.get(kind, "WM001")


_CODE_OF_KIND = {kind: code for code, (kind, _text) in RULES.items()}


def parse_codes(value: Any, where: str = "") -> frozenset[str]:
    """Codes from a list, or a comma- or space-separated string; unknown codes raise
    ValueError (a typo must not silently accept nothing). ``all`` accepts every code."""
    if value is None or value == "":
        return frozenset()
    if isinstance(value, str):
        items: Iterable[Any] = value.replace(",", " ").split()
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise ValueError(f"{where}expected a list of rule codes, got {value!r}")
    codes: set[str] = set()
    for item in items:
        code = str(item).strip().upper()
        if code == "ALL":
            codes.update(RULES)
        elif code in RULES:
            codes.add(code)
        else:
            raise ValueError(f"{where}unknown rule code {item!r} (known: {', '.join(RULES)})")
    return frozenset(codes)


def github_annotation(path: str, line: int, col: int, code: str, message: str,
                      level: str = "error") -> str:
    """A GitHub Actions workflow command that puts ``message`` on ``path:line:col``."""
    props = ",".join(f"{k}={_escape(v, prop=True)}" for k, v in (
        ("file", path), ("line", str(line)), ("col", str(col)), ("title", f"wrenmem {code}")))
    return f"::{level} {props}::{_escape(f'{code} {message}')}"


def _escape(text: str, *, prop: bool = False) -> str:
    # https://github.com/actions/toolkit/blob/main/packages/core/src/command.ts
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text
