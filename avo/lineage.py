"""P_t as git history: the work tree's own repository, driven through the git CLI.

avo snapshots a candidate as a git *tree* (through a temporary index of its own, so neither
the agent's index nor another avo command's is touched), evaluates exactly that tree, and
commits exactly that tree plus the score file, built without any index (``git mktree``) and
verified before it is tagged: what is measured is what enters the lineage, whatever the
agent edits meanwhile. Read-only questions (is work/ dirty?) write nothing in the run.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
    # Nothing may write beside the index or objects it was asked to write (shared split
    # indexes, untracked caches, automatic gc and maintenance), least of all a reader.
    "-c", "core.splitIndex=false",
    "-c", "core.untrackedCache=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
]
_GITLINK, _SYMLINK = "160000", "120000"


class CandidateError(AvoError):
    """The candidate tree cannot be evaluated as it stands (a failed candidate, not an avo error)."""


class ForeignGitDir(AvoError):
    """work/.git is not a plain repository directory of avo's: git must not run through it."""


@dataclass(frozen=True)
class CommitInfo:
    """One commit as read from a repository: id, tree, parents, full message."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str


def _git(git_dir: Path, args: Sequence[str], *, work: Path | None = None, index: Path | None = None,
         stdin: bytes | None = None, check: bool = True, readonly: bool = False) -> bytes:
    """Run git on exactly ``git_dir`` (never a repository found by searching upwards)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_DIR"] = str(git_dir)
    if work is not None:
        env["GIT_WORK_TREE"] = str(work)
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    env["GIT_TERMINAL_PROMPT"] = "0"
    if readonly:
        env["GIT_OPTIONAL_LOCKS"] = "0"  # no opportunistic index refresh written back
    proc = subprocess.run(["git", *_CONFIG, *args], cwd=work or git_dir, env=env, input=stdin,
                          capture_output=True)
    if check and proc.returncode != 0:
        raise AvoError(
            f"git {' '.join(args[:3])} failed in {work or git_dir}: "
            f"{proc.stderr.decode('utf-8', 'replace').strip()}"
        )
    return proc.stdout


def foreign_git_dir(work: Path) -> str | None:
    """Why ``work/.git`` is not a plain repository directory avo may write into, if it is not.

    A symlink or a ``gitdir:`` file would send every write into another repository; a
    ``commondir`` file or a linked ``objects``/``refs`` folder would send some of them.
    """
    git_dir = work / ".git"
    try:
        st = git_dir.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"work/.git is a symlink to {os.readlink(git_dir)!r}"
    if not stat.S_ISDIR(st.st_mode):
        return "work/.git is a file, not a directory (a `gitdir:` link to another repository?)"
    if (git_dir / "commondir").exists():
        return "work/.git has a commondir file: it borrows another repository's objects and refs"
    for sub in ("objects", "refs"):
        if (git_dir / sub).is_symlink():
            return f"work/.git/{sub} is a symlink to {os.readlink(git_dir / sub)!r}"
    return None


def read_commits(git_dir: Path, tip: str) -> list[CommitInfo]:
    """The first-parent chain ending at ``tip`` in ``git_dir``, oldest first."""
    raw = _git(git_dir, ["log", "--first-parent", "--format=%H%x1f%T%x1f%P%x1f%B%x1e", tip, "--"],
               readonly=True)
    out = []
    for rec in raw.decode("utf-8", "replace").split("\x1e"):
        rec = rec.lstrip("\n")
        if not rec:
            continue
        sha, tree, parents, message = rec.split("\x1f", 3)
        out.append(CommitInfo(sha, tree, tuple(parents.split()), message))
    return out[::-1]


def commit_message(git_dir: Path, sha: str) -> str | None:
    """The message of commit ``sha`` in ``git_dir``, or ``None``."""
    out = _git(git_dir, ["log", "-1", "--format=%B", sha, "--"], check=False, readonly=True)
    return out.decode("utf-8", "replace") if out else None


