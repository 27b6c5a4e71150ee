"""NL→SQL pair files: parse both formats, render the canonical one.

Canonical form: YAML front matter with ``nl`` and metadata, then the first fenced ``sql``
block of the body, then free-form notes. Wren's form keeps ``sql:`` in the front matter."""

from __future__ import annotations

import datetime as dt
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.errors import PairError, UnreadableFileError, WrenmemError
from wrenmem.fs.encoding import not_utf8, wide_encoding
from wrenmem.fs.fsutil import os_error_reason, read_regular_file
from wrenmem.lazy import lazy
from wrenmem.pairs.record import (  # noqa: F401 (the record, imported from here by most callers)
    ALLOW_WRITES,
    CLAIMED,
    KNOWN_KEYS,
    REVIEW_KEYS,
    REVIEWED,
    VERIFIED_AT,
    VERIFIED_BY,
    VERIFIED_PAIR,
    VERIFIED_SCHEMA,
    VERIFIED_SQL,
    Pair,
    pair_fingerprint,
    search_fields,
    sql_fingerprint,
)
from wrenmem.settings import MAX_PAIR_BYTES

if TYPE_CHECKING:
    from wrenmem.pairs import front
else:  # python-frontmatter and PyYAML: imported by the first pair file read or written
    front = lazy("wrenmem.pairs.front")

_DELIM = re.compile(r"^---[ \t]*$")
_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_ISO_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$"
)




# YAML aliases may expand to at most this many nodes in one front matter: a few hundred
# bytes of nested aliases ("billion laughs") would otherwise take gigabytes.
MAX_ALIAS_NODES = 10_000


def read_pair_bytes(path: str | Path, rel: str,
                    max_bytes: int = MAX_PAIR_BYTES, *, inside: Path | None = None,
                    walked: bool = False) -> bytes:
    """The bytes of a pair file; :class:`PairError` naming ``rel`` when it is not a regular
    file, is over ``max_bytes`` or (with ``inside``, the project root) is a link leading out."""
    try:
        return read_regular_file(path, max_bytes, inside=inside, walked=walked)
    except UnreadableFileError as e:
        raise PairError(rel, e.reason) from e
    except OSError as e:
        raise PairError(rel, os_error_reason(path, e)) from e


