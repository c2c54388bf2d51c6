"""Repositories as folders: .gitignore files as git reads them, vendored, build, generated and
binary files left out and counted by reason, and a 20,000-file repository in bounded memory."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fulltext
import ingest
import kb as kbmod
from sources import folders, ignores

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="needs git on PATH (its answer is the oracle)")

ROOT_IGNORE = """\
# a comment, then a blank line

/top.txt
secret*.txt
!secret-ok.txt
build-notes/
docs/**/draft.txt
logs/
!logs/important.txt
a/*
!a/b
\\#hash.txt
f.txt
[Dd]ata/
**/tmp
trailing.txt\x20\x20\x20
z/**
!z/keep.txt
"""
SUB_IGNORE = "*.md\n!README.md\n/local.txt\ndeep/\n!x.d\n"
INNER_IGNORE = "!*.md\nREADME.md\n"
BRACKET_IGNORE = "*.txt\n!keep.txt\n"
WHITELIST_IGNORE = "*\n!*/\n!*.md\n"  # the whitelist idiom: only Markdown, at any depth
INFO_EXCLUDE = "excluded-by-info.txt\n!sub/notes.md\n"  # below every .gitignore: notes.md stays out
FILES = [
    "top.txt", "sub/top.txt", "keep.txt", "secret1.txt", "secret-ok.txt", "docs/draft.txt",
    "docs/a/b/draft.txt", "docs/other.txt", "logs/important.txt", "logs/x.txt", "a/c.txt",
    "a/b/d.txt", "#hash.txt", "f.txt", "x.d/f.txt", "x.d/g.txt", "Data/y.txt", "data/z.txt",
    "q/tmp/t.txt", "tmp/u.txt", "build-notes/n.txt", "build-notes.txt", "trailing.txt",
    "sub/a.md", "sub/README.md", "sub/local.txt", "sub/x/local.txt", "sub/deep/d.txt",
    "sub/x/deep/e.txt", "sub/notes.md", "sub/x.d/f.txt", "sub/x.d/h.txt", "sub/inner/a.md",
    "sub/inner/README.md", "[draft]/a.txt", "[draft]/keep.txt", "d/a.txt",
    "excluded-by-info.txt", "z/keep.txt", "z/other.txt", "z/deep/k.txt", "w/a.txt", "w/b.md",
    "w/x/c.md", "w/x/d.txt",
]


def git(repo: Path, *args: str, stdin: str | None = None) -> list[str]:
    """Run git in `repo` with no user or system config (no global excludes file)."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": str(repo.parent), "XDG_CONFIG_HOME": str(repo.parent / "xdg")}
    done = subprocess.run([GIT, *args], cwd=repo, env=env, input=stdin, capture_output=True,
                          text=True, encoding="utf-8", check=False)
    assert done.returncode in (0, 1), done.stderr  # check-ignore: 1 = nothing ignored
    return done.stdout.splitlines()


def write(path: Path, text: str = "some words\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def make_kb(tmp_path: Path, sources: list[Path], **extra) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(tmp_path / "base", "repo")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config.update(sourcePaths=[str(f) for f in sources], **extra)
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "repo")


def plan(kb: kbmod.KnowledgeBase) -> dict:
    """check_changes' plan of a KB never synced."""
    conn = fulltext.connect(Path(":memory:"))
    try:
        return folders.plan_sync(conn, kb).to_json()
    finally:
        conn.close()


def by_reason(skipped: list[dict]) -> dict[str, dict]:
    return {entry["reason"]: entry for entry in skipped}


def make_tricky_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo / ".gitignore", ROOT_IGNORE)
    write(repo / "sub" / ".gitignore", SUB_IGNORE)
    write(repo / "sub" / "inner" / ".gitignore", INNER_IGNORE)
    write(repo / "[draft]" / ".gitignore", BRACKET_IGNORE)
    write(repo / "w" / ".gitignore", WHITELIST_IGNORE)
    write(repo / ".git" / "info" / "exclude", INFO_EXCLUDE)
    for name in FILES:
        write(repo / name)
    return repo


