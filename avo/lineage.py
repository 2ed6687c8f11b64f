"""P_t as git history: the work tree's own repository, driven through the git CLI.

avo snapshots a candidate as a git *tree* (through a private index, so the agent's index is
untouched), evaluates exactly that tree, and commits exactly that tree: what is measured is
what enters the lineage, whatever the agent edits meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
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
    # The agent may write work/.git/config: no file-system monitor program runs for us.
    "-c", "core.fsmonitor=false",
]
_GITLINK, _SYMLINK = "160000", "120000"


class CandidateError(AvoError):
    """The candidate tree cannot be evaluated as it stands (a failed candidate, not an avo error)."""


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
        env.pop("GIT_INDEX_FILE", None)
        # Name the repository outright: if an agent deletes work/.git, git must fail here
        # rather than find (and write into) a repository that holds the runs directory.
        env["GIT_DIR"] = str(self.work / ".git")
        env["GIT_WORK_TREE"] = str(self.work)
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
        """Write exactly the files of ``treeish`` into ``dest`` (without ``.git``).

        Blobs are written as git stores them: no ``export-ignore``/``export-subst``
        attributes, no filters, so what is evaluated is byte for byte what is committed.
        A candidate that is not self-contained (a symlink leading out of the tree, a nested
        repository whose files git does not hold) raises :class:`CandidateError` naming the path.
        """
        entries = []
        for rec in self.git_bytes("ls-tree", "-r", "-z", "--full-tree", treeish).split(b"\0"):
            if not rec:
                continue
            meta, _, raw_path = rec.partition(b"\t")
            mode, _kind, sha = meta.decode().split()
            entries.append((mode, sha, os.fsdecode(raw_path)))
        nested = [path for mode, _, path in entries if mode == _GITLINK]
        if nested:
            raise CandidateError(
                f"work/{nested[0]} is a nested git repository: git records only its commit id, not "
                f"its files, so the candidate cannot be evaluated or committed. Remove "
                f"work/{nested[0]}/.git (keep the files) and try again.")
        blobs = self._read_blobs([sha for _, sha, _ in entries])
        dest.mkdir(parents=True, exist_ok=True)
        root = dest.resolve()
        # Regular files first, links last, so no write can follow a link out of dest.
        for mode, sha, path in sorted(entries, key=lambda e: e[0] == _SYMLINK):
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == _SYMLINK:
                target.symlink_to(os.fsdecode(blobs[sha]))
                continue
            target.write_bytes(blobs[sha])
            target.chmod(0o755 if mode == "100755" else 0o644)
        for mode, _, path in entries:
            if mode != _SYMLINK:
                continue
            resolved = Path(os.path.realpath(dest / path))
            if resolved != root and root not in resolved.parents:
                raise CandidateError(
                    f"work/{path} is a symlink to {os.readlink(dest / path)!r}, outside work/: a "
                    "candidate must be self-contained (copy the file into work/ instead).")

    def _read_blobs(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The contents of ``shas`` through one ``git cat-file --batch``."""
        unique = list(dict.fromkeys(shas))
        if not unique:
            return {}
        data = self.git_bytes("cat-file", "--batch", stdin="".join(f"{s}\n" for s in unique).encode())
        out: dict[str, bytes] = {}
        pos = 0
        for sha in unique:
            end = data.index(b"\n", pos)
            header = data[pos:end].decode().split()
            if len(header) != 3:
                raise AvoError(f"git cannot read object {sha} in {self.work}: {' '.join(header)}")
            size = int(header[2])
            out[sha] = data[end + 1:end + 1 + size]
            pos = end + 1 + size + 1
        return out

    def tree_of(self, treeish: str) -> str:
        return self.git("rev-parse", f"{treeish}^{{tree}}").strip()

    def diff(self, old: str, new: str) -> str:
        """Unified diff between two tree-ishes, leaving out avo's own metadata."""
        return self.git("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--binary", old, new,
                        "--", ".", f":(exclude){META_DIR}")

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

    # -- the private backup ---------------------------------------------------------------
    def backup(self, mirror: Path, sha: str) -> None:
        """Copy the lineage up to ``sha`` into avo's private bare repository ``mirror``.

        work/.git is the agent's to break; the mirror, outside work/, lets avo restore every
        accepted version if it is deleted or pruned. Versions form one chain, so pushing the
        newest carries all of them. Best effort: a failed backup must not fail a submit.
        """
        if not (mirror / "HEAD").exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            subprocess.run(["git", "init", "-q", "--bare", "--template=", str(mirror)], env=env,
                           capture_output=True)
        self.git("push", "-q", "--no-verify", str(mirror), f"+{sha}:refs/heads/{BRANCH}", check=False)

    def restore_from(self, mirror: Path) -> bool:
        """Fetch the lineage back from ``mirror`` (re-creating work/.git if it is gone)."""
        if not (mirror / "HEAD").exists():
            return False
        if not (self.work / ".git").exists():
            self.init()
        self.git("fetch", "-q", "--no-tags", str(mirror), f"+refs/heads/{BRANCH}:refs/avo/backup")
        return True

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