def decode_file(data: bytes, path: str) -> str:
    """Bytes of a pair file to text: UTF-8 (a BOM tolerated), CRLF and CR normalised."""
    if not data.strip():
        raise PairError(path, "empty file")
    wide = wide_encoding(data)
    if wide is not None:
        raise PairError(path, wide)
    if b"\x00" in data:
        raise PairError(path, "binary file (contains NUL bytes), not a Markdown pair")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PairError(path, not_utf8(data, e), line) from e
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_pair(text: str, path: str = "<string>") -> Pair:
    """Parse a pair file's text. Raises :class:`PairError` naming the line and the reason."""
    import yaml

    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise PairError(path, "empty file")
    if not _DELIM.match(lines[first].strip()):
        raise PairError(path, "no front matter: the file must start with a '---' line", first + 1)
    close = next((i for i in range(first + 1, len(lines)) if _DELIM.match(lines[i])), None)
    if close is None:
        raise PairError(path, "front matter is not closed by a '---' line", first + 1)
    yaml_text = "\n".join(lines[first + 1 : close])

    try:
        meta = _handler().load(yaml_text)  # python-frontmatter's handler, libyaml's loader
        repeated = front.repeated_key(yaml_text) if isinstance(meta, dict) else None
    except RecursionError as e:
        raise PairError(path, "front matter is nested too deeply", first + 1) from e
    except yaml.YAMLError as e:
        where, problem = yaml_problem(e)
        line = first + 1 + where[0] if where is not None else first + 1
        raise PairError(path, f"front matter is not valid YAML: {problem}", line) from e
    if meta is None:
        raise PairError(path, "front matter is empty: 'nl' is required", first + 1)
    if not isinstance(meta, dict):
        raise PairError(path, f"front matter must be a mapping of keys, not {_kind(meta)}",
                        first + 2)
    if repeated is not None:
        key, once, twice = repeated[0], first + 1 + repeated[1], first + 1 + repeated[2]
        raise PairError(path, f"{key!r} is given twice in the front matter (lines {once} and "
                              f"{twice}; YAML would keep the last): keep one", twice)

    def at(key: str) -> int:
        return key_line(lines, key, first + 1)

    nl = meta.get("nl")
    if nl is None:
        raise PairError(path, "missing 'nl' (the question) in the front matter", first + 1)
    if not isinstance(nl, str):
        hint = " (YAML reads yes/no/on/off/true/false as booleans: quote it)" if isinstance(
            nl, bool) else " (quote it)"
        raise PairError(path, f"'nl' must be text, got {_kind(nl)} {nl!r}{hint}", at("nl"))
    if not nl.strip():
        raise PairError(path, "'nl' is empty", at("nl"))

    body_start = close + 1
    body_lines = lines[body_start:]
    block = _find_sql_block(body_lines)
    front_sql = meta.get("sql")
    if front_sql is not None and block is not None:
        raise PairError(path, "SQL is given twice: in front-matter 'sql:' and in a ```sql block",
                        at("sql"))
    if block is not None:
        start, end, sql_text = block
        if end == len(body_lines):  # Markdown would run the block to the end of the file
            fence = _FENCE_OPEN.match(body_lines[start])
            mark = fence.group("fence") if fence else "```"
            raise PairError(path, f"the {mark}sql block opened here is not closed: add a {mark} "
                                  "line after the SQL (else all that follows would be SQL)",
                            body_start + start + 1)
        sql = sql_text.strip("\n").rstrip()
        sql_line = body_start + start + 2
        notes = "\n".join(body_lines[:start] + body_lines[end + 1 :]).strip()
        wren = False
    elif front_sql is not None:
        if not isinstance(front_sql, str):
            raise PairError(path, f"'sql' must be text, got {_kind(front_sql)}", at("sql"))
        sql = front_sql.strip()
        sql_line = at("sql")
        notes = "\n".join(body_lines).strip()
        wren = True
    else:
        raise PairError(path, "no SQL: add a ```sql fenced block after the front matter",
                        close + 1)
    if not sql.strip():
        raise PairError(path, "the SQL is empty", sql_line)

    values: dict[str, Any] = {}
    for key in ("datasource", "dialect", "source", "created_at", "verified_by", "verified_at"):
        if meta.get(key) is None:
            continue
        try:
            values[key] = _scalar_text(meta[key])
        except ValueError as e:
            raise PairError(path, f"'{key}' {e}", at(key)) from e
    try:
        tags = _tags(meta.get("tags"))
    except ValueError as e:
        raise PairError(path, f"'tags' {e}", at("tags")) from e
    try:
        also = _also(meta.get("also"), nl.strip())
    except ValueError as e:
        raise PairError(path, f"'also' {e}", at("also")) from e
    extra = {k: v for k, v in meta.items() if k not in KNOWN_KEYS and k not in ("sql", CLAIMED)}
    front_lines = lines[first + 1 : close]
    comments = _front_comments(front_lines, meta) if "#" in yaml_text else ()
    return Pair(
        nl=nl.strip(),
        sql=sql,
        path=path,
        datasource=values.get("datasource"),
        dialect=values.get("dialect"),
        tags=tags,
        source=values.get("source") or "user",
        created_at=values.get("created_at"),
        notes=notes,
        extra={**{k: v for k, v in extra.items() if k not in _FINGERPRINTS},
               **{k: values[k] for k in (VERIFIED_BY, VERIFIED_AT) if k in values},
               **{k: extra[k] for k in _FINGERPRINTS if k in extra}},
        sql_line=sql_line,
        wren_format=wren,
        comments=comments,
        also=also,
    )


