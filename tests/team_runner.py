"""``python tests/team_runner.py ARGS``: the wrenmem CLI with the tests' fake embedder.

For the team-index tests, which run several wrenmem processes at once (machines sharing one
object-storage index). ``WRENMEM_TEST_START_AT`` (a Unix time) makes racing processes start
together; ``WRENMEM_TEST_EMBED_DELAY`` (seconds per batch) makes a sync last long enough
to be interrupted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from index_helpers import RecordingEmbedder  # noqa: E402


class SlowEmbedder(RecordingEmbedder):
    def embed(self, texts):  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ.get("WRENMEM_TEST_EMBED_DELAY", "0")))
        return super().embed(texts)


def main() -> None:
    from wrenmem.cli import main as cli_main
    from wrenmem.embedders import EMBEDDERS

    fake = SlowEmbedder()
    EMBEDDERS["fake"] = lambda arg, root: fake
    start = float(os.environ.get("WRENMEM_TEST_START_AT", "0"))
    while time.time() < start:
        time.sleep(0.005)
    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