def ref_of(git_dir: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``git_dir``, or ``None``."""
    out = _git(git_dir, ["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], check=False, readonly=True)
    return out.decode().strip() or None


def object_ids(git_dir: Path, specs: Sequence[str]) -> list[str | None]:
    """The object id each ``rev:path`` spec names in ``git_dir`` (``None`` where none)."""
    if not specs:
        return []
    out = _git(git_dir, ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
               stdin="".join(f"{s}\n" for s in specs).encode(), readonly=True)
    ids: list[str | None] = []
    for line in out.decode().splitlines()[:len(specs)]:
        parts = line.split()
        ids.append(parts[0] if len(parts) == 2 and parts[1] in ("blob", "tree", "commit") else None)
    return ids


def read_object(git_dir: Path, spec: str) -> bytes | None:
    """The content of a blob (``rev:path`` or an id) in ``git_dir``, or ``None``."""
    return read_objects(git_dir, [spec])[0]


def read_objects(git_dir: Path, specs: Sequence[str]) -> list[bytes | None]:
    """The contents of blobs (``rev:path`` or ids) in ``git_dir``, through one ``cat-file --batch``."""
    if not specs:
        return []
    data = _git(git_dir, ["cat-file", "--batch"], stdin="".join(f"{s}\n" for s in specs).encode(),
                readonly=True)
    out: list[bytes | None] = []
    pos = 0
    for _ in specs:
        end = data.index(b"\n", pos)
        header = data[pos:end].decode("utf-8", "replace").split()
        if len(header) != 3 or header[1] != "blob":
            out.append(None)
            pos = end + 1
            if len(header) == 3:  # another kind of object: skip its content too
                pos += int(header[2]) + 1
            continue
        size = int(header[2])
        out.append(data[end + 1:end + 1 + size])
        pos = end + 1 + size + 1
    return out


def blob_id(content: bytes) -> str:
    """The id git gives a blob with ``content`` (no repository needed)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class Lineage:
    """The git repository in a run's ``work/``."""

    def __init__(self, work: Path, private_index: Path):
        self.work = work
        self.private_index = private_index

    def git(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
            check: bool = True, readonly: bool = False) -> str:
        return self.git_bytes(*args, index=index, stdin=stdin, check=check,
                              readonly=readonly).decode("utf-8", "replace")

    def git_bytes(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
                  check: bool = True, readonly: bool = False) -> bytes:
        # Name the repository outright: if an agent deletes work/.git, git must fail here
        # rather than find (and write into) a repository that holds the runs directory; if
        # it links work/.git elsewhere, git must not run at all.
        foreign = foreign_git_dir(self.work)
        if foreign:
            raise ForeignGitDir(f"{foreign}; avo will not run git through it. The next avo command that "
                                "changes the run (eval, submit, revert, recover) moves it aside and "
                                "restores the lineage from avo's private backup.")
        return _git(self.work / ".git", args, work=self.work, index=index, stdin=stdin, check=check,
                    readonly=readonly)

    # -- set-up ---------------------------------------------------------------------------
    def init(self) -> None:
        self.git("init", "-q", "-b", BRANCH)

    def displace_git_dir(self, aside: Path) -> Path:
        """Rename work/.git (whatever it is) into ``aside``, never following or deleting it."""
        aside.mkdir(parents=True, exist_ok=True)
        dest = aside / f"work.git-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        os.rename(self.work / ".git", dest)
        return dest

    # -- snapshots ------------------------------------------------------------------------
    @contextmanager
    def _temp_index(self, where: Path | None = None) -> Iterator[Path]:
        """A fresh index file no other command (nor a second call of this one) shares."""
        folder = where if where is not None else self.private_index.parent
        folder.mkdir(parents=True, exist_ok=True)
        index = folder / f"{self.private_index.name}-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            yield index
        finally:
            index.unlink(missing_ok=True)
            index.with_name(index.name + ".lock").unlink(missing_ok=True)

    def snapshot_tree(self) -> str:
        """The tree of the work tree as ``git add -A`` would commit it (a temporary index)."""
        with self._temp_index() as index:
            if self.head() is not None:
                self.git("read-tree", "HEAD", index=index)
            self.git("add", "-A", "--", ".", index=index)
            return self.git("write-tree", index=index).strip()

    def _entries(self, tree: str) -> list[tuple[str, str, str, str]]:
        """``(mode, type, sha, name)`` of a tree's top level."""
        out = []
        for rec in self.git_bytes("ls-tree", "-z", tree).split(b"\0"):
            if rec:
                meta, _, name = rec.partition(b"\t")
                mode, kind, sha = meta.decode().split()
                out.append((mode, kind, sha, os.fsdecode(name)))
        return out

    def _mktree(self, entries: list[tuple[str, str, str, str]]) -> str:
        data = b"".join(f"{m} {k} {s}\t".encode() + os.fsencode(n) + b"\0" for m, k, s, n in entries)
        return self.git("mktree", "-z", stdin=data).strip()

    def tree_with_file(self, base_tree: str, rel: str, content: bytes) -> str:
        """``base_tree`` with one file set to ``content``, built from tree objects (no index).

        No index is involved, so no other process can slip its own tree in between.
        """
        return self._with_blob(base_tree, rel, self.git("hash-object", "-w", "--stdin", stdin=content).strip())

    def _with_blob(self, base_tree: str, rel: str, blob: str) -> str:
        head, _, rest = rel.partition("/")
        current = self._entries(base_tree)
        entries = [e for e in current if e[3] != head]
        if rest:
            sub = next((e for e in current if e[3] == head and e[1] == "tree"), None)
            base_sub = sub[2] if sub else self._mktree([])
            entries.append(("040000", "tree", self._with_blob(base_sub, rest, blob), head))
        else:
            entries.append(("100644", "blob", blob, head))
        return self._mktree(entries)

    def verify_commit_tree(self, commit: str, evaluated: str, rel: str, content: bytes) -> None:
        """Raise unless ``commit``'s tree is exactly ``evaluated`` with ``rel`` set to ``content``."""
        tree = self.tree_of(commit)
        changed = self.git_bytes("diff-tree", "-r", "-z", "--no-renames", "--name-only", evaluated, tree)
        paths = sorted(os.fsdecode(p) for p in changed.split(b"\0") if p)
        stored = self.git("rev-parse", "--verify", "-q", f"{tree}:{rel}", check=False).strip()
        parent_dir = rel.rpartition("/")[0]
        # `.avo` as a file in the candidate is replaced by the folder that holds the scores.
        allowed = {rel, parent_dir} if parent_dir else {rel}
        extra = [p for p in paths if p not in allowed]
        if extra or stored != blob_id(content):
            what = (f"it differs from the evaluated tree {evaluated[:12]} in {', '.join(extra[:5])}"
                    if extra else f"its {rel} is not the score file avo wrote")
            raise AvoError(
                f"the commit {commit[:12]} built for this candidate is not the evaluated tree plus {rel}: "
                f"{what}. The submit was aborted before anything was recorded; the candidate is still in "
                "work/ (something rewrote avo's git objects during the submit?)")

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
        """Point the branch and HEAD at ``sha``, index to match, work tree untouched.

        The agent's index is replaced, never read: a damaged one cannot stop a commit.
        """
        self._on_branch()
        self.git("update-ref", f"refs/heads/{BRANCH}", sha)
        with self._temp_index() as index:
            self.git("read-tree", sha, index=index)
            os.replace(index, self.work / ".git" / "index")

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
        accepted version if it is deleted or pruned, and is what the record is checked
        against. Versions form one chain, so pushing the newest carries all of them; the push
        only fast-forwards, so no record (however edited) can take a version out of it.
        """
        if not (mirror / "HEAD").exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            subprocess.run(["git", "init", "-q", "--bare", "--template=", str(mirror)], env=env,
                           capture_output=True)
        try:
            self.git("push", "-q", "--no-verify", str(mirror), f"{sha}:refs/heads/{BRANCH}")
        except AvoError as exc:
            raise AvoError(f"cannot copy {sha[:12]} into avo's private backup {mirror}: {exc}") from None

    def restore_from(self, mirror: Path) -> bool:
        """Fetch the lineage back from ``mirror`` (re-creating work/.git if it is gone)."""
        if not (mirror / "HEAD").exists():
            return False
        if not os.path.lexists(self.work / ".git"):
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
        """Whether work/ differs from ``best`` as a snapshot would see it; writes nothing in the run.

        The temporary index lives outside the run and no object is written, so a reader
        (``avo status``) never touches what a concurrent submit uses.
        """
        with tempfile.TemporaryDirectory(prefix="avo-status-") as tmp, \
                self._temp_index(Path(tmp)) as index:
            self.git("read-tree", best, index=index, readonly=True)
            self.git("update-index", "-q", "--refresh", index=index, check=False, readonly=True)
            changed = self.git_bytes("diff-files", "--name-only", "-z", index=index, readonly=True)
            untracked = self.git_bytes("ls-files", "--others", "--exclude-standard", "-z", "--directory",
                                       "--no-empty-directory", index=index, readonly=True)
            return bool(changed.strip(b"\0") or untracked.strip(b"\0"))


def diff_fingerprint(diff: str) -> str:
    """A hash of a diff's changes, ignoring blob ids and hunk positions."""
    kept: Sequence[str] = [
        line for line in diff.splitlines()
        if line[:1] in "+-" or line.startswith("diff --git")
    ]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]