_FINGERPRINTS = (VERIFIED_PAIR, VERIFIED_SQL, VERIFIED_SCHEMA)  # written in this order, last
_TOP_KEY = re.compile(r"""^(?:"([^"]*)"|'([^']*)'|([^\s#:'"?\-][^:#]*?))[ \t]*:(?:[ \t]|$)""")
_COMMENT_START = re.compile(r"[ \t]#")
MAX_COMMENT_PARSES = 64


def _front_comments(lines: list[str], meta: dict[str, Any]) -> tuple[tuple[str, str, bool], ...]:
    """The YAML comments of front-matter ``lines``, each tied to a top-level key. PyYAML
    drops comments, so a ``#`` is a comment only when removing it leaves the same values."""
    current = list(lines)
    found: list[tuple[int, str, bool]] = []
    budget = MAX_COMMENT_PARSES

    def same(trial: list[str]) -> bool:
        nonlocal budget
        budget -= 1
        try:
            return bool(_load_yaml("\n".join(trial)) == meta)
        except Exception:  # any failure means "not a comment"
            return False

    for i, line in enumerate(lines):
        if "#" not in line or budget <= 0:
            continue
        if line.strip().startswith("#"):
            trial = current[:i] + [""] + current[i + 1:]
            if same(trial):
                current = trial
                found.append((i, line.strip(), False))
            continue
        for match in _COMMENT_START.finditer(line):
            if budget <= 0:
                break
            trial = current[:i] + [line[:match.start()].rstrip()] + current[i + 1:]
            if same(trial):
                current = trial
                found.append((i, line[match.start():].strip(), True))
                break
    keys = {i: next(g for g in m.groups() if g is not None)
            for i, line in enumerate(current) if (m := _TOP_KEY.match(line))}
    out: list[tuple[str, str, bool]] = []
    for i, text, inline in found:
        if inline and i in keys:
            out.append((keys[i], text, True))
        elif inline:  # inside a nested value: kept above the key that holds it
            out.append((next((keys[j] for j in range(i, -1, -1) if j in keys), ""), text,
                        False))
        else:
            out.append((next((keys[j] for j in range(i, len(current)) if j in keys), ""),
                        text, False))
    return tuple(out)


def key_line(lines: list[str], key: str, absent: int = 1) -> int:
    """1-based line of front-matter ``key:`` in a pair file's lines (``absent`` if none)."""
    pattern = re.compile(rf"^\s*['\"]?{re.escape(key)}['\"]?\s*:")
    opened = False
    for i, line in enumerate(lines):
        if opened and _DELIM.match(line):
            break
        if opened and pattern.match(line):
            return i + 1
        if not opened and line.strip():
            if not _DELIM.match(line.strip()):
                break
            opened = True
    return absent


def yaml_problem(error: Exception) -> tuple[tuple[int, int] | None, str]:
    """Where (1-based line and column, when PyYAML knows) and what a YAML error is, in one
    line: PyYAML's own text spans several lines and names ``<unicode string>``."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return ((mark.line + 1, mark.column + 1) if mark is not None else None), problem


def load_yaml(text: str) -> Any:
    """YAML with PyYAML's safe loader, aliases bounded (MAX_ALIAS_NODES) and nesting too
    deep for Python's stack reported as a YAMLError: for any YAML a user hands wrenmem."""
    import yaml

    try:
        return _load_yaml(text)
    except RecursionError as e:
        raise yaml.YAMLError("nested too deeply") from e


def _load_yaml(text: str) -> Any:
    """libyaml's loader where PyYAML has it (~10x faster), the pure-Python one on an error
    (for its line marks) and for text with anchors (it bounds what aliases expand to)."""
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None and "&" not in text:
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=_bounded_loader())  # noqa: S506 - a safe loader


@cache
def _handler() -> Any:
    """python-frontmatter's YAML handler for pair files, loading with :func:`_load_yaml`
    (imported on first use: a recall that reads no pair file needs neither PyYAML nor it)."""
    return front.PairYAML(_load_yaml)


