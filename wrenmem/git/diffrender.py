"""``wrenmem diff``'s outputs: a terminal summary, GitHub annotations, and the Markdown of
a pull-request comment, from the :class:`~wrenmem.git.diff.PairDiff` it computed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from wrenmem.checks.rules import IGNORE_KEY
from wrenmem.checks.validate import shown_path
from wrenmem.git.diff import Entry, PairDiff, silenced
from wrenmem.git.knowledge_diff import render_knowledge_markdown, render_knowledge_text

# First line of the Markdown: a bot looks for it to update its one comment instead of adding one.
MARKER = "<!-- wrenmem-diff -->"


def summary_line(d: PairDiff) -> str:
    counts = [f"{len(d.of(s))} {s}" for s in ("added", "changed", "removed", "moved")
              if d.of(s) or s != "moved"]
    return ", ".join(counts)


def render_text(d: PairDiff) -> str:
    """A terminal summary: one line per pair, problems and SQL diffs indented below."""
    out = [f"{d.base.label} → {d.head.label}: {summary_line(d)}"
           + (f"; {len(d.invalid)} invalid" if d.invalid else "")]
    marks = {"added": "A", "changed": "M", "removed": "D", "moved": "R"}
    for e in d.entries:
        question = e.pair.nl if e.pair else "(does not parse)"
        where = f"{e.old_path} → {e.path}" if e.old_path else e.path
        state = "" if e.status == "removed" else ("  ok" if e.valid else "  INVALID")
        if state and e.pair and e.pair.allows_writes:
            state += "  [WRITES: allow-writes opts out of the read-only rule]"
        if state and silenced(e.pair):
            state += f"  [SILENCED: {IGNORE_KEY} {', '.join(silenced(e.pair))}]"
        review = f"  [review: {_review_reason(e)}]" if e.needs_review and e.pair else (
            "  [verified]" if e.pair and e.pair.verified and e.status != "removed" else "")
        out.append(f"{marks[e.status]} {where}  {question}{state}{review}")
        if e.status in ("changed", "moved") and e.old and e.pair and e.old.nl != e.pair.nl:
            out.append(f"    question was: {e.old.nl}")
        out += [f"    {line}" for line in e.sql_diff()]
        out += [f"    {p.render()}" for p in e.problems]
    if d.metadata_only:
        out.append(f"({len(d.metadata_only)} file(s) with only notes or metadata edited)")
    if d.schema_affected:
        out.append(f"schema: {len(d.schema_affected)} pair(s) use tables or columns the "
                   "manifest changed:")
        out += [f"S {path}  {nl}  ({'; '.join(changes)})"
                for path, nl, changes in d.schema_affected]
    out += render_knowledge_text(d.knowledge)
    out += [f"warning: {w}" for w in d.warnings]
    return "\n".join(out)


def render_github(d: PairDiff, root: Path) -> list[str]:
    """A GitHub Actions annotation per problem of an added, changed or moved pair; paths
    relative to the current folder (the workspace, in a workflow)."""
    out = []
    for entry in d.entries:
        out += [replace(p, path=shown_path(root, p.path)).github() for p in entry.problems]
    return out


def render_markdown(d: PairDiff) -> str:
    """A pull-request comment: a summary, then each pair with its SQL (or SQL diff) and
    validation result; removed pairs as a list."""
    checked = len([e for e in d.entries if e.status != "removed"])
    writes = len([e for e in d.entries if e.status != "removed" and e.pair
                  and e.pair.allows_writes])
    quiet = len([e for e in d.entries if e.status != "removed" and silenced(e.pair)])
    verdict = (f"❌ {len(d.invalid)} of {checked} added, changed or moved pair(s) do not "
               "validate" if d.invalid else (
                   f"⚠️ {writes} pair(s) opt out of the read-only rule (`allow-writes: true`)"
                   if writes else f"⚠️ {quiet} pair(s) silence checks of their own "
                   f"(`{IGNORE_KEY}`)" if quiet
                   else "✅ every added, changed and moved pair validates"))
    out = [MARKER, "## wrenmem: NL→SQL pairs in this change", "",
           f"**{summary_line(d)}** — {verdict}", "",
           f"<sub>base `{d.base.label}`{_short(d.base.commit)} · head "
           f"`{d.head.label}`{_short(d.head.commit)}</sub>"]
    if not d.entries:
        out += ["", "No pair was added, changed or removed."]
    for title, entries in (("Added", d.of("added")), ("Changed", d.of("changed")),
                           ("Moved and edited", [e for e in d.of("moved") if e.edited])):
        if entries:
            out += ["", f"### {title} ({len(entries)})"]
            for e in entries:
                out += [""] + _markdown_entry(e)
    moved = [e for e in d.of("moved") if not e.edited]
    if moved:
        out += ["", f"### Moved ({len(moved)})", ""]
        for e in moved:
            out.append(f"- {_mark(e)} `{e.old_path}` → `{e.path}` — "
                       f"{_inline(e.pair.nl) if e.pair else ''}")
            out += [f"  - `{p.path}:{p.line}:{p.col}` {p.code} {_inline(p.message)}"
                    for p in e.problems]
    removed = d.of("removed")
    if removed:
        out += ["", f"### Removed ({len(removed)})", ""]
        out += [f"- `{e.path}` — {_inline(e.pair.nl) if e.pair else '(did not parse)'}"
                for e in removed]
    if d.schema_affected:
        out += ["", f"### Affected by the schema change ({len(d.schema_affected)})", "",
                "The manifest changed tables or columns these pairs use: check their SQL."]
        out += [""] + [f"- 🔍 `{path}` — {_inline(nl)}: {_inline('; '.join(changes))}"
                       for path, nl, changes in d.schema_affected]
    if d.metadata_only:
        out += ["", f"<sub>{len(d.metadata_only)} file(s) with only notes or metadata edited: "
                + ", ".join(f"`{p}`" for p in d.metadata_only) + "</sub>"]
    out += render_knowledge_markdown(d.knowledge)
    out += [f"\n> ⚠️ {w}" for w in d.warnings]
    return "\n".join(out) + "\n"


def _mark(e: Entry) -> str:
    if not e.valid:
        return "❌"
    return "⚠️" if e.pair and (e.pair.allows_writes or silenced(e.pair)) else "✅"


def _markdown_entry(e: Entry) -> list[str]:
    question = _inline(e.pair.nl) if e.pair else "(does not parse)"
    where = f"`{e.old_path}` → `{e.path}`" if e.old_path else f"`{e.path}`"
    facts = []
    if e.pair:
        if e.pair.dialect:
            facts.append(e.pair.dialect)
        facts.append(f"source: `{e.pair.source}`")
        if e.pair.tags:
            facts.append("tags: " + ", ".join(f"`{t}`" for t in e.pair.tags))
    out = [f"#### {_mark(e)} {question}", "", " · ".join([where, *facts])]
    if silenced(e.pair):
        out += ["", f"> ⚠️ **Checks silenced:** this pair says `{IGNORE_KEY}: "
                    f"{', '.join(silenced(e.pair))}`, so those checks do not report on it. "
                    "Make sure that is intended before merging."]
    if e.pair and e.pair.allows_writes:
        out += ["", "> ⚠️ **Writes allowed:** this pair says `allow-writes: true`, which opts "
                    "it out of the read-only rule: its SQL may change data. Make sure that is "
                    "intended before merging."]
    if e.needs_review and e.pair:
        out += ["", f"> 🔍 **Review:** {_inline(_review_reason(e))}; check the question and "
                    "the SQL, then run `wrenmem verify " + e.path + "`."]
    elif e.pair and e.pair.verified:
        out += ["", f"> ✔️ Verified by {_inline(str(e.pair.extra.get('verified_by')))}"
                    + (f" at {e.pair.extra.get('verified_at')}"
                       if e.pair.extra.get("verified_at") else "")]
    if e.status in ("changed", "moved") and e.old and e.pair and e.old.nl != e.pair.nl:
        out += ["", f"Question was: ~~{_inline(e.old.nl)}~~"]
    if e.old and e.pair and (e.old.source != e.pair.source or e.old.tags != e.pair.tags):
        out += ["", f"Was: source `{e.old.source}`, tags "
                    + (", ".join(f"`{t}`" for t in e.old.tags) or "none")]
    for p in e.problems:
        out += ["", f"> ❌ `{p.path}:{p.line}:{p.col}` {p.code} {_inline(p.message)}"]
    diff = e.sql_diff()
    if diff:
        out += ["", _fence("diff", "\n".join(diff))]
        if e.pair:
            out += ["", "<details><summary>SQL after the change</summary>", "",
                    _fence("sql", e.pair.sql), "", "</details>"]
    elif e.pair:
        out += ["", _fence("sql", e.pair.sql)]
    return out


def _review_reason(e: Entry) -> str:
    """Why a pair waits for a person, in a few words."""
    pair = e.pair
    assert pair is not None
    if e.claimed_in:
        return (f"verification by {pair.extra.get('verified_by')} claimed by {e.claimed_in}, "
                "not settled until this change is reviewed")
    if pair.old_fingerprint:
        return (f"verified by {pair.extra.get('verified_by')} without a fingerprint of the "
                "question, dialect and datasource (an older version, or by hand)")
    if pair.extra.get("verified_by"):
        return f"edited since {pair.extra.get('verified_by')} verified it"
    if pair.source != "user":
        return f"written by `{pair.source}`, not verified"
    return "marked `reviewed: false`, not verified"


def _fence(info: str, body: str) -> str:
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{info}\n{body}\n{fence}"


def _inline(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _short(commit: str | None) -> str:
    return f" ({commit[:7]})" if commit else ""
