"""wrenmem: memory for text-to-SQL agents, kept as Markdown files in git."""

from __future__ import annotations

__version__ = "0.1.0"