def _bounded_loader() -> type:
    """A SafeLoader that refuses aliases expanding to more than MAX_ALIAS_NODES nodes."""
    import yaml

    class BoundedSafeLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._nodes = 0  # nodes composed so far, aliases counted by what they expand to
            self._alias_nodes = 0
            self._weights: dict[int, int] = {}

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                node = super().compose_node(parent, index)
                weight = self._weights.get(id(node), 1)
                self._nodes += weight
                self._alias_nodes += weight
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise yaml.composer.ComposerError(
                        None, None, f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} "
                        "values (an alias bomb?)", mark)
                return node
            before = self._nodes
            node = super().compose_node(parent, index)
            self._nodes += 1
            self._weights[id(node)] = self._nodes - before
            return node

    return BoundedSafeLoader


def _find_sql_block(lines: list[str]) -> tuple[int, int, str] | None:
    """(open line, close line, text) of the first fenced block whose info string is sql."""
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        info = m.group("info").strip().split()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines))
        if info and info[0].lower() == "sql":
            return i, end, "\n".join(lines[i + 1 : end])
        i = end + 1
    return None


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dt.date):
        return "a date"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "nothing (null)"
    return f"a {type(value).__name__}"


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError(f"must be text, got a boolean {value!r}: quote it")
    if isinstance(value, dt.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, str | int | float | dt.date):
        return str(value).strip() if not isinstance(value, dt.date) else value.isoformat()
    raise ValueError(f"must be text, got {_kind(value)}")


