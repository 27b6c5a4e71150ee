"""The text a pair is made of: one spelling of a question, clean lines, no control
characters. Every door that writes a pair passes its text through here, so a re-store of the
same content is "unchanged" and a fresh file is ``fmt``-clean."""

from __future__ import annotations

import re
import unicodedata

from wrenmem.errors import WrenmemError

# C0 control characters other than tab and newline (a carriage return is a line break and
# is normalised before this is looked for).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f]")
_C0_NAMES = ("NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI DLE DC1 DC2 DC3 DC4 "
             "NAK SYN ETB CAN EM SUB ESC FS GS RS US").split()


def question_key(question: str) -> str:
    """What two spellings of one question share: NFC, runs of white space as one space,
    stripped. Lookups compare these; the file keeps what was given."""
    return " ".join(unicodedata.normalize("NFC", question).split())


_TRAILING = re.compile(r"[\s?？.。!！…]+$")


def loose_question(question: str) -> str:
    """What "the same question" means to ``duplicates``: NFKC, case folded, white space
    collapsed, trailing ``?？.。!！…`` dropped."""
    text = unicodedata.normalize("NFKC", question).casefold()
    return _TRAILING.sub("", " ".join(text.split()))


def normalise_newlines(text: str) -> str:
    """CRLF and a lone CR as LF, as a pair file is read back."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def clean_text(text: str, what: str) -> str:
    """``text`` with its line breaks normalised; a C0 control character other than tab
    and newline is a :class:`WrenmemError` naming ``what`` and its line and column."""
    match = _CONTROL.search(text.replace("\r", " "))  # a CR moves no column: it is a break
    if match is not None:
        before = text[:match.start()]
        line = normalise_newlines(before).count("\n") + 1
        column = match.start() - max(before.rfind("\n"), before.rfind("\r"))
        code = ord(match.group())
        verb = "contain" if what.endswith("s") and not what.endswith("SQL") else "contains"
        raise WrenmemError(
            f"{what} {verb} a control character U+{code:04X} ({_C0_NAMES[code]}) at line "
            f"{line}, column {column}: only tabs and newlines may appear in a pair's text")
    return normalise_newlines(text)


def clean_question(question: str, what: str = "the question") -> str:
    """A question as a file holds it: NFC, stripped, no control characters."""
    return unicodedata.normalize("NFC", clean_text(question, what)).strip()
