"""A manifest's JSON decoded with the text of each of its models, for a warm re-read.

The fingerprint of a manifest is the hash of its canonical JSON (keys sorted), made of the
canonical JSON of each model; writing it costs a 2,529-model manifest more than decoding it.
A warm process (the watcher) re-reading a changed manifest keeps, by the hash of each
model's text in the file, the canonical JSON made of it: the same text decodes to the same
model, so only the models whose text changed are written again.

:func:`decode_with_models` decodes the top-level object with the standard decoder's own
pieces (``raw_decode`` on each value, ``scanstring`` on each key), so its result equals
``decoder.decode(text)``; anything it does not expect (a top-level value that is not an
object, a ``models`` key twice, malformed JSON) gives None, and the caller decodes the whole
text as before (with the same errors).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

_WS = re.compile(r"[ \t\n\r]*")  # json.decoder.WHITESPACE


def decode_with_models(text: str, decoder: json.JSONDecoder,
                       hook: Callable[[list[tuple[str, Any]]], dict[str, Any]] | None
                       ) -> tuple[dict[str, Any], list[str] | None] | None:
    """(document, the text of each element of its ``models`` list, or None when it has no
    list there), as ``decoder.decode(text)`` decodes it; ``hook`` is the decoder's
    ``object_pairs_hook`` (applied to the top-level object too). None: decode it whole."""
    try:
        return _decode(text, decoder, hook)
    except (ValueError, IndexError):  # JSONDecodeError is a ValueError
        return None


def _decode(text: str, decoder: json.JSONDecoder,
            hook: Callable[[list[tuple[str, Any]]], dict[str, Any]] | None
            ) -> tuple[dict[str, Any], list[str] | None] | None:
    at = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[at] != "{":
        return None
    at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
    pairs: list[tuple[str, Any]] = []
    spans: list[str] | None = None
    seen_models = False
    while text[at] != "}" or pairs:
        if text[at] != '"':
            return None
        key, at = json.decoder.scanstring(text, at + 1)  # type: ignore[attr-defined]
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if text[at] != ":":
            return None
        at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
        if key == "models":
            if seen_models:
                return None  # the last one counts: leave it to the decoder
            seen_models = True
        if key == "models" and text[at] == "[":
            value, spans, at = _models(text, at, decoder)
        else:
            value, at = decoder.raw_decode(text, at)
        pairs.append((key, value))
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if text[at] == ",":
            at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
            continue
        if text[at] != "}":
            return None
        break
    at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
    if at != len(text):
        return None
    return (hook(pairs) if hook is not None else dict(pairs)), spans


def _models(text: str, at: int, decoder: json.JSONDecoder) -> tuple[list[Any], list[str], int]:
    values: list[Any] = []
    spans: list[str] = []
    at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
    if text[at] == "]":
        return values, spans, at + 1
    while True:
        value, end = decoder.raw_decode(text, at)
        values.append(value)
        spans.append(text[at:end])
        at = _WS.match(text, end).end()  # type: ignore[union-attr]
        if text[at] == ",":
            at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
        elif text[at] == "]":
            return values, spans, at + 1
        else:
            raise ValueError("a list item is not followed by ',' or ']'")


def span_key(span: str, hooked: bool) -> str:
    """What a model's canonical JSON is remembered by: its text and the decoding."""
    digest = hashlib.blake2b(span.encode("utf-8", "surrogatepass"), digest_size=16)
    return ("h" if hooked else "p") + digest.hexdigest()
