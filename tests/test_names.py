"""Source names made from file names, and folders that cannot be listed (issues 25 and 34).

Real files in tmp_path (names made of raw bytes where the file system takes them), real
`ingest.py` runs as subprocesses, a real `server.py` over stdio for search and read_range.
KBs are BM25-only, so no model loads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import call, clean_env, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import fulltext
import ingest
import kb as kbmod
import library
from common import limits
from sources import folders

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
# file name (bytes) -> its one line; each word is in one file only
FILES = {b"a.txt": "alpha apples", b"b\xff.txt": "bravo bananas", b"c.txt": "charlie cherries",
         b"new\nline.txt": "newline nectarines", b"ctl\x01\x1b[31mred.txt": "control cranberries",
         b"new\\x0aline.txt": "literal lychees", b"\xe2\x80\xaeexe.txt": "override oranges"}
NAMES = {"alpha": "src/a.txt", "bravo": "src/b\\xff.txt", "charlie": "src/c.txt",
         "newline": "src/new\\x0aline.txt", "control": "src/ctl\\x01\\x1b[31mred.txt",
         "literal": "src/new\\\\x0aline.txt", "override": "src/\\u202eexe.txt"}

FILES_BY_WORD = {text.split()[0]: text for text in FILES.values()}


def bm25_kb(base: Path, kb_id: str, source_paths: list[Path] = ()) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["embedding"] = {"provider": "none"}
    config["sourcePaths"] = [str(p) for p in source_paths]
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def write_raw(folder: Path, files: dict[bytes, str]) -> None:
    """Files named by raw bytes; skips where the file system refuses such names (Windows,
    macOS: they exist only on Linux disks, Samba shares and old archives)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        try:
            with open(os.path.join(os.fsencode(folder), name), "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except (OSError, UnicodeError) as err:
            pytest.skip(f"this file system refuses the name {name!r} ({err})")


def run_cli(*args: str, base: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(REPO / "ingest.py"), *args, "--base-path", str(base),
                           "--quiet"], capture_output=True, text=True, encoding="utf-8",
                          env=clean_env(), cwd=REPO, timeout=300)


def source_names(kb: kbmod.KnowledgeBase) -> list[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return [s["name"] for s in fulltext.list_sources(conn)]
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# issue 34: names


def test_source_names_are_unique_and_always_accepted():
    # regression: `new\nline.txt` was indexed under that very name, which read_range refuses
    paths = ["a\n.txt", "a\\x0a.txt", "a\\\\x0a.txt", "b\udcff.txt", "b\\xff.txt", "c\x85.txt",
             "c\\u0085.txt", "d\u202e.txt", "e\ud800.txt", "plain/é 한국어.txt", "a\t.txt"]
    names = [limits.source_name(p) for p in paths]
    assert len(set(names)) == len(paths)
    assert names[-2:] == ["plain/é 한국어.txt", "a\\x09.txt"]
    for name in names:
        limits.check_name(name, "source")
        assert limits.source_name(name) != name or "\\" not in name  # escapes are escaped again


def test_one_undecodable_file_name_never_stops_the_folder(tmp_path):
    # regression (issue 34): `b\xff.txt` made `ingest.py DIR` exit 1 with UnicodeEncodeError
    # from fulltext.source_row; c.txt was never indexed, and every sync of the followed
    # folder failed the same way
    src = tmp_path / "src"
    write_raw(src, {n: FILES[n] for n in (b"a.txt", b"b\xff.txt", b"c.txt")})
    base = tmp_path / "base"
    kb = bm25_kb(base, "bad")
    first = run_cli(str(src), "--kb", "bad", base=base)
    assert first.returncode == 0, first.stderr
    assert (json.loads(first.stdout)["indexed"], json.loads(first.stdout)["failed"]) == (3, [])
    assert source_names(kb) == ["src/a.txt", "src/b\\xff.txt", "src/c.txt"]
    again = run_cli("--kb", "bad", base=base)  # the followed folder's sync: stable names
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["indexed"], summary["unchanged"], summary["deleted"]) == (0, 3, 0)
    plan = library.Library(base).check_changes("bad")
    assert (plan["added"], plan["modified"], plan["deleted"], plan["unchanged"]) == ([], [], [], 3)


def test_a_file_given_by_name_gets_the_same_rule_and_a_bad_source_name_is_refused(tmp_path):
    write_raw(tmp_path, {b"new\nline.txt": "newline nectarines", b"ok.txt": "fine"})
    base = tmp_path / "base"
    bm25_kb(base, "one")
    done = run_cli(str(tmp_path / "new\nline.txt"), "--kb", "one", base=base)
    assert done.returncode == 0, done.stderr
    assert source_names(kbmod.load(base, "one")) == ["new\\x0aline.txt"]
    refused = run_cli(str(tmp_path / "ok.txt"), "bad\x1bname", "--kb", "one", base=base)
    assert refused.returncode == 2 and "U+001B" in refused.stderr and "\\x1b" in refused.stderr
    assert "Traceback" not in refused.stderr


