"""Knowledge beyond pairs: rules, glossary, caveats and metrics files, read, validated,
indexed, served by fetch and recall, and kept in step by the watcher, hooks and diff."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import FIXTURES, JAFFLE, settle, write_pair
from tests.fakes import RecordingEmbedder
from wrenmem.api import Memory
from wrenmem.knowledge import load_knowledge, parse_knowledge
from wrenmem.knowledge.table import knowledge_drift, sync_knowledge
from wrenmem.settings import load_settings

SHOP = FIXTURES / "mysql-shop"
WREN_V5 = FIXTURES / "wren-v5-knowledge"

RULES = """\
---
tags: [finance]
---
# Finance rules

## Revenue
Revenue excludes test accounts: add `customers.is_test = false` to every revenue query.

## Fiscal year
The fiscal year starts in April: FY2026 runs from 2026-04-01 to 2027-03-31.

```sql
# a comment in SQL, not a heading
SELECT 1
```
"""
CAVEATS = """\
## Guest checkouts
Guest checkouts have no customer row: `orders.customer_id` is NULL for them.

## Stores before 2021
Orders placed before 2021 have no store recorded.
"""
GLOSSARY = """\
# Glossary

## GMV
Synonyms: gross merchandise value
Columns: orders.amount

The total of all order amounts, refunds included.
"""


def knowledge_project(root: Path, *, glossary: bool = True) -> Path:
    """The MySQL shop (manifest, three pairs) with rules, caveats and a glossary."""
    shutil.copytree(SHOP, root)
    base = root / "knowledge"
    for folder, text in (("rules", RULES), ("caveats", CAVEATS),
                         ("glossary", GLOSSARY if glossary else None)):
        (base / folder).mkdir()
        if text is not None:
            (base / folder / f"{folder}.md").write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return knowledge_project(tmp_path / "shop")


# --- the files -----------------------------------------------------------------------------

def test_entries_are_the_sections_under_the_file_title() -> None:
    parsed = parse_knowledge(RULES, "knowledge/rules/finance.md", "rule")
    assert parsed.title == "Finance rules" and not parsed.problems
    assert [(e.title, e.line, e.tags) for e in parsed.entries] == [
        ("Revenue", 6, ("finance",)), ("Fiscal year", 9, ("finance",))]
    assert "# a comment in SQL, not a heading" in parsed.entries[1].body


def test_a_wren_rules_file_is_one_entry_and_a_file_without_headings_too() -> None:
    wren = (WREN_V5 / "knowledge" / "rules" / "business-rules.md").read_text()
    [entry] = parse_knowledge(wren, "knowledge/rules/business-rules.md", "rule").entries
    assert entry.title == "Business rules" and entry.body.startswith("- An order's `amount`")
    [plain] = parse_knowledge("Amounts are in USD.\n", "knowledge/rules/units.md",
                              "rule").entries
    assert (plain.title, plain.body, plain.line) == ("units", "Amounts are in USD.", 1)


def test_glossary_fields_and_comments() -> None:
    text = ("<!--\n## Not a term\nExample.\n-->\n## GMV\n- **Synonyms:** gross merchandise "
            "value; gross sales\n**Columns**: `orders.amount`\n\nAll order amounts.\n")
    [entry] = parse_knowledge(text, "knowledge/glossary/g.md", "glossary").entries
    assert (entry.title, entry.synonyms, entry.columns, entry.body, entry.line,
            entry.columns_line) == (
        "GMV", ("gross merchandise value", "gross sales"), ("orders.amount",),
        "All order amounts.", 5, 7)


def test_bad_front_matter_is_reported_and_the_entries_still_read() -> None:
    parsed = parse_knowledge("---\ntags: {a: 1}\ntitle: [x]\n---\n## A\ntext\n",
                             "knowledge/rules/x.md", "rule")
    assert [e.title for e in parsed.entries] == ["A"]
    assert sorted(p.line for p in parsed.problems) == [2, 3]


def test_a_wren_v5_knowledge_folder_works_unchanged(tmp_path: Path, cli) -> None:
    root = tmp_path / "jaffle"
    shutil.copytree(WREN_V5, root)
    (root / "target").mkdir()
    shutil.copy(JAFFLE, root / "target" / "mdl.json")
    memory = Memory(root, backend="grep")
    assert [e.title for e in memory.rules().rules] == ["Business rules"]
    assert memory.list()[0].nl == "What is the total revenue across all orders?"
    assert cli("validate", root=root).exit_code == 0
    fetched = memory.fetch("total revenue")
    assert fetched.knowledge is not None and "recorded in USD" in fetched.render()


# --- fetch and recall ----------------------------------------------------------------------

def test_fetch_brings_all_rules_while_small(shop: Path) -> None:
    result = Memory(shop, backend="grep").fetch("revenue this fiscal year")
    assert result.knowledge is not None and result.knowledge.strategy == "full"
    titles = [e.title for e in result.knowledge.rules]
    assert titles == ["Guest checkouts", "Stores before 2021", "Revenue", "Fiscal year"]
    text = result.render()
    assert text.startswith(result.schema or "") and "## Business rules and caveats" in text
    assert "FY2026 runs from 2026-04-01" in text
    data = result.to_dict()["knowledge"]
    assert [r["title"] for r in data["rules"]][2:] == ["Revenue", "Fiscal year"]


@pytest.mark.parametrize("backend", ["grep", "hybrid"])
def test_fetch_brings_the_relevant_rules_within_the_budget(shop: Path, backend: str) -> None:
    memory = Memory(shop, backend=backend, knowledge_threshold=300)
    result = memory.fetch("revenue this fiscal year")
    assert result.knowledge is not None and result.knowledge.strategy == "search"
    titles = [e.title for e in result.knowledge.rules]
    assert set(titles[:2]) == {"Revenue", "Fiscal year"}
    assert sum(len(e.text()) for e in result.knowledge.rules) <= 300
    assert result.knowledge.method == ("keyword" if backend == "grep" else "hybrid")


def test_fetch_defines_the_glossary_terms_the_question_uses(shop: Path) -> None:
    memory = Memory(shop, backend="grep")
    [term] = memory.fetch("GMV per country last month").knowledge.glossary  # type: ignore[union-attr]
    assert term.title == "GMV" and "refunds included" in term.body
    assert memory.fetch("orders per country").knowledge.glossary == ()  # type: ignore[union-attr]
    assert [t.title for t in memory.glossary("gross merchandise values")] == ["GMV"]


@pytest.mark.parametrize("backend", ["grep", "hybrid"])
def test_recall_finds_the_order_amount_pair_through_the_glossary(tmp_path: Path,
                                                                 backend: str) -> None:
    amount = "knowledge/sql/total-order-amount-per-country.md"
    with_terms = Memory(knowledge_project(tmp_path / "with"), backend=backend, seeds=False)
    hits = with_terms.recall("GMV", k=3)
    assert hits and hits[0].path == amount
    without = Memory(knowledge_project(tmp_path / "without", glossary=False),
                     backend=backend, seeds=False)
    assert amount not in [h.path for h in without.recall("GMV", k=3)
                          if backend == "grep" or h.score >= hits[0].score]


# --- the index -----------------------------------------------------------------------------

def test_sync_embeds_only_changed_entries_and_drift_says_so(shop: Path) -> None:
    settings = load_settings(shop)
    fake = RecordingEmbedder()
    first = sync_knowledge(settings, embedder=fake)
    assert (first.entries, first.embedded, first.noop) == (5, 5, False)
    assert knowledge_drift(settings, fake.model_id).fresh
    assert sync_knowledge(settings, embedder=fake).noop and len(fake.texts) == 5
    rules = shop / "knowledge" / "rules" / "rules.md"
    rules.write_text(RULES.replace("starts in April", "starts in July"), encoding="utf-8")
    drift = knowledge_drift(settings, fake.model_id)
    assert not drift.fresh and drift.reason == "the knowledge files changed"
    second = sync_knowledge(settings, embedder=fake)
    assert (second.embedded, second.deleted) == (1, 0)
    assert "starts in July" in fake.texts[-1]
    (shop / "knowledge" / "caveats" / "caveats.md").unlink()
    third = sync_knowledge(settings, embedder=fake)
    assert (third.entries, third.embedded, third.deleted) == (3, 0, 2)
    import lancedb

    table = lancedb.connect(settings.index_uri).open_table("knowledge")
    assert sorted(table.to_arrow()["title"].to_pylist()) == ["Fiscal year", "GMV", "Revenue"]


def test_check_status_and_reset_cover_the_knowledge_index(shop: Path, cli) -> None:
    assert cli("sync", root=shop).exit_code == 0
    assert cli("check", root=shop).exit_code == 0
    status = json.loads(cli("status", "--json", root=shop).output)
    assert status["knowledge"] == {"files": 3, "entries": 5, "rules": 4, "terms": 1,
                                   "unreadable": 0, "fresh": True, "reason": ""}
    (shop / "knowledge" / "rules" / "new.md").write_text("## Units\nAll amounts are USD.\n")
    result = cli("check", root=shop)
    assert result.exit_code == 1 and "knowledge: the knowledge files changed" in result.output
    assert json.loads(cli("status", "--json", root=shop).output)["fresh"] is False
    reset = json.loads(cli("reset", "--json", root=shop).output)
    assert reset["knowledge_dropped"] is True
    assert not (shop / ".wrenmem" / "index" / "knowledge.lance").exists()


# --- validate, init, CLI ----------------------------------------------------------------------

def test_validate_flags_missing_columns_duplicate_terms_and_empty_entries(shop: Path,
                                                                          cli) -> None:
    glossary = shop / "knowledge" / "glossary" / "more.md"
    glossary.write_text("## Net sales\nColumns: orders.amont, refunds\n\nAmounts less "
                        "refunds.\n\n## Gross merchandise value\nThe same as GMV.\n\n"
                        "## Basket\n", encoding="utf-8")
    result = cli("validate", root=shop)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "glossary/more.md" in line]
    assert lines == [
        "knowledge/glossary/more.md:2:1: WM015 unknown column 'amont' of orders in glossary "
        "Columns ('orders.amont'); did you mean 'amount'?",
        "knowledge/glossary/more.md:2:1: WM015 unknown table 'refunds' in glossary Columns "
        "('refunds')",
        "knowledge/glossary/more.md:6:1: WM014 glossary term 'Gross merchandise value' is "
        "already defined at knowledge/glossary/glossary.md:3 ('gross merchandise value')",
        "knowledge/glossary/more.md:9:1: WM013 empty glossary term 'Basket': write its text "
        "or remove the heading"]
    # pre-commit passes the changed files: the knowledge file alone is checked
    one = cli("validate", str(glossary), root=shop)
    assert one.exit_code == 1 and "WM015" in one.output
    glossary.unlink()
    assert cli("validate", root=shop).exit_code == 0


def test_init_scaffolds_the_folders_with_commented_examples(project: Path, cli) -> None:
    result = cli("init", root=project)
    for folder in ("rules", "glossary", "caveats", "metrics"):
        assert f"created knowledge/{folder}/ with example.md" in result.output
        assert (project / "knowledge" / folder / "example.md").read_text().startswith("<!--")
    knowledge = load_knowledge(load_settings(project))
    assert len(knowledge.files) == 4 and knowledge.entries == ()  # examples are comments
    assert "knowledge/rules" not in cli("init", root=project).output


def test_rules_and_glossary_commands(shop: Path, cli) -> None:
    listed = json.loads(cli("rules", "--json", root=shop).output)
    assert [r["title"] for r in listed["rules"]] == [
        "Guest checkouts", "Stores before 2021", "Revenue", "Fiscal year"]
    assert [g["term"] for g in listed["glossary"]] == ["GMV"]
    text = cli("rules", root=shop).output
    assert "knowledge/rules/rules.md:9: [rule] Fiscal year" in text
    terms = json.loads(cli("glossary", "--json", root=shop).output)["terms"]
    assert terms[0]["synonyms"] == ["gross merchandise value"]
    assert terms[0]["columns"] == ["orders.amount"]
    assert cli("glossary", "nothing like it", root=shop).exit_code == 1


# --- watcher, hooks, diff --------------------------------------------------------------------

def test_the_watcher_classifies_and_syncs_knowledge_changes(shop: Path) -> None:
    from wrenmem.watch.loop import KNOWLEDGE, classify_path
    from wrenmem.watch.run import sync_all

    settings = load_settings(shop)
    base = shop / "knowledge"
    assert classify_path(settings, str(base / "rules" / "rules.md"), False) == KNOWLEDGE
    assert classify_path(settings, str(base / "glossary"), True) == KNOWLEDGE
    assert classify_path(settings, str(shop / "instructions.md"), False) == KNOWLEDGE
    assert classify_path(settings, str(base / "rules" / ".rules.md.swp"), False) is None
    assert classify_path(settings, str(base / "knowledge.yml"), False) is None
    result = sync_all(settings, {KNOWLEDGE})
    assert not result.failures and result.summaries[0].startswith("knowledge: ")
    assert knowledge_drift(settings, Memory(shop).check().model_id).fresh


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True, timeout=PROCESS_TIMEOUT).stdout


def test_hooks_and_diff_keep_rules_in_step(shop: Path, cli) -> None:
    from wrenmem.git.hooks import run_hook

    git(shop, "init", "-q", "-b", "main")
    git(shop, "add", "-A")
    git(shop, "commit", "-qm", "base")
    settings = load_settings(shop)
    assert run_hook(settings, "post-commit", ()) is None
    model = Memory(shop).check().model_id
    assert knowledge_drift(settings, model).fresh
    rules = shop / "knowledge" / "rules" / "rules.md"
    rules.write_text(RULES.replace("starts in April", "starts in July")
                     + "\n## Discounts\nDiscounts are negative amounts.\n", encoding="utf-8")
    (shop / "knowledge" / "caveats" / "caveats.md").unlink()
    diff = json.loads(cli("diff", "--json", root=shop).output)["knowledge"]
    assert [(c["status"], c["title"]) for c in diff] == [
        ("added", "Discounts"), ("changed", "Fiscal year"),
        ("removed", "Guest checkouts"), ("removed", "Stores before 2021")]
    assert "+The fiscal year starts in July: FY2026 runs from 2026-04-01 to 2027-03-31." in (
        diff[1]["diff"])
    markdown = cli("diff", "--format", "markdown", root=shop).output
    assert "### Rules, glossary, caveats and metrics (1 added, 1 changed, 2 removed)" in markdown
    git(shop, "add", "-A")
    git(shop, "commit", "-qm", "rules")
    assert run_hook(settings, "post-commit", ()) is None
    assert knowledge_drift(settings, model).fresh
    write_pair(shop, "x.md", "Orders today", "SELECT 1")  # pairs unaffected by the above


def test_a_real_observer_sees_rule_edits_and_a_new_knowledge_folder(shop: Path) -> None:
    import time

    from wrenmem.watch.loop import KNOWLEDGE, WatchdogSource, classify_path

    settings = load_settings(shop)
    source = WatchdogSource(settings, recheck=0.2)
    source.start()
    try:
        def seen(path: Path, timeout: float = 10.0) -> bool:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for changed, is_dir in source.get(0.2) or ():
                    if changed == str(path) and classify_path(settings, changed,
                                                              is_dir) == KNOWLEDGE:
                        return True
            return False

        rules = shop / "knowledge" / "rules" / "rules.md"
        tmp = rules.with_name(".rules.md.tmp")  # an editor's atomic save
        tmp.write_text(RULES + "\n## Units\nUSD.\n", encoding="utf-8")
        tmp.replace(rules)
        assert seen(rules)
        (shop / "instructions.md").write_text("Use ISO dates.\n")
        assert seen(shop / "instructions.md")
        metrics = shop / "knowledge" / "metrics"
        metrics.mkdir()
        assert seen(metrics)
        time.sleep(0.5)  # the next check of the folders watches the new one
        source.get(0.3)
        (metrics / "aov.md").write_text("## AOV\nAverage order value.\n")
        assert seen(metrics / "aov.md")
    finally:
        source.close()


def test_bad_knowledge_files_are_reported_and_never_stop_the_rest(shop: Path, cli) -> None:
    import os

    rules = shop / "knowledge" / "rules"
    (rules / "latin1.md").write_bytes("## Caf\xe9\nbad bytes\n".encode("latin-1"))
    os.mkfifo(rules / "pipe.md")
    (shop / "wrenmem.toml").write_text("max_pair_bytes = 2000\n")
    (rules / "huge.md").write_text("## Huge\n" + "x" * 3000 + "\n")
    (shop / "instructions.md").write_text("Always name the currency of an amount.\n")
    memory = Memory(shop, backend="grep")
    knowledge = memory.knowledge()
    assert sorted(e.path for e in knowledge.errors) == [
        "knowledge/rules/huge.md", "knowledge/rules/latin1.md", "knowledge/rules/pipe.md"]
    titles = [e.title for e in memory.rules().rules]
    assert "Fiscal year" in titles and "instructions" in titles  # Wren's legacy file too
    result = cli("validate", root=shop)
    bad = sorted(line.split(":")[0] for line in result.output.splitlines() if "WM012" in line)
    assert bad == ["knowledge/rules/huge.md", "knowledge/rules/latin1.md",
                   "knowledge/rules/pipe.md"]


def test_a_running_watcher_keeps_the_knowledge_index_in_step(shop: Path) -> None:
    """`wrenmem watch --detach` with the default backend (the real model): an edited rule
    and a deleted caveat file reach the knowledge table; fetch through its daemon serves
    the edit."""
    import time

    from tests.conftest import run_wrenmem
    from wrenmem.recall.daemon_client import ping

    def wait_until(predicate, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)

    settings = load_settings(shop)
    model = Memory(shop).check().model_id
    started = run_wrenmem(["watch", "--detach"], shop)
    assert started.returncode == 0, started.stderr
    try:
        wait_until(lambda: (ping(shop) or {}).get("syncs", 0) >= 1, "the first sync")
        wait_until(lambda: knowledge_drift(settings, model).fresh, "the first knowledge sync")
        rules = shop / "knowledge" / "rules" / "rules.md"
        rules.write_text(RULES.replace("starts in April", "starts in July"), encoding="utf-8")
        (shop / "knowledge" / "caveats" / "caveats.md").unlink()
        wait_until(lambda: knowledge_drift(settings, model).fresh
                   and knowledge_drift(settings, model).entries == 3, "the edit's sync")
        import lancedb

        table = lancedb.connect(settings.index_uri).open_table("knowledge")
        texts = table.to_arrow()["text"].to_pylist()
        assert len(texts) == 3 and any("starts in July" in t for t in texts)
        fetched = run_wrenmem(["fetch", "-q", "revenue this fiscal year"], shop)
        assert fetched.returncode == 0 and "starts in July" in fetched.stdout
        assert "Guest checkouts" not in fetched.stdout
        # the API's fetch through the daemon is a FetchResult with its knowledge, as in-process
        requests = ping(shop)["requests"]
        warm = Memory(shop, use_daemon=True).fetch("revenue this fiscal year")
        assert ping(shop)["requests"] == requests + 2  # the fetch (and this ping) answered
        assert warm.knowledge is not None
        assert any("starts in July" in e.body for e in warm.knowledge.rules)
        assert warm.knowledge == Memory(shop).fetch("revenue this fiscal year").knowledge
    finally:
        run_wrenmem(["watch", "--stop"], shop)


def test_knowledge_folders_keep_the_fence_and_do_not_stale_recall(shop: Path) -> None:
    """Rules are read on every call, so their folders need no fence and their edits do not
    make a warm recall sync its pairs again; a pair edit still does."""
    import time

    from wrenmem.watch.freshness import Freshness

    (shop / "knowledge" / "metrics").mkdir()  # an empty knowledge folder: nothing to fence
    fresh = Freshness(load_settings(shop))
    try:
        assert fresh.source is not None and fresh.source.fence()
        fresh.synced(time.monotonic())
        assert not fresh.needs_sync()
        (shop / "knowledge" / "rules" / "rules.md").write_text(RULES + "\n## X\nY.\n")
        assert fresh.source.fence() and not fresh.needs_sync()
        write_pair(shop, "new.md", "Orders today", "SELECT 1")
        deadline = time.monotonic() + 10
        while not fresh.needs_sync() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fresh.needs_sync()
    finally:
        fresh.close()


def test_a_changed_mode_is_read_again(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache of parsed knowledge files is keyed on the file's stat with its mode: a file
    made unreadable by chmod (its content and mtime unchanged) is read again, where reading
    says why it cannot be (as root every file stays readable, so the re-read is counted)."""
    from wrenmem.knowledge import files

    rules = shop / "knowledge" / "rules" / "rules.md"
    os.utime(rules, (1_000_000_000, 1_000_000_000))
    settle(monkeypatch)  # its change time too: cacheable
    settings = load_settings(shop)
    load_knowledge(settings)
    reads: list[str] = []
    real = files._read

    def counting(path: Path, settings_: object) -> tuple[bytes, str]:
        reads.append(path.name)
        return real(path, settings_)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "_read", counting)
    load_knowledge(settings)
    assert "rules.md" not in reads  # unchanged: from the cache
    rules.chmod(0o600)
    load_knowledge(settings)
    assert reads.count("rules.md") == 1
