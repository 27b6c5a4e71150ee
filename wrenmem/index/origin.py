"""Where an index was built from: the project, git branch and commit of the writer.

A shared index (object storage) is written by CI or one machine and read by many
checkouts, some on other branches. The writer records its origin in the pairs table's
metadata; a reader compares it with its own to say what it is looking at.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from wrenmem.fs.fsutil import git_output

# CI systems check out a detached HEAD; they name the branch in one of these.
DETACHED = "(detached)"  # the branch of a detached HEAD that no CI variable names
BRANCH_ENV = ("WRENMEM_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME",
              "BUILDKITE_BRANCH", "CIRCLE_BRANCH", "GIT_BRANCH")


@dataclass(frozen=True)
class Origin:
    project: str
    branch: str
    commit: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def describe(self) -> str:
        commit = f"@{self.commit[:10]}" if self.commit else ""
        return f"{self.project} {self.branch}{commit}"


def _clean_remote(url: str) -> str:
    """A remote URL without credentials or the ``.git`` suffix."""
    url = re.sub(r"//[^/@]*@", "//", url)
    return url.removesuffix(".git").rstrip("/")


def project_key(project: str) -> str | None:
    """A comparable name for a project recorded from its git remote: host and path, without
    scheme, user, ``.git`` or case of the host, so ``git@host:team/kb.git`` and
    ``https://host/team/kb`` are one project. None for a project named after its folder
    (no remote): a CI runner's and a laptop's folder names say nothing about sameness."""
    url = project.strip()
    if "/" not in url:
        return None
    url = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url, flags=re.IGNORECASE)
    url = re.sub(r"^[^/@]*@", "", url)
    host, sep, path = url.partition("/")
    if ":" in host and not re.search(r":\d+$", host):  # scp-like git@host:team/kb
        host, _colon, first = host.partition(":")
        path = f"{first}/{path}" if sep else first
    host = re.sub(r":\d+$", "", host).lower()
    path = path.removesuffix(".git").strip("/")
    return f"{host}/{path}" if path else None


def other_project(recorded: Origin | None, here: Origin) -> str | None:
    """The project an index was built from when it is certainly not this one (both named by
    their git remotes, and different); else None."""
    if recorded is None:
        return None
    theirs, ours = project_key(recorded.project), project_key(here.project)
    return recorded.project if theirs and ours and theirs != ours else None


def is_older_checkout(root: Path, recorded: Origin | None, here: Origin) -> bool:
    """True when this checkout's commit is a strict ancestor of the one the index was built
    from, on the same branch of the same project (a detached HEAD counts as on it): an
    older CI job that finishes last must not overwrite a newer index. False when git
    cannot tell."""
    same_branch = recorded is not None and (recorded.branch == here.branch
                                            or here.branch == DETACHED)
    if (recorded is None or not recorded.commit or not here.commit
            or recorded.commit == here.commit or not same_branch
            or project_key(recorded.project) != project_key(here.project)):
        return False
    return git_output(root, "merge-base", "--is-ancestor", here.commit, recorded.commit) is not None


def local_origin(root: Path) -> Origin:
    """This checkout's project (the ``origin`` remote, else the folder name), branch, commit."""
    project = _clean_remote(git_output(root, "remote", "get-url", "origin") or "") or root.name
    branch = git_output(root, "rev-parse", "--abbrev-ref", "HEAD") or ""
    if branch in ("", "HEAD"):
        branch = next((os.environ[v] for v in BRANCH_ENV if os.environ.get(v)),
                      DETACHED if branch else "(no git)")
    return Origin(project, branch, git_output(root, "rev-parse", "HEAD") or "")
