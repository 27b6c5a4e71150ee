"""What recall makes of a caller's draft SQL (``recall --sql``, MCP's ``sql``), said to them:
the grep backend ignores it, and a draft that does not parse as one statement is compared
by its words only (:func:`wrenmem.recall.sqlshape.shape`)."""

from __future__ import annotations

# The dialect the scorer reads a draft in (wrenmem.recall.vector passes none: generic SQL).
DRAFT_DIALECT: str | None = None


def draft_note(sql: str | None, backend: str) -> str | None:
    """A line for the caller when the draft ``sql`` does not do what they may expect under
    ``backend`` (the one that answered), else None."""
    if sql is None or not sql.strip():
        return None
    if backend == "grep":
        return ("the draft SQL (--sql) is not used by the grep backend, which ranks by the "
                "question's words only; the vector and hybrid backends read it (run "
                "`wrenmem sync`, then recall with --backend hybrid)")
    reason = unparsed_reason(sql, DRAFT_DIALECT)
    if reason is None:
        return None
    return (f"the draft SQL (--sql) does not parse as one statement ({reason}): only its "
            "words are compared with the pairs' SQL")


def unparsed_reason(sql: str, dialect: str | None = None) -> str | None:
    """Why ``sql`` is not one statement sqlglot reads (its first error line, or how many
    statements it holds), or None when it is."""
    from wrenmem.sql.bounds import parse

    try:
        trees = [t for t in parse(sql, dialect) if t is not None]
    except Exception as e:  # noqa: BLE001 - sqlglot raises several types, some plain ones
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return first[:200]
    if len(trees) != 1:
        return f"it holds {len(trees)} statements"
    return None
