"""The front matter of a pair file read without a YAML parser, where that is safe.

Nearly every pair file's front matter is a few ``key: value`` lines: a question (quoted or
plain), plain words (``datasource: postgres``), a timestamp, a flow list of tags. PyYAML
spends about a tenth of a millisecond composing and constructing each such file, a third of
reading it: seconds at 100,000 files. :func:`simple_front_matter` reads exactly those lines
and gives the values PyYAML gives; anything else (a comment, a nested or multi-line value, an
escape, a word YAML reads as a boolean, a number, a repeated key...) returns None, and the
caller hands the text to PyYAML as before (``tests/test_build_fast.py`` compares the two).
"""

from __future__ import annotations

import re
from typing import Any

_KEY = r"([A-Za-z_][A-Za-z0-9_]*)"
_WORD = r"[A-Za-z_][A-Za-z0-9_.\-]*"  # a plain scalar YAML resolves to a string (or bool/null)
_QUOTED = r'"[^"\\]*"|\'[^\']*\''
_LINE = re.compile(rf"{_KEY}:[ ]+(.*?)[ ]*")
_QUOTED_ALL = re.compile(_QUOTED)
_WORD_ALL = re.compile(_WORD)
_ITEMS = re.compile(rf"\[[ ]*(?:(?:{_QUOTED}|{_WORD})[ ]*(?:,[ ]*(?:{_QUOTED}|{_WORD})[ ]*)*)?\]")
_ITEM = re.compile(rf"{_QUOTED}|{_WORD}")
# The timestamps PyYAML's resolver knows (YAML 1.1), in the canonical spellings wrenmem writes.
_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
                    r"(?:T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})?)?")
# Plain words YAML 1.1 reads as booleans or null (PyYAML's resolver), not as text.
_NOT_TEXT = frozenset(
    "yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF "
    "null Null NULL".split())
# Characters PyYAML refuses, folds or treats as line breaks, and tabs: the text goes to PyYAML.
_AWKWARD = re.compile("[^\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
                      "|[\u2028\u2029\ufeff]")


def simple_front_matter(lines: list[str]) -> dict[str, Any] | None:
    """The mapping PyYAML's safe loader makes of these front-matter ``lines``, or None when
    they are not all simple ``key: value`` lines this reader vouches for."""
    meta: dict[str, Any] = {}
    for line in lines:
        if not line:
            continue
        match = _LINE.fullmatch(line)
        if match is None or _AWKWARD.search(line) or "#" in line:
            return None
        key, raw = match.groups()
        if key in meta or key in _NOT_TEXT:
            return None
        value = _value(raw)
        if value is None:
            return None
        meta[key] = value
    return meta or None


def _value(raw: str) -> Any:
    if not raw:
        return None  # YAML: null
    if raw[0] in "\"'":
        return raw[1:-1] if _QUOTED_ALL.fullmatch(raw) else None
    if _STAMP.fullmatch(raw):
        return _timestamp(raw)
    if raw[0] == "[":
        if not _ITEMS.fullmatch(raw):
            return None
        items = [_scalar(m.group(0)) for m in _ITEM.finditer(raw[1:-1])]
        return None if any(i is None for i in items) else items
    if raw[0].isalpha() and not raw.endswith(":") and ": " not in raw:
        return None if raw in _NOT_TEXT else raw  # a plain scalar: text, in a block mapping
    return _scalar(raw) if _WORD_ALL.fullmatch(raw) else None


def _scalar(raw: str) -> str | None:
    if raw[0] in "\"'":
        return raw[1:-1]
    return None if raw in _NOT_TEXT else raw


def _timestamp(raw: str) -> Any:
    """PyYAML's own construction of a timestamp (a date, or a datetime with its zone)."""
    import yaml

    node = yaml.ScalarNode("tag:yaml.org,2002:timestamp", raw)
    try:
        return yaml.constructor.SafeConstructor().construct_yaml_timestamp(node)
    except ValueError:  # no such day: PyYAML's own error path, as before
        return None


# A key at the start of a line (a top-level key of the front matter), quoted or not.
_TOP_KEY = re.compile(r"^(['\"]?)([^\s'\"#:\-\[{][^'\":]*?)\1[ \t]*:(?=[ \t]|$)", re.M)


def repeated_key(text: str) -> tuple[str, int, int] | None:
    """A top-level key the YAML mapping ``text`` gives twice, which PyYAML takes silently
    (the last one wins): the key and the 1-based lines of its first two, else None. A scan
    of the lines finds candidates; only then is the text composed, to be sure."""
    keys = [m.group(2) for m in _TOP_KEY.finditer(text)]
    if len(keys) == len(set(keys)):
        return None
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: no alias expands
    except yaml.YAMLError:
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    lines: dict[str, int] = {}
    for key, _value_node in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
            continue
        line = key.start_mark.line + 1
        if key.value in lines:
            return key.value, lines[key.value], line
        lines[key.value] = line
    return None
