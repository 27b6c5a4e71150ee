"""``wrenmem init``'s knowledge folders, each with one commented example file.

The examples are HTML comments, so they show how an entry is written without being one: a
fresh project serves no made-up rule to an agent. A folder that exists is left alone.
"""

from __future__ import annotations

from wrenmem.fs.fsutil import atomic_write_text
from wrenmem.knowledge.files import knowledge_root
from wrenmem.settings import Settings

EXAMPLES = {
    "rules": ("example.md", """\
<!--
Business rules for whoever writes SQL here: one rule per `##` heading. `fetch` returns them
beside the schema (all of them while they are short; past `knowledge_threshold` characters,
the ones that bear on the question). Remove the comment marks to use this example.

# Revenue rules

## Revenue excludes test accounts
Revenue never counts orders of test accounts: add `customers.is_test = false`.

## Fiscal year
The fiscal year starts on April 1st: FY2026 runs from 2026-04-01 to 2027-03-31.
-->
"""),
    "glossary": ("example.md", """\
<!--
The team's words: one term per `##` heading, then optional `Synonyms:` and `Columns:` lines
(tables or table.column of the manifest; `validate` checks they exist), then the definition.
Recall searches a term's synonyms and columns too, so "GMV" finds the pair that sums order
amounts. Remove the comment marks to use this example.

## GMV
Synonyms: gross merchandise value, gross sales
Columns: orders.amount

The total amount of all orders, before refunds and discounts.
-->
"""),
    "caveats": ("example.md", """\
<!--
What the data gets wrong: one caveat per `##` heading. Served with the rules.
Remove the comment marks to use this example.

## Orders before 2021 have no store
`orders.store_id` is NULL for orders placed before 2021-01-01: per-store reports start there.
-->
"""),
    "metrics": ("example.md", """\
<!--
How the team computes its numbers: one metric per `##` heading. Served with the rules.
Remove the comment marks to use this example.

## Average order value
`SUM(orders.amount) / COUNT(DISTINCT orders.id)`, over completed orders only.
-->
"""),
}


def scaffold_knowledge(settings: Settings) -> list[str]:
    """Create each missing knowledge folder with its example; returns what was done."""
    done = []
    base = knowledge_root(settings)
    for folder, (name, text) in EXAMPLES.items():
        path = base / folder
        if path.exists():
            continue
        path.mkdir(parents=True)
        atomic_write_text(path / name, text)
        done.append(f"created {settings.relpath(path)}/ with {name}")
    return done