@needs_git
def test_gitignore_rules_match_git(tmp_path):
    """Negation, dir/ patterns, anchors, **, nested files, info/exclude, a re-include under an
    excluded folder (which git refuses), a folder name with glob characters: the files a sync
    keeps are exactly the ones git calls untracked and not ignored."""
    repo = make_tricky_repo(tmp_path)
    kept_by_git = {p for p in git(repo, "ls-files", "--others", "--exclude-standard")
                   if not p.endswith(".gitignore")}
    ignored_by_git = set(git(repo, "check-ignore", "--stdin", stdin="\n".join(FILES)))
    assert kept_by_git == set(FILES) - ignored_by_git  # git agrees with itself
    assert {"logs/important.txt", "sub/x.d/f.txt", "sub/notes.md"} <= ignored_by_git
    assert {"a/b/d.txt", "sub/inner/a.md", "[draft]/keep.txt", "d/a.txt", "z/keep.txt",
            "w/x/c.md"} <= kept_by_git

    kept = {name.removeprefix("repo/") for _, name in folders.discover([repo], unlisted=[])}
    assert kept == kept_by_git
    gitignored = by_reason(plan(make_kb(tmp_path, [repo]))["skipped"])["gitignored"]
    assert gitignored["files"] + gitignored["folders"] > 0
    assert len(gitignored["examples"]) == ignores.EXAMPLES


GLOB_TREE = ["a.txt", "a/b.txt", "a/x/b.txt", "b/a.txt", "c/a/d/b.txt", "abc.txt", "a-c.txt",
             "[x].txt", "!x.txt", "#x.txt", "x .txt", "ab/cd.txt"]
GLOBS = ["*.txt", "/a.txt", "a/", "a/**", "**/b.txt", "a/**/b.txt", "a?c.txt", "[ab]*.txt",
         "[!ab]*.txt", "a[a-c]c.txt", "\\!x.txt", "\\#x.txt", "!x.txt", "x .txt", "a/*/b.txt",
         "*", "**", "a**.txt", "*/", "\\[x\\].txt", "[[]x].txt", "c/**/d", "**/a/**", "a*/",
         "ab/", "/ab/cd.txt", "*/b.txt", "[a-b]/", "x\\ .txt", "b/**/", "[x"]


