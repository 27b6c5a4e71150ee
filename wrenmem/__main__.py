"""``python -m wrenmem``: the click CLI (the console script ``wrenmem`` calls the same).

Every command goes through click. A hand parser before click once answered ``recall``,
``fetch`` and a no-op ``sync`` without importing it, and forked the stat walk of the pair
files at a process's start; it saved 1.1-1.4x of a one-shot command's time
(``bench/fast_path.py``), under the 2x the design asks of a mechanism that does what a
dependency does, so it went. A warm answer comes from the watcher instead (``wrenmem
watch``), which click's commands ask first.
"""

from __future__ import annotations

from wrenmem.cli import main

if __name__ == "__main__":
    main()