def _tags(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: list[Any] = [t for t in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError(f"must be a list of strings, got {_kind(value)}")
    tags: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ValueError(f"must be a list of strings, found {_kind(item)} {item!r}")
        text = str(item).strip()
        if text and text not in tags:
            tags.append(text)
    return tuple(tags)


def _also(value: Any, nl: str) -> tuple[str, ...]:
    """The ``also:`` phrasings: a list of distinct, non-empty texts other than ``nl``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"must be a list of other phrasings of the question, got "
                         f"{_kind(value)} (write also: [\"...\", \"...\"])")
    out: list[str] = []
    for n, item in enumerate(value, 1):
        if not isinstance(item, str):
            raise ValueError(f"item {n} must be text, got {_kind(item)} {item!r} (quote it)")
        text = " ".join(item.split())
        if not text:
            raise ValueError(f"item {n} is empty")
        if text.casefold() == " ".join(nl.split()).casefold():
            raise ValueError(f"item {n} repeats the question 'nl'")
        if text.casefold() in (o.casefold() for o in out):
            raise ValueError(f"item {n} repeats an earlier one: {text!r}")
        out.append(text)
    return tuple(out)


def render_pair(pair: Pair, style: str = "fenced") -> str:
    """The canonical text of a pair (what ``store`` writes, ``fmt`` rewrites to): ``style``
    "fenced" puts the SQL in a fenced block of the body, "wren" in the front matter as ``sql:``."""
    items: list[tuple[str, str]] = [("nl", "nl: " + _yaml_scalar(pair.nl))]
    if pair.also:
        items.append(("also", "also:" + "".join(f"\n  - {_yaml_scalar(a)}" for a in pair.also)))
    if style == "wren":
        items.append(("sql", _wren_sql(pair.sql)))
    if pair.datasource:
        items.append(("datasource", "datasource: " + _yaml_scalar(pair.datasource)))
    if pair.dialect:
        items.append(("dialect", "dialect: " + _yaml_scalar(pair.dialect)))
    if pair.tags:
        items.append(("tags", "tags: [" + ", ".join(_yaml_scalar(t, flow=True)
                                                     for t in pair.tags) + "]"))
    items.append(("source", "source: " + _yaml_scalar(pair.source or "user")))
    if pair.created_at:
        items.append(("created_at", "created_at: " + _time_scalar(pair.created_at)))
    for key, value in pair.extra.items():
        if key == CLAIMED:
            continue
        if key in ("verified_at",) and isinstance(value, str):
            items.append((str(key), f"{key}: " + _time_scalar(value)))
        else:
            items.append((str(key), _yaml_item(key, value)))
    body: list[str] = []
    if style != "wren":
        fence = "```"
        while fence in pair.sql:
            fence += "`"
        body += [fence + "sql", pair.sql.strip("\n").rstrip(), fence, ""]
    if pair.notes.strip():
        body.append(pair.notes.strip())
    return front.dumps(_handler(), _with_comments(items, pair.comments), "\n".join(body))


def checked_file_bytes(text: str, rel: str, pair: Pair, max_bytes: int) -> bytes:
    """The bytes of ``text`` (``pair`` rendered for ``rel``) once they are known to read
    back as the same question and SQL within ``max_bytes``; else a :class:`WrenmemError` and the
    caller writes nothing: a readable file is never replaced by an unreadable one."""
    data = text.encode("utf-8")
    if len(data) > max_bytes:
        raise WrenmemError(f"{rel}: not written: the file would be {len(data):,} bytes; the "
                           f"limit is the max_pair_bytes setting, {max_bytes:,}")
    try:
        back = parse_pair(decode_file(data, rel), rel)
    except PairError as e:
        raise WrenmemError(f"{rel}: not written: the new text would not read back as a pair "
                           f"(line {e.line}: {e.reason}); the file is left as it was") from e
    if back.nl != pair.nl.strip() or sql_fingerprint(back.sql) != sql_fingerprint(pair.sql):
        raise WrenmemError(f"{rel}: not written: the new text would not read back as the "
                           "same question and SQL; the file is left as it was")
    return data


def _wren_sql(sql: str) -> str:
    """``sql:`` as a literal block (``|-``) when that reads back exactly, else as YAML
    quotes it (a SQL with characters a block cannot hold)."""
    import yaml

    text = sql.strip("\n").rstrip()
    lines = text.split("\n")
    indicator = "2" if lines and lines[0][:1] in (" ", "\t") else ""
    block = f"sql: |{indicator}-\n" + "\n".join(f"  {line}" if line else "" for line in lines)
    try:
        if yaml.safe_load(block) == {"sql": text}:
            return block
    except yaml.YAMLError:
        pass
    return _yaml_item("sql", text)


def _with_comments(items: list[tuple[str, str]],
                   comments: tuple[tuple[str, str, bool], ...]) -> list[str]:
    """Front-matter lines of ``items`` (key, rendered text) with the file's comments."""
    if not comments:
        return [text for _key, text in items]
    written = {key for key, _text in items}
    out: list[str] = []
    for key, text in items:
        out += [c for k, c, inline in comments if k == key and not (inline and "\n" not in text)]
        inline = [c for k, c, is_inline in comments if k == key and is_inline]
        out.append(text + "  " + " ".join(inline) if inline and "\n" not in text else text)
    out += [c for k, c, _inline in comments if k not in written]
    return out


def _yaml_scalar(value: str, flow: bool = False) -> str:
    """``value`` as a YAML scalar that reads back as exactly this string (plain if it can)."""
    import yaml

    text = yaml.safe_dump(value, allow_unicode=True, default_style=None, width=10**9)
    text = text.removesuffix("\n...\n").rstrip("\n")
    if flow:
        try:
            plain_ok = yaml.safe_load(f"[{text}]") == [value]
        except yaml.YAMLError:
            plain_ok = False
        if not plain_ok:
            text = "'" + value.replace("'", "''") + "'"
    return text


def canonical_time(value: str) -> str:
    """A timestamp written one way everywhere: ISO 8601 with ``T``, UTC as ``Z``
    (``2026-11-29T12:00:00Z``); dates and text that is not a timestamp are kept as they are."""
    if not _ISO_TIME.match(value) or len(value) <= 10:
        return value
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    text = parsed.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _time_scalar(value: str) -> str:
    value = canonical_time(value)
    return value if _ISO_TIME.match(value) else _yaml_scalar(value)


def _yaml_item(key: str, value: Any) -> str:
    import yaml

    return yaml.safe_dump({key: value}, allow_unicode=True, sort_keys=False,
                          default_flow_style=False, width=10**9).rstrip("\n")