@needs_git
@pytest.mark.parametrize("glob", GLOBS)
def test_each_glob_matches_like_git(tmp_path, glob):
    """One pattern at a time over the same tree: wildcards, classes, escapes, `**`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for name in GLOB_TREE:
        write(repo / name)
    write(repo / ".gitignore", glob + "\n")
    kept_by_git = set(git(repo, "ls-files", "--others", "--exclude-standard")) - {".gitignore"}
    kept = {name.removeprefix("repo/") for _, name in folders.discover([repo], unlisted=[])}
    assert kept == kept_by_git


@needs_git
def test_subfolder_of_a_repository_follows_the_repositorys_rules(tmp_path):
    """Following repo/sub still applies repo/.gitignore and info/exclude (as git would)."""
    repo = make_tricky_repo(tmp_path)
    kept = {name for _, name in folders.discover([repo / "sub"], unlisted=[])}
    in_sub = {p for p in git(repo, "ls-files", "--others", "--exclude-standard", "sub")
              if not p.endswith(".gitignore")}
    assert kept == in_sub != set()


def test_case_insensitive_matching_follows_the_file_system(tmp_path):
    """core.ignorecase: where the file system ignores case, so do the patterns."""
    write(tmp_path / "f" / ".gitignore", "*.TXT\n")
    write(tmp_path / "f" / "a.txt")
    kept = {name for _, name in folders.discover([tmp_path / "f"], unlisted=[])}
    assert kept == (set() if ignores.folds_case(tmp_path) else {"f/a.txt"})
    folded = ignores.Ignores(tmp_path, (ignores.compile_pattern("*.TXT", "", fold=True),),
                             fold=True)  # as on Windows and macOS, whatever this machine is
    assert folded.ignored(tmp_path / "A.txt", is_dir=False)


def test_a_kb_can_turn_gitignore_off(tmp_path):
    write(tmp_path / "notes" / ".gitignore", "*.md\n")
    write(tmp_path / "notes" / "a.md")
    assert plan(make_kb(tmp_path, [tmp_path / "notes"]))["added"] == []
    kb = make_kb(tmp_path, [tmp_path / "notes"], respectGitignore=False)
    assert plan(kb)["added"] == ["notes/a.md"]
    assert kb.to_json()["respectGitignore"] is False
    with pytest.raises(kbmod.ConfigError, match="respectGitignore"):
        make_kb(tmp_path, [tmp_path / "notes"], respectGitignore="no")


def make_project(folder: Path) -> None:
    """A project with every kind of thing a sync should leave out, and two real documents."""
    write(folder / "README.md", "# Project\nHow the harbour crane is scheduled.\n")
    write(folder / "docs" / "guide.txt", "The guide.\n")
    for n in range(5):
        write(folder / "node_modules" / f"pkg{n}" / "readme.md")
    write(folder / "env" / "pyvenv.cfg", "home = /usr/bin\n")
    write(folder / "env" / "lib" / "notes.txt")
    write(folder / "__pycache__" / "x.txt")
    write(folder / "build" / "out.txt")
    write(folder / "vendor" / "lib.txt")
    (folder / "blob.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    (folder / "wide.txt").write_bytes("wide text".encode("utf-16-le"))  # NULs, but text


def test_vendored_build_and_binary_files_are_counted_by_reason(tmp_path):
    project = tmp_path / "project"
    make_project(project)
    first = plan(make_kb(tmp_path, [project]))
    assert sorted(first["added"]) == ["project/README.md", "project/build/out.txt",
                                      "project/docs/guide.txt", "project/vendor/lib.txt",
                                      "project/wide.txt"]  # not a repository: build/ stays
    reasons = by_reason(first["skipped"])
    assert reasons["vendored"]["folders"] == 2  # node_modules and the virtual env
    assert reasons["vendored"]["examples"] == ["project/env/", "project/node_modules/"]
    assert reasons["build-output"]["examples"] == ["project/__pycache__/"]
    assert (reasons["binary"]["files"], reasons["binary"]["examples"]) == (
        1, ["project/blob.txt"])
    walked: list[dict] = []  # ingest's walk screens as it goes: the same reasons, once each
    list(folders.discover([project], skipped=walked, unlisted=[]))
    assert [entry["reason"] for entry in walked] == ["binary", "build-output", "vendored"]

    (project / ".git").mkdir()  # now a work tree: build/ and vendor/ are what they say
    second = plan(make_kb(tmp_path, [project]))
    assert sorted(second["added"]) == ["project/README.md", "project/docs/guide.txt",
                                       "project/wide.txt"]
    assert by_reason(second["skipped"])["build-output"]["folders"] == 2


@pytest.mark.parametrize(("name", "text"), [
    ("api.min.js", "var a=1;\n"),
    ("package-lock.json", "{}\n"),
    ("gen.py", "# Code generated by protoc. DO NOT EDIT.\nx = 1\n"),
    ("bundle.js", "var a=1;" * 600),  # one 4,800-byte line: minified
])
def test_generated_files_are_left_out(tmp_path, name, text):
    write(tmp_path / name, text)
    assert ignores.content_reason(tmp_path / name) == "generated"


@pytest.mark.parametrize(("name", "text"), [
    ("notes.md", "# Notes\n<!-- DO NOT EDIT: generated by the docs tool -->\n"),  # prose
    ("rows.jsonl", ('{"text": "' + "x" * 900 + '"}\n') * 5),  # records: long lines are normal
    ("app.js", "function f() {\n  return 1;\n}\n" * 100),
])
def test_ordinary_files_are_kept(tmp_path, name, text):
    write(tmp_path / name, text)
    assert ignores.content_reason(tmp_path / name) is None


def test_a_changed_file_that_turned_binary_is_dropped(tmp_path):
    """Unchanged files are not read again; a changed one is, and its old source goes."""
    docs = tmp_path / "docs"
    write(docs / "a.txt", "Alpha report on the harbour crane.\n")
    kb = make_kb(tmp_path, [docs], embedding={"provider": "none"})
    assert ingest.sync(kb).indexed == 1
    (docs / "a.txt").write_bytes(b"\x00\x01\x02" * 100)
    os.utime(docs / "a.txt", (1, 1))
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        changed = folders.plan_sync(conn, kb).to_json()
    finally:
        conn.close()
    assert (changed["modified"], changed["deleted"]) == ([], ["docs/a.txt"])
    assert by_reason(changed["skipped"])["binary"]["examples"] == ["docs/a.txt"]


REPO_FILES = 20_000  # files in the scale test's repository
PEAK_BYTES = 12 * 2**20  # plan_sync's own peak (tracemalloc, imports done first): 7.7 MiB


MEASURE_PLAN = """
import json, sys, time, tracemalloc
from pathlib import Path
sys.path[:0] = [str(Path.cwd().parent), str(Path.cwd())]
import kb as kbmod
from test_repo_sync import plan
root = Path(sys.argv[1])
plan(kbmod.load(root / "warm" / "base", "repo"))  # first imports (extract, bm25, numpy: 7 MiB)
big = kbmod.load(root / "base", "repo")
tracemalloc.start()
started = time.perf_counter()
result = plan(big)
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps([result, peak, time.perf_counter() - started]))
"""


def make_large_repo(repo: Path) -> dict[str, int]:
    """REPO_FILES small files: a tenth in node_modules, a fifth gitignored, the rest to index,
    200 to a folder. Returns how many of each."""
    write(repo / ".gitignore", "*.tmp.txt\n")
    (repo / ".git").mkdir()
    for n in range(REPO_FILES):
        kind = n % 10
        folder = repo / ("node_modules" if kind == 0 else "src") / f"m{n // 200}"
        name = f"f{n}.tmp.txt" if kind in (1, 2) else f"f{n}.txt"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"def f():\n    return 1\n")
    return {"added": REPO_FILES * 7 // 10, "gitignored": REPO_FILES // 5}


@pytest.mark.slow
def test_a_20000_file_repository_plans_in_bounded_memory(tmp_path):
    repo = tmp_path / "big"
    counts = make_large_repo(repo)
    make_kb(tmp_path, [repo], embedding={"provider": "none"})
    small = tmp_path / "small"
    write(small / "a.txt", "x")
    make_kb(tmp_path / "warm", [small], embedding={"provider": "none"})
    # measured in a fresh interpreter: in the full suite's process, what earlier tests left
    # (caches, the collector's state) made the same plan peak at 16.5 MiB against 7.7 alone
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE_PLAN, str(tmp_path)], capture_output=True, text=True,
        encoding="utf-8", cwd=Path(__file__).resolve().parent, timeout=300, check=True)
    result, peak, seconds = json.loads(measured.stdout)
    assert len(result["added"]) == counts["added"]
    reasons = by_reason(result["skipped"])
    assert reasons["gitignored"]["files"] == counts["gitignored"]
    assert reasons["vendored"]["folders"] == 1  # node_modules is never entered
    assert all(len(entry.get("examples", [])) <= ignores.EXAMPLES for entry in result["skipped"])
    assert 2**20 < peak < PEAK_BYTES, f"peak {peak / 2**20:.1f} MiB in {seconds:.1f} s"
