"""Issue 39 item 4: links are followed only inside the project.

A knowledge file or a pair file that is a symbolic link (or sits in a linked folder)
reaching a file outside the project is never read: not by ``rules``, ``fetch``, ``recall``,
``list``, ``grep``, ``sync``, ``fmt``, nor by MCP's tools and resources; ``validate`` names
each one and why. Links that stay inside the project keep working. Real links, the CLI as a
real process and the MCP SDK's own client against a real server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_wrenmem
from tests.test_knowledge import knowledge_project

SECRET = "hunter2-token-7f3a"
OUTSIDE_RULE = f"## Deploy token\nThe deploy token is {SECRET}.\n"
OUTSIDE_PAIR = ("---\nnl: What is the secret deploy token?\nsource: user\n---\n\n```sql\n"
                f"SELECT '{SECRET}' AS token FROM `customers`\n```\n")
INSIDE_RULE = "## Inner rule\nShared refunds are counted once.\n"
INSIDE_PAIR = ("---\nnl: How many refunds were shared between stores?\nsource: user\n---\n\n"
               "```sql\nSELECT COUNT(*) FROM `orders`\n```\n")


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """The knowledge shop with links out of it (a file, a whole knowledge folder, the legacy
    instructions.md, pair files and a pair folder) and links that stay inside it."""
    root = knowledge_project(tmp_path / "shop")
    (root / "wrenmem.toml").write_text('backend = "grep"\n', encoding="utf-8")
    away = tmp_path / "elsewhere"
    (away / "secrets").mkdir(parents=True)
    (away / "credentials.md").write_text(OUTSIDE_RULE, encoding="utf-8")
    (away / "secrets" / "token.md").write_text(OUTSIDE_RULE, encoding="utf-8")
    (away / "pair.md").write_text(OUTSIDE_PAIR, encoding="utf-8")
    (away / "secrets" / "pair.md").write_text(OUTSIDE_PAIR, encoding="utf-8")
    base = root / "knowledge"
    os.symlink(away / "credentials.md", base / "rules" / "credentials.md")  # absolute
    os.symlink(os.path.relpath(away / "credentials.md", base / "caveats"),  # relative
               base / "caveats" / "deploy.md")
    os.symlink(away / "secrets", base / "metrics")  # a whole knowledge folder
    os.symlink(away / "credentials.md", root / "instructions.md")
    os.symlink(away / "pair.md", base / "sql" / "deploy-token.md")
    os.symlink(away / "secrets", base / "sql" / "more")  # a pair folder
    # inside the project: kept
    (root / "notes").mkdir()
    (root / "notes" / "inner.md").write_text(INSIDE_RULE, encoding="utf-8")
    (root / "notes" / "refunds.md").write_text(INSIDE_PAIR, encoding="utf-8")
    os.symlink("../../notes/inner.md", base / "rules" / "inner.md")
    os.symlink("../../notes/refunds.md", base / "sql" / "refunds.md")
    return root


def _run(root: Path, *args: str) -> Any:
    return run_wrenmem(["--project", str(root), *args], root)


def test_the_cli_serves_no_file_outside_the_project(linked: Path) -> None:
    outputs = {}
    for args in (("rules",), ("rules", "--json"), ("fetch", "-q", "deploy token"),
                 ("fetch", "--json", "-q", "deploy token"),
                 ("recall", "--json", "-q", "What is the secret deploy token?"),
                 ("list",), ("list", "--json"), ("sync",), ("validate",), ("fmt", "--check"),
                 ("glossary",), ("show", "knowledge/sql/deploy-token.md")):
        done = _run(linked, *args)
        outputs[args] = done
        assert SECRET not in done.stdout + done.stderr, args
    assert "Inner rule" in outputs[("rules", "--json")].stdout  # a link inside: served
    assert "Inner rule" in outputs[("fetch", "--json", "-q", "deploy token")].stdout
    listed = [row["path"] for row in json.loads(outputs[("list", "--json")].stdout)]
    assert "knowledge/sql/refunds.md" in listed
    assert not any("deploy-token" in p or "/more/" in p for p in listed)
    inner = json.loads(_run(linked, "recall", "--json", "-q",
                            "How many refunds were shared between stores?").stdout)
    assert "knowledge/sql/refunds.md" in json.dumps(inner)
    validate = outputs[("validate",)]
    assert validate.returncode != 0
    said = validate.stdout + validate.stderr
    for rel in ("knowledge/rules/credentials.md", "knowledge/caveats/deploy.md",
                "knowledge/metrics/token.md", "instructions.md",
                "knowledge/sql/deploy-token.md"):
        line = next((x for x in said.splitlines() if x.startswith(rel + ":")), "")
        assert "outside the project: not read" in line, (rel, said)
    assert "knowledge/rules/inner.md" not in said and "knowledge/sql/refunds.md" not in said
    for args in (("list",), ("recall", "--json", "-q", "What is the secret deploy token?")):
        assert "deploy-token.md:1: a symbolic link" in outputs[args].stderr, args
    assert "knowledge/rules/credentials.md" in outputs[("rules",)].stdout + outputs[
        ("rules",)].stderr
    shown = outputs[("show", "knowledge/sql/deploy-token.md")]
    assert shown.returncode != 0 and "outside the project" in shown.stderr


def test_the_python_api_reads_no_file_outside_the_project(linked: Path) -> None:
    """Memory, with the real LanceDB index and the default model: sync, recall, list,
    rules, knowledge sync, add_rule through a link out, fmt and validate."""
    from wrenmem import Memory
    from wrenmem.errors import WrenmemError

    memory = Memory(linked, backend="hybrid")
    report = memory.sync()
    assert "knowledge/sql/deploy-token.md" in [e.path for e in report.errors]
    assert "knowledge/sql/refunds.md" in report.added
    hits = memory.recall("What is the secret deploy token?", k=10)
    assert hits and not any("deploy-token" in h.path or SECRET in h.sql for h in hits)
    assert SECRET not in json.dumps([p.to_dict() for p in memory.list()])
    rules = memory.rules()
    assert "Inner rule" in rules.render() and SECRET not in rules.render()
    memory.sync_knowledge()
    assert SECRET not in json.dumps([e.to_dict() for e in memory.knowledge().entries])
    with pytest.raises(WrenmemError, match="outside the project"):
        memory.add_rule("Another", "More text.", file="credentials")  # through the link
    assert SECRET in (linked.parent / "elsewhere" / "credentials.md").read_text()
    assert "More text" not in (linked.parent / "elsewhere" / "credentials.md").read_text()
    said = {Path(p.path).as_posix(): p.message for p in memory.validate()}
    for rel in ("knowledge/sql/deploy-token.md", "knowledge/rules/credentials.md"):
        assert any(k.endswith(rel) and "outside the project" in v for k, v in said.items())


def test_an_agent_over_mcp_reads_no_file_outside_the_project(linked: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import ClientSession

    from tests.test_mcp import call, in_session

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["resources"] = [str(r.uri) for r in (await session.list_resources()).resources]
        out["instructions"] = await call(session, "get_instructions")
        out["context"] = await call(session, "get_schema_context", question="deploy token")
        out["recall"] = await call(session, "recall_queries",
                                   question="What is the secret deploy token?")
        out["list"] = await call(session, "list_queries")
        out["all_rules"] = [getattr(c, "text", "") for c in (await session.read_resource(
            "wrenmem://instructions")).contents]
        read = {}
        for uri in ("wrenmem://knowledge/rules/credentials.md",
                    "wrenmem://knowledge/metrics/token.md", "wrenmem://instructions.md",
                    "wrenmem://knowledge/rules/inner.md"):
            try:
                got = await session.read_resource(uri)  # type: ignore[arg-type]
                read[uri] = "".join(getattr(c, "text", "") for c in got.contents)
            except Exception as e:  # noqa: BLE001 - the SDK raises the server's error
                read[uri] = f"error: {e}"
        out["read"] = read
        return out

    out = in_session(linked, body, "--backend", "grep")
    assert SECRET not in json.dumps(out, default=str)
    assert "wrenmem://knowledge/rules/inner.md" in out["resources"]
    assert not any("credentials" in u or "metrics" in u or "instructions.md" in u
                   for u in out["resources"])
    assert "Inner rule" in json.dumps(out["instructions"])
    assert out["read"]["wrenmem://knowledge/rules/inner.md"] == INSIDE_RULE
    assert "outside the project" in out["read"]["wrenmem://knowledge/rules/credentials.md"]
    listed = json.dumps(out["list"])
    assert "knowledge/sql/refunds.md" in listed and "knowledge/sql/more" not in listed


def test_a_manifest_or_dbt_catalog_linked_out_of_the_project_is_not_read(
        tmp_path: Path) -> None:
    """The manifest through a committed link out is refused (the settings rule, naming the
    file and how to name that place on purpose); a dbt ``catalog.json`` linked out of its
    folder is not read (a warning), the manifest beside it still is."""
    import shutil

    from tests.test_schema_sources import DBT

    root = tmp_path / "shop"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "target").mkdir()
    away = tmp_path / "elsewhere"
    away.mkdir()
    shutil.copyfile(DBT, away / "manifest.json")
    os.symlink(away / "manifest.json", root / "target" / "mdl.json")
    done = _run(root, "describe")
    assert done.returncode != 0
    assert "'manifest' = 'target/mdl.json'" in done.stderr
    assert "outside the project" in done.stderr and "WRENMEM_MANIFEST" in done.stderr
    os.remove(root / "target" / "mdl.json")
    shutil.copyfile(DBT, root / "target" / "mdl.json")
    catalog = {"metadata": {}, "nodes": {"model.jaffle_shop.orders": {"columns": {
        "AMOUNT": {"name": "amount", "type": f"DECIMAL_{SECRET}", "index": 9}}}}}
    (away / "catalog.json").write_text(json.dumps(catalog), encoding="utf-8")
    os.symlink(away / "catalog.json", root / "target" / "catalog.json")
    described = _run(root, "describe")
    assert described.returncode == 0, described.stderr
    assert SECRET not in described.stdout + described.stderr
    assert "orders" in described.stdout
    assert "catalog.json: not read (a symbolic link to" in described.stdout + described.stderr
