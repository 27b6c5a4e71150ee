"""Set up a project: ``knowledge/sql/``, ``.wrenmem/`` ignored by git, a commented settings file."""

from __future__ import annotations

from wrenmem.settings import CONFIG_FILE, Settings, settings_help

GITIGNORE_BLOCK = "# wrenmem derived state (index, caches, daemon socket, logs)\n.wrenmem/\n"


def init_project(settings: Settings) -> list[str]:
    """Create what is missing; returns what was done (empty when nothing was needed)."""
    done = []
    if not settings.knowledge_path.is_dir():
        settings.knowledge_path.mkdir(parents=True)
        done.append(f"created {settings.knowledge_dir}/")
    gitignore = settings.root / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    if not any(line.strip().rstrip("/") in (".wrenmem", "/.wrenmem") for line in lines):
        with gitignore.open("a", encoding="utf-8") as fh:
            if lines and lines[-1].strip():
                fh.write("\n")
            fh.write(GITIGNORE_BLOCK)
        done.append("added .wrenmem/ to .gitignore")
    config = settings.root / CONFIG_FILE
    if not config.exists():
        body = ["# wrenmem settings. Precedence: command-line flag > WRENMEM_* environment",
                "# variable > this file > default. Uncomment to change.", ""]
        for name, env, default, text in settings_help():
            body.append(f"# {text} ({env})")
            if isinstance(default, tuple):
                shown = "[" + ", ".join(f'"{v}"' for v in default) + "]"
            elif isinstance(default, bool):
                shown = str(default).lower()
            else:
                shown = f'"{default}"' if isinstance(default, str) else (default or '""')
            body.append(f"# {name} = {shown}")
        config.write_text("\n".join(body) + "\n", encoding="utf-8")
        done.append(f"wrote {CONFIG_FILE}")
    return done