async def test_escaped_names_are_searched_and_read_back_over_stdio(tmp_path):
    # regression (issue 34): search returned 'sync_src/new\nline.txt' and read_range refused it
    src = tmp_path / "src"
    write_raw(src, FILES)
    base = tmp_path / "base"
    bm25_kb(base, "names")
    done = run_cli(str(src), "--kb", "names", base=base)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["indexed"] == len(FILES)
    transport = StdioTransport(PY, [str(REPO / "server.py"), "--base-path", str(base)],
                               env=clean_env(), cwd=str(REPO), keep_alive=False,
                               log_file=tmp_path / "server.log")
    async with Client(transport, timeout=120) as client:
        for word, name in NAMES.items():
            hits = (await call(client, "search", query=word, search_mode="bm25"))["hits"]
            assert [h["source"] for h in hits] == [name], word
            read = await call(client, "read_range", source=name, page=1)
            assert (read["source"], read["lines"][0]["text"]) == (name, FILES_BY_WORD[word])
            scoped = await call(client, "search", query=word, search_mode="bm25", source=name)
            assert len(scoped["hits"]) == 1
        plan = await call(client, "check_changes", kb_id="names")
        assert (plan["added"], plan["deleted"], plan["unchanged"]) == ([], [], len(FILES))
        text = await tool_error(client, "read_range", source="src/new\nline.txt", page=1)
        assert "U+000A" in text and "\\x0a" in text


def test_a_name_over_the_bound_is_skipped_not_made(tmp_path):
    # a made name read_range would refuse (over limits.MAX_NAME_CHARS) is never created
    docs = tmp_path / "docs"
    deep = docs.joinpath(*["d" * 200] * 5)
    write_raw(docs, {b"short.txt": "short"})
    write_raw(deep, {b"deep.txt": "deep"})
    summary = ingest.sync(bm25_kb(tmp_path / "base", "kb", [docs]))
    assert (summary.indexed, [s["reason"] for s in summary.skipped]) == (1, ["name-too-long"])


# ---------------------------------------------------------------------------
# issue 25 item 5: folders that cannot be listed


def sync_plan(kb: kbmod.KnowledgeBase) -> dict:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return folders.plan_sync(conn, kb).to_json()
    finally:
        conn.close()


def test_a_missing_or_vanished_source_folder_is_unavailable_not_deleted(tmp_path):
    # regression (issue 25): a sourcePaths folder that is missing (an offline share) stopped
    # the sync of every folder; one gone between runs must not have its sources deleted
    docs, share = tmp_path / "docs", tmp_path / "share"
    write_raw(docs, {b"a.txt": "alpha apples"})
    write_raw(share, {b"s.txt": "shared sardines"})
    kb = bm25_kb(tmp_path / "base", "kb", [docs, share, tmp_path / "nowhere"])
    first = ingest.sync(kb)
    assert first.indexed == 2
    assert [(s["reason"], s["name"]) for s in first.skipped] == [("unavailable", "nowhere/")]
    share.rename(tmp_path / "share-offline")
    plan = sync_plan(kb)
    assert (plan["deleted"], plan["unchanged"]) == ([], 1)
    assert [(s["reason"], s["name"]) for s in plan["skipped"]] == [
        ("unavailable", "share/"), ("unavailable", "nowhere/")]
    second = ingest.sync(kb)
    assert (second.deleted, source_names(kb)) == (0, ["docs/a.txt", "share/s.txt"])
    (tmp_path / "share-offline").rename(share)
    back = ingest.sync(kb)
    assert (back.indexed, back.unchanged, back.deleted) == (0, 2, 0)


def unprivileged() -> list[str]:
    """A command prefix that makes chmod 000 bind: none for a normal user; for root (CI)
    setpriv without the capabilities that let root read any folder."""
    if os.name == "nt":
        pytest.skip("chmod 000 does not lock a folder on Windows (ACLs do)")
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and setpriv (util-linux) is missing to drop the "
                    "capabilities that let root list a chmod-000 folder")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def test_an_unlistable_folder_keeps_its_sources_and_is_reported(tmp_path):
    # regression (issue 25): os.walk dropped a folder it could not list without a word, and
    # the sync deleted every source under it as if its files were gone
    docs = tmp_path / "docs"
    write_raw(docs, {b"a.txt": "alpha apples"})
    write_raw(docs / "locked", {b"l.txt": "locked lemons"})
    base = tmp_path / "base"
    bm25_kb(base, "kb", [docs])
    prefix = unprivileged()
    sync = [*prefix, PY, str(REPO / "ingest.py"), "--kb", "kb", "--base-path", str(base),
            "--quiet"]
    assert json.loads(subprocess.run(sync, capture_output=True, text=True, encoding="utf-8",
                                     env=clean_env(), cwd=REPO, check=True).stdout)["indexed"] == 2
    (docs / "locked").chmod(0)
    try:
        changes = subprocess.run(
            [*prefix, PY, "-c", "import json, sys, library; print(json.dumps(library.Library("
             "__import__('pathlib').Path(sys.argv[1])).check_changes('kb')))", str(base)],
            capture_output=True, text=True, encoding="utf-8", env=clean_env(), cwd=REPO)
        assert changes.returncode == 0, changes.stderr
        plan = json.loads(changes.stdout)
        ran = subprocess.run(sync, capture_output=True, text=True, encoding="utf-8",
                             env=clean_env(), cwd=REPO)
    finally:
        (docs / "locked").chmod(0o755)
    assert (plan["deleted"], plan["unchanged"]) == ([], 1)
    assert [(s["reason"], s["name"]) for s in plan["skipped"]] == [("unlistable",
                                                                     "docs/locked/")]
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["deleted"], [s["reason"] for s in summary["skipped"]]) == (0, ["unlistable"])
    assert source_names(kbmod.load(base, "kb")) == ["docs/a.txt", "docs/locked/l.txt"]
