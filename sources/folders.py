"""Which files of a knowledge base's folders are documents, and what changed since the last run.

Folder sync's first half, with no model and no write: `discover` lists the documents under
the KB's folders (links that lead outside a folder, Office lock files, dot files and files
Windows hides are left out; links out, FIFOs and devices, files of unsupported formats,
counted by extension, and folders that cannot be listed are reported in `skipped`; what
ignores.py leaves out, gitignored, vendored, build output, generated and binary, is counted by
reason there too), names each
as its source (`<folder>/<relative path>` through limits.source_name, unique per KB by
construction), and `plan_sync` compares them with fulltext.sqlite3: added, modified (size and
mtime, then SHA-256), deleted (never a source under a folder that could not be listed), and
retried (unchanged files whose last read failed). `Naming` is the one naming rule, for a file
however it arrives (folder sync, `ingest.py FILE|FOLDER`, ingest_file). ingest.py
indexes what the plan says; `check_changes` shows the plan as it is. `file_sha256` is the one
file hasher (change tests here, the OCR and transcript caches).

Layer: pipeline: what a folder sync would do, above the config layer, ignores.py and extract.py.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import fulltext
from common import limits, paths
from index import states
from sources import ignores

if TYPE_CHECKING:
    import kb as kbmod

# ---------------------------------------------------------------------------
RETRY_STATES = (states.SOURCE_FAILED, states.SOURCE_NEEDS_ACTION)  # unreadable: tried every run
HIDDEN_ATTRIBUTES = 0x2 | 0x4  # FILE_ATTRIBUTE_HIDDEN | FILE_ATTRIBUTE_SYSTEM (Windows)
UNSUPPORTED_EXAMPLES = 3  # file names listed per unsupported extension (the count is whole)
# ---------------------------------------------------------------------------


def same_stat(row, stat: os.stat_result) -> bool:
    """Whether a file's size and mtime are those its source row recorded: then it is taken as
    unchanged without reading it (SHA-256 decides otherwise)."""
    return (row["size"], row["mtime"]) == (stat.st_size, stat.st_mtime)


def kb_folders(kb: kbmod.KnowledgeBase) -> list[Path]:
    """The KB's folders (sourcePaths that are not buckets), resolved, in their order (the order
    their names depend on)."""
    return [Path(p).expanduser().resolve() for p in kb.folder_paths]


class Naming:
    """The one rule for a file's source name, whichever way it arrives: a file under a
    followed folder is `<folder's prefix>/<relative path>`, as folder sync names it; any other
    file is its file name. `ingest_file` once named `docs/news.txt` `news.txt`, so the next
    sync deleted it and added it again under the other name, and its citations stopped
    resolving (issue 30). `folders`: resolved, the KB's sourcePaths first (see kb_folders),
    then folders indexed now; their prefixes come from folder_prefixes, in that order."""

    def __init__(self, folders: Iterable[Path]):
        self.prefixes = folder_prefixes(list(dict.fromkeys(folders)))

    @classmethod
    def of(cls, kb: kbmod.KnowledgeBase, targets: Iterable[Path] = ()) -> Naming:
        """The KB's naming, with the folders among `targets` (indexed now) named after its
        own: `ingest.py FOLDER` then follows that folder, and sync keeps its names."""
        return cls([*kb_folders(kb), *(t.resolve() for t in targets if t.is_dir())])

    def folder_prefix(self, folder: Path) -> str | None:
        """The prefix of the names of the files directly in `folder` (resolved): that of the
        first named folder holding it, with the path between; None outside them all."""
        for root, prefix in self.prefixes.items():
            if folder.is_relative_to(root):
                return "/".join([prefix, *folder.relative_to(root).parts])
        return None

    def name(self, file: Path) -> str:
        """The source name of one file (its folder resolved, its own name kept: a link is
        named as itself, as sync names it)."""
        folder = file.absolute().parent.resolve()
        prefix = self.folder_prefix(folder)
        if prefix is None:
            return limits.source_name(file.name)
        return _name(prefix, folder, folder / file.name)


@dataclass
class SyncPlan:
    """What a folder sync would do; `check_changes` shows it without doing it."""

    added: list[tuple[Path, str]] = field(default_factory=list)
    modified: list[tuple[Path, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[dict] = field(default_factory=list)  # links out, unlistable folders, ...
    # untouched files whose last read failed (a recording with no audio engine, a scan with
    # no OCR): a sync tries them again, but they are not changes (issue 30: each
    # check_changes listed them as `modified`)
    retried: list[tuple[Path, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"added": [name for _, name in self.added],
                "modified": [name for _, name in self.modified],
                "deleted": self.deleted, "unchanged": self.unchanged,
                "retried": [name for _, name in self.retried], "skipped": self.skipped}


def discover(targets: list[Path], source_name: str | None = None,
             skipped: list[dict] | None = None, unlisted: list[Path] | None = None,
             text_extensions: Collection[str] = (), gitignore: bool = True,
             screen: bool = True, naming: Naming | None = None) -> Iterator[tuple[Path, str]]:
    """(file, source name) for each file to index: a file as named, a folder's files recursively.

    A folder's files are named `<prefix>/<relative path>` so two folders' `README.md` differ;
    the prefix is the folder's name, made unique among `targets` (see folder_prefixes), or
    what `naming` (the KB's, see Naming) gives the folder and each file named as itself.
    Links that lead out of the folder are not followed; they go to `skipped`, and so do the
    folders that could not be listed, which also go to `unlisted`. Given `unlisted`, every
    target is a folder (a KB's sourcePaths): one that is missing is unavailable, not a file.
    `text_extensions`: the KB's textExtensions, which count as supported.
    A folder's .gitignore files are honoured unless `gitignore` is False, and its vendored,
    build, generated and binary files are left out (ignores.py; counted in `skipped`); with
    `screen` False the content rules (generated, binary) are left to the caller, who then
    reads only the files it will index (plan_sync). A file named as itself is never screened.
    """
    folders_only = unlisted is not None
    skipped = skipped if skipped is not None else []
    unlisted = unlisted if unlisted is not None else []
    roots = [t.resolve() for t in targets if folders_only or t.is_dir()]
    naming = naming or Naming(roots)
    done: set[Path] = set()
    for target in targets:
        if folders_only or target.is_dir():
            root = target.resolve()
            prefix = naming.folder_prefix(root)
            if root in done or prefix is None:  # the same folder named twice: its files once
                continue
            done.add(root)
            for path in _files_in(root, prefix, skipped, unlisted, text_extensions, gitignore,
                                  screen):
                name = _name(prefix, root, path)
                if len(name) <= limits.MAX_NAME_CHARS:
                    yield path, name
                else:  # read_range would refuse it: say so instead of making it
                    skipped.append({"path": limits.path_text(path), "reason": "name-too-long",
                                    "name": name[:limits.ECHO_CHARS] + "...",
                                    "detail": f"its source name would be {len(name):,} "
                                              f"characters, over the limit of "
                                              f"{limits.MAX_NAME_CHARS:,}; move it to a "
                                              "shorter path to index it"})
        else:
            yield target, source_name or naming.name(target)


def _name(prefix: str, root: Path, path: Path, tail: str = "") -> str:
    """The source name of `path` in the folder `root` named `prefix` (`tail`: "/" for a
    folder's name)."""
    return limits.source_name("/".join([prefix, *path.relative_to(root).parts]) + tail)


def folder_prefixes(roots: list[Path]) -> dict[Path, str]:
    """A source-name prefix per folder, unique by construction: its name, and for a folder
    whose name an earlier one already took, as many parent folders as it takes (`docs`,
    `y/docs`). Earlier means first in sourcePaths, so the prefixes stay the same from run to
    run and a folder added at the end never renames the files of one already indexed.
    Two `docs` folders once gave the same names: one file was never searchable and every
    sync re-indexed the other (issue 14)."""
    taken: list[str] = []
    prefixes: dict[Path, str] = {}
    for root in roots:
        parts = list(root.parts[1:]) or [root.anchor]
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[-depth:])
            if not any(prefix == t or prefix.startswith(t + "/") or t.startswith(prefix + "/")
                       for t in taken):
                break
        taken.append(prefix)
        prefixes[root] = prefix
    return prefixes


def _files_in(root: Path, prefix: str, skipped: list[dict], unlisted: list[Path],
              text_extensions: Collection[str], gitignore: bool, screen: bool) -> list[Path]:
    """The supported files under `root` (resolved) whose real path lies inside it: the rule
    ingest_file applies, so a link in a synced folder cannot serve /etc/passwd. Linked folders
    (symlinks, junctions) are never descended into: one leading out, or a loop, could reach any
    file, and one leading in only repeats files found where they are. A folder that cannot be
    listed goes to `unlisted` and `skipped`: os.walk dropped it silently, and sync then deleted
    the sources of an offline share or a locked folder as if its files were gone (issue 25).
    Folders and files that ignores.py leaves out (gitignored, vendored, build output; with
    `screen`, generated and binary) are counted by reason, not listed one by one."""
    import extract

    if not root.is_dir():
        unlisted.append(root)
        skipped.append({"path": limits.path_text(root), "name": _name(prefix, root, root, "/"),
                        "reason": "unavailable",
                        "detail": f"{limits.path_text(root)} is not reachable (a drive or share "
                                  "offline, or the folder moved); its sources are kept until it "
                                  "is back, or remove it from sourcePaths to drop them"})
        return []
    found: list[Path] = []
    unsupported: dict[str, list[str]] = {}  # extension -> files no extractor reads

    def unlistable(err: OSError) -> None:
        folder = Path(err.filename)
        unlisted.append(folder)
        skipped.append({"path": limits.path_text(folder),
                        "name": _name(prefix, root, folder, "/"),
                        "reason": "unlistable",
                        "detail": f"cannot list {limits.path_text(folder)} "
                                  f"({err.strerror or err}); the sources under it are kept "
                                  "until it lists again (fix its permissions, shorten its "
                                  "path or bring its drive online)"})

    notes: list[dict] = []  # ignore files too large to apply
    rules = {root: ignores.start(root, gitignore, notes)}  # folder -> the rules in force there
    left_out = ignores.Tally()
    for here, folders, files in os.walk(root, onerror=unlistable):
        here_rules = rules.pop(Path(here))
        folders.sort()  # walk order, and so the examples in `skipped`, the same on every run
        for name in list(folders):
            folder = Path(here, name)
            if _not_a_document(folder):
                folders.remove(name)
                continue
            real = _real(folder)
            if real is None or os.path.normcase(real) != os.path.normcase(folder):
                folders.remove(name)
                if real is not None:
                    _skip_if_outside(root, prefix, folder, real, skipped)
            elif reason := ignores.folder_reason(folder, here_rules):
                folders.remove(name)
                left_out.add(reason, _name(prefix, root, folder, "/"), folder=True)
            else:
                rules[folder] = here_rules.below(folder, notes)
        for name in sorted(files):
            path = Path(here, name)
            if _not_a_document(path):
                continue
            if here_rules.ignored(path, is_dir=False):
                left_out.add("gitignored", _name(prefix, root, path))
                continue
            if not extract.supported(path, text_extensions):
                unsupported.setdefault(path.suffix.lower() or "(none)", []).append(
                    _name(prefix, root, path))
                continue
            real = _real(path) if path.is_symlink() else path
            if real is None or _skip_if_outside(root, prefix, path, real, skipped):
                continue
            if real.is_file():
                if not (screen and _screened_out(prefix, root, path, left_out)):
                    found.append(path)
            elif real.exists():  # a FIFO or device would block or never end (issue 34)
                skipped.append({"path": limits.path_text(path), "name": _name(prefix, root, path),
                                "reason": "not-a-regular-file",
                                "detail": f"{limits.path_text(path)} is a device, pipe or "
                                          "socket, not a regular file; it is not indexed"})
    skipped += [{"reason": "unsupported-format", "extension": extension, "files": len(names),
                 "examples": sorted(names)[:UNSUPPORTED_EXAMPLES]}
                for extension, names in sorted(unsupported.items())]
    skipped += notes + left_out.entries()
    return sorted(found)


def _screened_out(prefix: str, root: Path, path: Path, left_out: ignores.Tally) -> bool:
    """Whether a found file's name or first bytes say it is generated or binary (counted in
    `left_out`)."""
    reason = ignores.content_reason(path)
    if reason is not None:
        left_out.add(reason, _name(prefix, root, path))
    return reason is not None


def _not_a_document(path: Path) -> bool:
    """Office's lock files (`~$report.docx`, a few bytes that parse as corrupt), dot files and
    folders (`.git`, `.DS_Store`), and what Windows marks hidden or system (thumbnail caches,
    desktop.ini): none is a document the user put there to be searched."""
    if path.name.startswith(("~$", ".")):
        return True
    try:
        attributes = getattr(path.lstat(), "st_file_attributes", 0)  # only Windows has them
    except OSError:
        return False
    return bool(attributes & HIDDEN_ATTRIBUTES)


def _real(path: Path) -> Path | None:
    """Where a path really is, links followed; None for a link loop."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop before Python 3.13
        return None


def _skip_if_outside(root: Path, prefix: str, path: Path, real: Path,
                     skipped: list[dict]) -> bool:
    """Report `path` in `skipped` when its real place `real` is outside `root`."""
    if real.is_relative_to(root):
        return False
    path_text, real_text = limits.path_text(path), limits.path_text(real)
    tail = "/" if real.is_dir() else ""
    skipped.append({"path": path_text, "name": _name(prefix, root, path, tail),
                    "reason": "outside-folder", "target": real_text,
                    "detail": f"{path_text} leads to {real_text}, outside "
                              f"{limits.path_text(root)}; it is not indexed (copy the file "
                              "into the folder to index it)"})
    return True


def _changed(row, path: Path) -> bool:
    """Whether a file differs from its indexed row: size and mtime first, SHA-256 to confirm.
    A file that vanished or cannot be read since it was found counts as changed, so
    index_file records why for that one source instead of the whole sync stopping."""
    try:
        if same_stat(row, path.stat()):
            return False
        return row["sha256"] != paths.file_sha256(path)
    except OSError:
        return True


def attachment_sources(sources: Iterable[tuple[str, str | None]]) -> set[str]:
    """The names, among (name, path) pairs, of sources made from a mail's attachments: named
    `<mail's name>/<file>` and recording the mail's own file. They have no file of their own,
    so they are never added, changed or deleted as files are."""
    paths = dict(sources)
    return {name for name, path in paths.items()
            if path and "/" in name and paths.get(name.rpartition("/")[0]) == path}


def plan_sync(conn, kb: kbmod.KnowledgeBase, force: bool = False) -> SyncPlan:
    """Compare the KB's folders with what is indexed; reads files' metadata, calls no model.
    Only a file to be indexed (added or modified) has its first bytes read for the content
    rules (ignores.content_reason): an unchanged one passed them when it was indexed. One that
    fails them now is not indexed, and its old source is deleted."""
    folders = kb_folders(kb)
    plan = SyncPlan()
    left_out = ignores.Tally()
    seen: set[str] = set()
    seen_paths: set[str] = set()  # os.path.normcase of every file found
    unlisted: list[Path] = []  # folders whose sources stay as they are
    for path, name in discover(folders, skipped=plan.skipped, unlisted=unlisted,
                               text_extensions=kb.text_extensions,
                               gitignore=kb.respect_gitignore, screen=False):
        seen.add(name)
        seen_paths.add(os.path.normcase(path))
        row = fulltext.source_row(conn, name)
        if row is not None and not (force or _changed(row, path)):
            if row["state"] in RETRY_STATES:
                plan.retried.append((path, name))
            else:
                plan.unchanged += 1
        elif reason := ignores.content_reason(path):
            left_out.add(reason, name)
            if row is not None:
                plan.deleted.append(name)
        else:
            (plan.added if row is None else plan.modified).append((path, name))
    plan.skipped += left_out.entries()
    escaped = {entry["name"]: Path(entry["target"]) for entry in plan.skipped
               if entry["reason"] == "outside-folder"}
    sources = fulltext.list_sources(conn)
    attachments = attachment_sources((s["name"], s["path"]) for s in sources)
    for source in sources:
        if source["name"] in attachments:
            continue  # a mail's attachment: it goes and comes with its mail (ingest.py)
        path = Path(source["path"] or "")
        if any(path.is_relative_to(folder) for folder in unlisted):
            continue
        inside = any(path.is_relative_to(folder) for folder in folders)
        gone = not path.exists() or os.path.normcase(path) in seen_paths
        if inside and source["name"] not in seen and gone:
            # gone, or renamed only by case: on Windows and macOS the old path still "exists",
            # and the file is found again under its new name
            plan.deleted.append(source["name"])
        elif any(source["name"].startswith(name) and path.is_relative_to(target)
                 for name, target in escaped.items()):
            plan.deleted.append(source["name"])  # indexed through a link before links were checked
    return plan
