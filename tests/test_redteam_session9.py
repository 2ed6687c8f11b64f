"""Red-team session 9: holes in the packed-refs tags (cc6a515) and signed_lines (1c1c5e5)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from avo.engine import open_run, submit
from avo.errors import AvoError
from tests.conftest import set_constants
from tests.test_forged_records import avo_cli, rechain, remeasured_at_minus_1e9
from tests.test_record_integrity import started


def git(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True)


def recorded_tags(run, runs_root: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {f"v{v.n}": v.sha for v in open_run(run.paths.root, runs_root).state.versions}


def git_tags(work: Path) -> dict[str, str]:
    listed = git(work, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/tags")
    assert listed.returncode == 0, listed.stderr  # git can read its refs at all
    out: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        name, sha = line.split(" ")
        assert name not in out, f"git lists {name} twice"
        out[name] = sha
    return out


# -- Change 1: vN tags in packed-refs --------------------------------------------------------


def _header_git_refuses(text: str) -> str:
    return "# not git's header\n" + "".join(text.splitlines(keepends=True)[1:])


def _blank_line_first(text: str) -> str:
    return "\n" + text


@pytest.mark.parametrize(("edit", "x"), [(_header_git_refuses, 5), (_blank_line_first, 2)])
def test_a_packed_refs_file_git_refuses_is_rewritten_not_kept(
        toy: Path, runs_root: Path, core_plugins: None, edit: Callable[[str], str], x: float) -> None:
    # _header_git_refuses: the agent replaces packed-refs' header with any other '#' line. avo
    # accepted any first line starting with '#' as "the header" (fast path: the file holds
    # avo's tags only) and kept it verbatim, also when add_tag put the new version's line in
    # (X = 5: accepted). _blank_line_first: a blank line before the header (or whitespace after
    # the last line); avo read packed-refs through _small_file, which .strip()s it, so the file
    # looked exact and was left alone (X = 2: rejected, so add_tag does not rewrite it). git
    # requires "# pack-refs with:" on line 1 and dies ("unexpected line in .git/packed-refs")
    # on every ref lookup.
    # Harm: after the submit's recover, `git rev-parse vN` / `git tag` fail for every tag.
    run = started(toy, runs_root)
    work = run.paths.work
    packed = work / ".git" / "packed-refs"
    packed.write_text(edit(packed.read_text()))
    set_constants(work, x=x)
    try:  # before the fix: AvoError "git diff ... failed: unexpected line in .git/packed-refs", after recover
        submit(open_run(run.paths.root, runs_root), f"X={x}")
    except AvoError:
        pass
    assert git_tags(work) == recorded_tags(run, runs_root)


def test_a_crlf_vn_line_is_written_back_by_avo_and_git_resolves_the_tag_to_it(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack: the agent adds "<sha of v0> refs/tags/v1\r\n" to packed-refs. avo's regex (which
    # wants "\n" right after the name) misses it, then the agent-entry parse uses str.splitlines
    # (which also splits at "\r"), so it is kept as an agent ref named refs/tags/v1 and written
    # back, with "\n", next to avo's own v1 line.
    # Harm: after the submit `git rev-parse v1` gives the agent's commit (v0's), not v1's, and
    # git lists v1 twice; avo itself wrote the forged line in the form git reads.
    run = started(toy, runs_root)
    work = run.paths.work
    truth = recorded_tags(run, runs_root)
    packed = work / ".git" / "packed-refs"
    head, *rest = packed.read_text().splitlines(keepends=True)  # not last: avo strips the file's end
    packed.write_bytes((head + f"{truth['v0']} refs/tags/v1\r\n" + "".join(rest)).encode())
    set_constants(work, x=2)
    out = submit(open_run(run.paths.root, runs_root), "X=2")
    assert out.outcome == "rejected"
    assert git(work, "rev-parse", "v1").stdout.strip() == truth["v1"], "git resolves v1 to the forged commit"
    assert git_tags(work) == truth


def test_an_agent_ref_name_not_utf8_makes_avo_drop_every_packed_ref(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack (or an honest agent): a ref whose name is not UTF-8 (git allows bytes >= 0x80),
    # then `git pack-refs --all`. _small_file returns "" on UnicodeDecodeError, so set_tags
    # sees an empty packed-refs, counts every vN as missing and rewrites the file with avo's
    # tags only.
    # Harm: every one of the agent's packed refs (its branches and tags) deleted silently.
    run = started(toy, runs_root)
    work = run.paths.work
    assert git(work, "branch", "mine").returncode == 0
    assert git(work, "tag", "keep").returncode == 0
    subprocess.run(["git", "tag", b"caf\xe9"], cwd=work, check=True)
    assert git(work, "pack-refs", "--all").returncode == 0
    set_constants(work, x=2)
    out = submit(open_run(run.paths.root, runs_root), "X=2")
    assert out.outcome == "rejected"
    assert git(work, "rev-parse", "--verify", "-q", "refs/heads/mine").returncode == 0, "branch mine lost"
    assert git(work, "rev-parse", "--verify", "-q", "refs/tags/keep").returncode == 0, "tag keep lost"


def test_a_packed_refs_over_16_mib_makes_avo_drop_every_packed_ref(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack (or an agent with many refs): packed-refs over _REFS_FILE_MAX (16 MiB, ~280k refs).
    # _small_file returns "" for it, set_tags rewrites the file with avo's tags only.
    # Harm: all of the agent's packed refs deleted silently (no error, no note).
    run = started(toy, runs_root)
    work = run.paths.work
    sha = recorded_tags(run, runs_root)["v0"]
    packed = work / ".git" / "packed-refs"
    lines = packed.read_text().splitlines(keepends=True)
    mine = [f"{sha} refs/heads/agent/{i:07d}\n" for i in range(300_000)]
    packed.write_text(lines[0] + "".join(sorted([*lines[1:], *mine], key=lambda x: x[41:].encode())))
    assert packed.stat().st_size > 1 << 24
    assert git(work, "rev-parse", "--verify", "-q", "refs/heads/agent/0000000").returncode == 0
    set_constants(work, x=2)
    # Now: refused by name (more than avo reads), the agent's refs untouched.
    with pytest.raises(AvoError, match="packed-refs is larger than 16 MiB"):
        submit(open_run(run.paths.root, runs_root), "X=2")
    assert git(work, "rev-parse", "--verify", "-q", "refs/heads/agent/0000000").returncode == 0, \
        "the agent's 300,000 packed branches were deleted"


# -- Change 2: a signed run made to look unsigned ------------------------------------------------


def _rewrite_unsigned(run, records: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """Write ``records`` as the whole trajectory, no ``mac``, re-chained (line 1 chains to nothing)."""
    out: list[bytes] = []
    for r in records:
        r = {k: v for k, v in r.items() if k != "mac"}
        if out:
            r["prev"] = hashlib.sha256(out[-1]).hexdigest()
        elif "prev" in r:
            r["prev"] = None
        out.append(json.dumps(r).encode())
    run.paths.trajectory.write_bytes(b"".join(line + b"\n" for line in out))


def test_the_start_record_moved_off_line_one_makes_the_run_unsigned_again(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack: strip every signature, swap lines 1 and 2 (the start record is no longer the
    # first line), re-chain, delete check.key, append forged re-measurements of the best at
    # -1e9. LineSignatures reads signed_lines only from line 1, but started_terms (the terms
    # check) takes the first start record anywhere, so the terms still match v0's pin.
    # Harm: `avo recover` takes the forged re-measurements into run.json, and a candidate
    # worse than the best is accepted.
    run = started(toy, runs_root)
    best = run.state.best_version
    records = [json.loads(line) for line in run.paths.trajectory.read_bytes().splitlines()]
    assert records[0]["kind"] == "start"
    records[0], records[1] = records[1], records[0]
    _rewrite_unsigned(run, records)
    (run.paths.private / "check.key").unlink()
    rechain(run, remeasured_at_minus_1e9(run))
    code, recovered = avo_cli("recover", "--run", str(run.paths.root))
    assert open_run(run.paths.root, runs_root).state.remeasured == {}, "forged re-measurements taken"
    # Since the fifth round, v1's own accepted submit (its signature stripped too) no longer
    # counts either: recover does not adopt v1, so the bar is v0's own score, not -1e9.
    assert code == 0 and f"not adopted: v{best.n}" in recovered, recovered
    set_constants(run.paths.work, x=2)  # worse than v1 (X = 4), better than v0
    out = submit(open_run(run.paths.root, runs_root), "X=2")
    assert out.outcome == "accepted" and "v0" in out.reason, out.reason


def test_an_unchained_line_put_before_the_start_record_makes_the_run_unsigned_again(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack: as above, but the start record stays in place and one line without "prev" is
    # put before it (verify allows unchained lines at the start: "older runs"), the rest
    # re-chained onto it; the key is kept, only its mark "every trajectory line signed" cut.
    # Harm: the forged re-measurements are taken into run.json by `avo recover`.
    run = started(toy, runs_root)
    records = [json.loads(line) for line in run.paths.trajectory.read_bytes().splitlines()]
    out: list[bytes] = [json.dumps({"kind": "note", "text": "hello"}).encode()]
    for r in records:
        r = {k: v for k, v in r.items() if k != "mac"}
        r["prev"] = hashlib.sha256(out[-1]).hexdigest()
        out.append(json.dumps(r).encode())
    run.paths.trajectory.write_bytes(b"".join(line + b"\n" for line in out))
    key = run.paths.private / "check.key"
    key.write_bytes(key.read_bytes().removesuffix(b"\nevery trajectory line signed\n"))
    rechain(run, remeasured_at_minus_1e9(run))
    avo_cli("recover", "--run", str(run.paths.root))
    assert open_run(run.paths.root, runs_root).state.remeasured == {}, "forged re-measurements taken"


def test_refs_tags_a_link_out_of_work_makes_avo_delete_a_file_there(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack: the agent replaces work/.git/refs/tags with a symlink to a folder outside work/
    # that holds a file named like a version tag (v1). _loose_version_tags scans through the
    # link, takes the file for a loose tag and set_tags unlinks it "after folding it in".
    # Harm: avo deletes a file outside work/ of the agent's choosing (any name v<digits>).
    run = started(toy, runs_root)
    work = run.paths.work
    outside = run.paths.root.parent / "outside"
    outside.mkdir()
    (outside / "v1").write_text("the user's file\n")
    tags_dir = work / ".git" / "refs" / "tags"
    for f in tags_dir.iterdir():
        f.unlink()
    tags_dir.rmdir()
    tags_dir.symlink_to(outside)
    set_constants(work, x=2)
    # Refused by name at first; since session 13 a linked folder under refs/ makes work/.git a
    # foreign one: moved aside whole (the link with it, not followed) and restored from the backup.
    out = submit(open_run(run.paths.root, runs_root), "X=2")
    assert any("refs/tags is a symlink" in note for note in out.notes), out.notes
    assert (outside / "v1").read_text() == "the user's file\n", "avo deleted a file outside work/"


def test_an_unparsable_first_line_makes_the_run_unsigned_again(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Attack: one line that is not JSON put before the start record, every signature stripped
    # and the key deleted. LineSignatures' first line is then neither signed nor a start record.
    # Harm: `avo recover` takes the forged re-measurements (-1e9 twice) into run.json.
    run = started(toy, runs_root)
    records = [json.loads(line) for line in run.paths.trajectory.read_bytes().splitlines()]
    _rewrite_unsigned(run, records)
    run.paths.trajectory.write_bytes(b"not json\n" + run.paths.trajectory.read_bytes())
    (run.paths.private / "check.key").unlink()
    rechain(run, remeasured_at_minus_1e9(run))
    avo_cli("recover", "--run", str(run.paths.root))
    assert open_run(run.paths.root, runs_root).state.remeasured == {}, "forged re-measurements taken"

