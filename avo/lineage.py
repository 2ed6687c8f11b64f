"""P_t as git history: the work tree's own repository, driven through the git CLI.

avo snapshots a candidate as a git *tree* (through a private index, so the agent's index is
untouched), evaluates exactly that tree, and commits exactly that tree: what is measured is
what enters the lineage, whatever the agent edits meanwhile.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

from avo.errors import AvoError

BRANCH = "main"
META_DIR = ".avo"
# Hooks and signing are the agent's or the user's, not the harness's: never run them.
_CONFIG = [
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "user.name=avo",
    "-c", "user.email=avo@localhost",
    "-c", "core.autocrlf=false",
    "-c", "advice.detachedHead=false",
]


class Lineage:
    """The git repository in a run's ``work/``."""

    def __init__(self, work: Path, private_index: Path):
        self.work = work
        self.private_index = private_index

    def git(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
            check: bool = True) -> str:
        return self.git_bytes(*args, index=index, stdin=stdin, check=check).decode("utf-8", "replace")

    def git_bytes(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
                  check: bool = True) -> bytes:
        env = dict(os.environ)
        for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(var, None)
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        env["GIT_TERMINAL_PROMPT"] = "0"
        proc = subprocess.run(["git", *_CONFIG, *args], cwd=self.work, env=env, input=stdin, capture_output=True)
        if check and proc.returncode != 0:
            raise AvoError(
                f"git {' '.join(args[:3])} failed in {self.work}: "
                f"{proc.stderr.decode('utf-8', 'replace').strip()}"
            )
        return proc.stdout

    # -- set-up ---------------------------------------------------------------------------
    def init(self) -> None:
        self.git("init", "-q", "-b", BRANCH)

    # -- snapshots ------------------------------------------------------------------------
    def snapshot_tree(self) -> str:
        """The tree of the work tree as ``git add -A`` would commit it (private index)."""
        index = self.private_index
        index.unlink(missing_ok=True)
        if self.head() is not None:
            self.git("read-tree", "HEAD", index=index)
        self.git("add", "-A", "--", ".", index=index)
        return self.git("write-tree", index=index).strip()

    def tree_with_file(self, base_tree: str, rel: str, content: bytes) -> str:
        """``base_tree`` with one file replaced by ``content``."""
        index = self.private_index
        index.unlink(missing_ok=True)
        self.git("read-tree", base_tree, index=index)
        blob = self.git("hash-object", "-w", "--stdin", stdin=content).strip()
        self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", index=index)
        return self.git("write-tree", index=index).strip()

    def export(self, treeish: str, dest: Path) -> None:
        """Write the files of ``treeish`` into ``dest`` (without ``.git``)."""
        data = self.git_bytes("archive", "--format=tar", treeish)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="tar")

    def tree_of(self, treeish: str) -> str:
        return self.git("rev-parse", f"{treeish}^{{tree}}").strip()

    def diff(self, old: str, new: str) -> str:
        """Unified diff between two tree-ishes, leaving out avo's own metadata."""
        return self.git("diff", "--no-color", "--binary", old, new, "--", ".", f":(exclude){META_DIR}")

    def diffstat(self, old: str, new: str) -> str:
        return self.git("diff", "--shortstat", old, new, "--", ".", f":(exclude){META_DIR}").strip()

    # -- commits and tags -----------------------------------------------------------------
    def head(self) -> str | None:
        out = self.git("rev-parse", "--verify", "-q", "HEAD", check=False).strip()
        return out or None

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        args = ["commit-tree", tree, "-F", "-"]
        if parent:
            args[2:2] = ["-p", parent]
        return self.git(*args, stdin=message.encode()).strip()

    def _on_branch(self) -> None:
        # An agent may have checked out a tag or another branch; the lineage is `main`.
        head = (self.work / ".git" / "HEAD").read_text().strip() if (self.work / ".git" / "HEAD").is_file() else ""
        if head != f"ref: refs/heads/{BRANCH}":
            self.git("symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")

    def move_branch(self, sha: str) -> None:
        """Point the branch and HEAD at ``sha``, index to match, work tree untouched."""
        self._on_branch()
        self.git("reset", "-q", "--mixed", sha)

    def reset_hard(self, sha: str) -> None:
        """Make the work tree exactly ``sha`` (ignored files are kept)."""
        self._on_branch()
        self.git("reset", "-q", "--hard", sha)
        self.git("clean", "-q", "-fd")

    def set_tags(self, wanted: dict[str, str]) -> list[str]:
        """Make ``vN`` tags exactly ``wanted``; return what had to be repaired."""
        current = {}
        for line in self.git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/tags").splitlines():
            name, _, sha = line.partition(" ")
            current[name] = sha
        repaired = []
        for name, sha in wanted.items():
            if current.get(name) != sha:
                self.git("tag", "-f", name, sha)
                repaired.append(name)
        for name in current:
            if name not in wanted and name[:1] == "v" and name[1:].isdigit():
                self.git("tag", "-d", name)
                repaired.append(name)
        return repaired

    def missing_commits(self, shas: Sequence[str]) -> list[str]:
        """Which of ``shas`` are not commits in the repository (one git call for all)."""
        if not shas:
            return []
        out = self.git("cat-file", "--batch-check", stdin="".join(f"{s}\n" for s in shas).encode())
        return [sha for sha, line in zip(shas, out.splitlines(), strict=False) if line.split()[1:2] != ["commit"]]

    def is_dirty(self, best: str) -> bool:
        return self.snapshot_tree() != self.tree_of(best)


def diff_fingerprint(diff: str) -> str:
    """A hash of a diff's changes, ignoring blob ids and hunk positions."""
    kept: Sequence[str] = [
        line for line in diff.splitlines()
        if line[:1] in "+-" or line.startswith("diff --git")
    ]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]
