"""Folders that keep themselves current: a running server watches each KB's sourcePaths and
queues a folder sync when files in them change.

Layer: orchestration, beside queue_runner.py (whose queue and orchestrator it feeds); server.py
starts it in its lifespan and library.py's get_index_info shows `status(kb_id)`.

One thread per watched folder runs `watchfiles` (native events: ReadDirectoryChangesW,
FSEvents, inotify; polling for network drives, for a KB whose config says `"watch": "poll"`,
and when native watching fails, e.g. at Linux's inotify limit). A ticker thread turns events
into jobs: a KB's changes are queued once no event came for QUIET seconds (a burst of saves
is one job) and every changed file's size and mtime held still for SETTLE seconds and it
opens for reading (a file being copied or saved is never indexed half; a FIFO or device is
never opened: sync reports it). Files are looked at with the lock let go, so a slow or stuck
file stops neither get_index_info nor the other KBs (issue 45). The job is a `full`
scope entry of the reindex queue, so the orchestrator's sync does the work: changed files
re-indexed, renamed and deleted ones dropped; a folder that is missing (a share offline) is
reported here and its sources are kept, as folder sync keeps them. The ticker re-reads
config.json files, so folders added to or removed from sourcePaths are followed; a folder
that starts being watched (at startup, added, back online) is compared with the index once
(folders.plan_sync) and what changed meanwhile is queued the same way.
Nothing is written but the queue; LINECITE_WATCH=0 turns watching off in a process.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import fulltext
import kb as kbmod
import queue_runner
from common import limits, safeopen
from common.run_status import now
from formats import reader_entry, supported
from sources import folders

# ---------------------------------------------------------------------------
WATCH_ENV = "LINECITE_WATCH"  # "0": this process watches no folder
START_DELAY = 1.0  # seconds after startup before watching starts: the handshake goes first
TICK = 0.25  # seconds between the ticker's looks at pending changes
QUIET = 1.0  # seconds with no new event in a KB before its changes are queued (debounce)
SETTLE = 1.0  # seconds a changed file's size and mtime must hold still before it is queued
MAX_HOLD = 120.0  # seconds a file still being written may hold back a KB's other changes
CONFIG_EVERY = 1.0  # seconds between looks at the KBs' config.json (and folders online)
MAX_FOLDERS = 64  # folders one server watches; more are reported, not watched
MAX_PENDING = 1000  # changed files tracked per KB; more are counted and synced all the same
POLL_DELAY_MS = 1000  # how often a polled folder is walked
EVENT_GROUP_MS = 200  # watchfiles gathers events this long into one batch
READY_WAIT_MS = 300  # watchfiles answers at least this often, so a set-up watch is seen
STOP_WAIT = 5.0  # seconds stop() waits for each thread
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "v9fs", "drvfs",
              "fuse.sshfs", "sshfs", "fuse.rclone", "davfs", "fuse.davfs2", "ncpfs",
              "glusterfs", "ceph", "fuse.s3fs"}  # where inotify misses other machines' writes
DRIVE_REMOTE = 4  # GetDriveTypeW's answer for a network drive
# ---------------------------------------------------------------------------


def mount_type(path: str, mounts: str) -> str | None:
    """The file system type of the mount holding `path`, from /proc/mounts text (the longest
    mount point that is `path` or a parent of it)."""
    best, kind = "", None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def on_network_drive(folder: Path) -> bool:
    """Whether native events would miss changes made by other machines: a UNC path or mapped
    network drive on Windows, an NFS/SMB/SSHFS/9p mount on Linux. macOS is not probed (use
    `"watch": "poll"` there for a share)."""
    if sys.platform == "win32":
        text = str(folder)
        if text.startswith("\\\\"):
            return True
        import ctypes

        return ctypes.windll.kernel32.GetDriveTypeW(folder.anchor) == DRIVE_REMOTE
    if sys.platform.startswith("linux"):
        try:
            mounts = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return mount_type(str(folder), mounts) in NETWORK_FS
    return False


class FolderWatch:
    """One KB folder watched on a thread of its own; events go to `report(kb_id, root, paths)`."""

    def __init__(self, kb_id: str, root: Path, polling: bool, report) -> None:
        self.kb_id, self.root, self.polling, self.report = kb_id, root, polling, report
        self.error: str | None = None  # why native watching failed (then it polls)
        self.stopping = threading.Event()
        self.ready = threading.Event()  # set once events are being caught
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"linecite-watch-{kb_id}")
        self.thread.start()

    def _run(self) -> None:
        import watchfiles

        logging.getLogger("watchfiles").setLevel(logging.WARNING)  # not a line per event
        while not self.stopping.is_set():
            try:
                for changes in watchfiles.watch(
                        self.root, stop_event=self.stopping, debounce=EVENT_GROUP_MS,
                        rust_timeout=READY_WAIT_MS, yield_on_timeout=True,
                        raise_interrupt=False, force_polling=self.polling,
                        poll_delay_ms=POLL_DELAY_MS, ignore_permission_denied=True):
                    self.ready.set()  # a first answer, even a timeout: the watch is set up
                    if changes:
                        self.report(self.kb_id, self.root, [(c.name, p) for c, p in changes])
                return
            except FileNotFoundError:
                return  # the folder went away: the ticker reports it and watches it again
            except Exception as err:  # noqa: BLE001 - a watch limit, a driver refusing
                if self.polling:
                    self.error = f"watching failed: {type(err).__name__}: {err}"
                    return
                self.error = f"native events failed ({err}); polling instead"
                self.polling = True

    @property
    def mode(self) -> str:
        return "polling" if self.polling else "native"

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(STOP_WAIT)


@dataclass
class Pending:
    """A changed path: its last (size, mtime) seen, and when that last changed."""

    stamp: tuple[int, int] | None
    changed: float
    first: float


Look = tuple[tuple[int, int], bool]  # a pending file's (size, mtime); whether it may be queued


@dataclass
class KBWatch:
    """What the watcher knows of one KB."""

    kb: kbmod.KnowledgeBase
    config_stamp: tuple | None = None
    roots: dict[Path, bool] = field(default_factory=dict)  # folder -> polled, from config.json
    folders: dict[Path, FolderWatch] = field(default_factory=dict)
    offline: dict[Path, str] = field(default_factory=dict)  # folder -> since when (ISO time)
    pending: dict[Path, Pending] = field(default_factory=dict)
    overflow: int = 0  # changed files past MAX_PENDING, not tracked one by one
    last_event: float = 0.0
    to_scan: bool = False  # compare the folders with the index at the next tick
    jobs_queued: int = 0
    last_queued_at: str | None = None
    last_queued_files: list[str] = field(default_factory=list)
    note: str | None = None  # a config.json that does not load, a failed scan or queueing


class Watcher:
    """Every watched KB of one base folder; `start()` begins after START_DELAY, `stop()` ends
    all threads. Safe to call `status` from any thread."""

    def __init__(self, base: Path, enabled: bool = True) -> None:
        self.base = base
        self.base_real = base.resolve()  # its own files are never a KB's documents
        self.enabled = enabled
        self.kbs: dict[str, KBWatch] = {}
        self.broken: dict[str, str] = {}  # KB id -> why its config.json never loaded
        self.refused: list[str] = []  # folders past MAX_FOLDERS
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ticker = threading.Thread(target=self._run, name="linecite-watcher", daemon=True)

    def start(self) -> Watcher:
        if self.enabled:
            self.ticker.start()
        return self

    def stop(self) -> None:
        """Stop the ticker and every folder thread (the server is shutting down)."""
        self.stopping.set()
        if self.ticker.is_alive():
            self.ticker.join(STOP_WAIT)
        with self.lock:
            watches = [w for state in self.kbs.values() for w in state.folders.values()]
            self.kbs = {}
        for watch in watches:
            watch.stop()

    # -- the ticker -----------------------------------------------------------------
    def _run(self) -> None:
        if self.stopping.wait(START_DELAY):
            return
        looked = 0.0
        while not self.stopping.is_set():
            if time.monotonic() - looked >= CONFIG_EVERY:
                looked = time.monotonic()
                self._guarded(self._follow_config)
            for kb_id in list(self.kbs):
                self._guarded(lambda k=kb_id: self._tick(k))
            self.stopping.wait(TICK)

    def _guarded(self, work) -> None:
        """Run one step; a failure is printed to stderr and the watcher goes on."""
        try:
            work()
        except Exception as err:  # noqa: BLE001 - one KB's trouble must not stop the rest
            print(f"linecite: folder watcher: {type(err).__name__}: {err}", file=sys.stderr)

    def _follow_config(self) -> None:
        """Watch what the KBs' config.json files ask for now: new KBs and folders start,
        removed ones stop, a folder that went missing is reported and one back is watched."""
        wanted = {}
        for kb_id in kbmod.list_ids(self.base):
            state = self.kbs.get(kb_id)
            stamp = kbmod.config_stamp(self.base / kb_id / "config.json")
            if state is not None and stamp == state.config_stamp:
                wanted[kb_id] = state
                continue
            try:
                kb = kbmod.load(self.base, kb_id)
            except (OSError, kbmod.ConfigError) as err:
                if state is not None:  # keep watching as before, and say why
                    state.note = f"config.json cannot be used ({err}); watching as before"
                    state.config_stamp = stamp
                    wanted[kb_id] = state
                else:
                    self.broken[kb_id] = f"config.json cannot be used ({err}): fix it"
                continue
            self.broken.pop(kb_id, None)
            if state is None:
                state = KBWatch(kb)
            state.kb, state.config_stamp, state.note = kb, stamp, None
            state.roots = self._roots(kb)
            wanted[kb_id] = state
        ended = []
        with self.lock:
            for kb_id in set(self.kbs) - set(wanted):
                ended += self._set_folders(self.kbs[kb_id], {})
            self.kbs = wanted
            budget, self.refused = MAX_FOLDERS, []
            for state in wanted.values():
                kept = dict(list(state.roots.items())[:max(budget, 0)])
                self.refused += [limits.path_text(r) for r in list(state.roots)[len(kept):]]
                budget -= len(kept)
                ended += self._set_folders(state, kept)
        for watch in ended:  # with the lock let go: a folder thread may be reporting
            watch.stop()

    @staticmethod
    def _roots(kb: kbmod.KnowledgeBase) -> dict[Path, bool]:
        """The KB's folders to watch, each with whether it is polled (looked up once per
        config.json: resolving a share's path may take a while)."""
        if kb.watch is False:
            return {}
        roots = dict.fromkeys(Path(p).expanduser().resolve() for p in kb.folder_paths)
        return {root: kb.watch == "poll" or on_network_drive(root) for root in roots}

    def _set_folders(self, state: KBWatch, roots: dict[Path, bool]) -> list[FolderWatch]:
        """Start folder threads so exactly `roots` are watched (or reported offline); returns
        the watches to stop (call with self.lock held, stop them after letting it go)."""
        ended = []
        for root in list(state.folders):
            if root not in roots or not root.is_dir() or \
                    state.folders[root].polling < roots[root]:
                ended.append(state.folders.pop(root))
        state.offline = {r: since for r, since in state.offline.items() if r in roots}
        for root, polling in roots.items():
            if root in state.folders:
                continue
            if not root.is_dir():
                state.offline.setdefault(root, now())
                continue
            state.offline.pop(root, None)
            state.folders[root] = FolderWatch(state.kb.id, root, polling, self._report)
            state.to_scan = True  # what changed while it was not watched
        return ended

    def _report(self, kb_id: str, root: Path, changes: list[tuple[str, str]]) -> None:
        """Events from a folder thread: the paths that may be documents join the KB's pending
        (sorted out before the lock is taken: that looks at each file)."""
        state = self.kbs.get(kb_id)
        if state is None:
            return
        paths = [Path(text) for _change, text in changes]
        paths = [p for p in paths if p != root and self._may_matter(state.kb, root, p)]
        at = time.monotonic()
        with self.lock:
            for path in paths:
                state.last_event = at
                if path in state.pending:
                    state.pending[path].changed = at
                elif len(state.pending) < MAX_PENDING:
                    state.pending[path] = Pending(None, at, at)
                else:
                    state.overflow += 1

    def _may_matter(self, kb: kbmod.KnowledgeBase, root: Path, path: Path) -> bool:
        """False for what folder sync never indexes: dot files and folders, Office lock files,
        the base folder's own files, and files no reader claims."""
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            return False
        if any(part.startswith((".", "~$")) for part in parts) or \
                path.is_relative_to(self.base_real):
            return False
        if path.is_dir():
            return True
        if path.exists():
            return supported(path, kb.text_extensions)
        suffix = path.suffix.lower()  # gone: a folder, or a file of a suffix a reader claims
        return not suffix or reader_entry(suffix, kb.text_extensions) is not None

    def _tick(self, kb_id: str) -> None:
        """Scan a KB when asked, then queue its changes once they are quiet and settled."""
        with self.lock:
            state = self.kbs.get(kb_id)
            if state is None:
                return
            waiting = any(not w.ready.is_set() and w.thread.is_alive()
                          for w in state.folders.values())
            scan = state.to_scan and not waiting  # compared once events are caught: none lost
            state.to_scan = state.to_scan and not scan
        if scan:
            self._scan(state)
        with self.lock:
            ended = self._drop_offline(state)
        for watch in ended:
            watch.stop()
        with self.lock:
            if not (state.pending or state.overflow) or \
                    time.monotonic() - state.last_event < QUIET:
                return
            paths = list(state.pending)
        looks = {path: _look(path) for path in paths}  # file I/O: never with the lock held
        with self.lock:
            at = time.monotonic()
            if at - state.last_event < QUIET or not self._settled(state, looks, at):
                return
            names = [limits.path_text(p) for p in list(state.pending)[:limits.MAX_LIST_ROWS]]
            state.pending, state.overflow = {}, 0
        self._queue(state, names)

    @staticmethod
    def _drop_offline(state: KBWatch) -> list[FolderWatch]:
        """Events under a folder that is gone now are dropped: a share that went offline is
        reported and kept, not synced as if every file were deleted. Returns the watches of
        the folders gone, to stop (call with self.lock held, stop them after letting it go)."""
        ended = [state.folders.pop(root) for root in list(state.folders) if not root.is_dir()]
        for watch in ended:
            state.offline[watch.root] = now()
        for path in list(state.pending):
            if any(path.is_relative_to(root) for root in state.offline):
                del state.pending[path]
        return ended

    @staticmethod
    def _settled(state: KBWatch, looks: dict[Path, Look | None], at: float) -> bool:
        """Whether every pending file has held its size and mtime for SETTLE seconds and may
        be queued (`looks`: what _look found, with the lock let go); a path pending since then
        waits for the next tick, and a file that never settles holds the KB back at most
        MAX_HOLD seconds."""
        ready = True
        for path, seen in state.pending.items():
            if path not in looks:
                ready = False
                continue
            if (look := looks[path]) is None:
                continue  # gone: a deletion, nothing to wait for
            stamp, opens = look
            if stamp != seen.stamp:
                seen.stamp, seen.changed = stamp, at
            if at - seen.first >= MAX_HOLD:
                continue
            if at - seen.changed < SETTLE or not opens:
                ready = False
        return ready

    def _scan(self, state: KBWatch) -> None:
        """Compare the KB's folders with its index (no model, no write): what changed while
        no one watched joins pending, so it is queued once settled."""
        kb = state.kb
        conn = fulltext.connect(kb.fulltext_path if kb.fulltext_path.exists() else Path(":memory:"),
                                readonly=kb.fulltext_path.exists())
        try:
            plan = folders.plan_sync(conn, kb)
        except Exception as err:  # noqa: BLE001 - a damaged index: get_index_info says so
            state.note = f"could not compare the folders with the index: {err}"
            return
        finally:
            conn.close()
        at = time.monotonic()
        with self.lock:
            for path, _name in [*plan.added, *plan.modified][:MAX_PENDING]:
                state.pending.setdefault(path, Pending(None, at, at))
            state.overflow += max(0, len(plan.added) + len(plan.modified) - MAX_PENDING)
            state.overflow += len(plan.deleted)
            if plan.added or plan.modified or plan.deleted:
                state.last_event = at - QUIET  # no burst to wait out: only the settling

    def _queue(self, state: KBWatch, names: list[str]) -> None:
        """Queue a `full` sync of the KB (it joins a waiting entry) and start the orchestrator."""
        try:
            queue_runner.enqueue(self.base, state.kb.id, "full", False, False)
            queue_runner.start_orchestrator(self.base)
        except Exception as err:  # noqa: BLE001 - a locked queue file: try again later
            with self.lock:
                state.note = f"could not queue the changes: {err}"
                state.to_scan = True
            return
        with self.lock:
            state.jobs_queued += 1
            state.last_queued_at, state.last_queued_files = now(), names

    # -- what get_index_info shows ----------------------------------------------------
    def status(self, kb_id: str) -> dict:
        """What is watched for this KB and what waits to be queued."""
        if not self.enabled:
            return {"enabled": False, "reason": f"{WATCH_ENV}=0 turns folder watching off in "
                                                "this server"}
        with self.lock:
            state = self.kbs.get(kb_id)
            if state is None and kb_id in self.broken:
                return {"enabled": False, "reason": self.broken[kb_id]}
            if state is None:  # before the first look at config.json, or after stop()
                running = not self.stopping.is_set()
                return {"enabled": running, "state": "starting" if running else "stopped"}
            return self._state_json(state)

    def _state_json(self, state: KBWatch) -> dict:
        kb = state.kb
        if kb.watch is False:
            return {"enabled": False, "reason": "config.json says \"watch\": false; set it "
                                                "to true to keep the folders current"}
        watched = [{"path": limits.path_text(root),
                    "state": _folder_state(w), "mode": w.mode,
                    **({"note": w.error} if w.error else {})} for root, w in state.folders.items()]
        offline = [{"path": limits.path_text(root), "state": "offline", "since": since,
                    "detail": "the folder is not reachable (a drive or share offline, or it "
                              "moved); its sources are kept, and it is watched again once it is "
                              "back"} for root, since in state.offline.items()]
        refused = [{"path": p, "state": "not-watched",
                    "detail": f"a server watches at most {MAX_FOLDERS} folders"}
                   for p in self.refused if Path(p) in state.roots]
        at = time.monotonic()
        writing = [limits.path_text(p) for p, seen in state.pending.items()
                   if seen.stamp is not None and at - seen.changed < SETTLE]
        info = {"enabled": True, "folders": watched + offline + refused,
                "waiting": {"files": [limits.path_text(p) for p in
                                      list(state.pending)[:limits.MAX_LIST_ROWS]],
                            "files_total": len(state.pending) + state.overflow,
                            "still_being_written": writing[:limits.MAX_LIST_ROWS]},
                "jobs_queued": state.jobs_queued, "last_queued_at": state.last_queued_at,
                "last_queued_files": state.last_queued_files}
        if not kb.folder_paths:
            info["note"] = "no sourcePaths folders: add folders to config.json to watch them"
        if state.note:
            info["note"] = state.note
        return info


def _folder_state(watch: FolderWatch) -> str:
    if not watch.thread.is_alive():
        return "failed"
    return "watching" if watch.ready.is_set() else "starting"


def _look(path: Path) -> Look | None:
    """What the ticker needs of a pending path, None when it is gone. Only a regular file is
    opened, to see it opens (_opens): a FIFO named like a document, or a link to one, would
    wait in open() for a writer for ever (issue 45); it and a device may be queued at once,
    sync reports them as not-a-regular-file without reading them."""
    try:
        info = path.stat()  # of the link's target, as sync reads it
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns), not stat.S_ISREG(info.st_mode) or _opens(path)


def _opens(path: Path) -> bool:
    """Whether the file opens for reading now: on Windows a program writing it without
    sharing reads (a copy in progress) makes this fail. Opened as every document is
    (safeopen: non-blocking, only a regular file), so a FIFO swapped in since stat is
    refused, not waited on, and looked at again next tick."""
    try:
        with safeopen.open_document(path):
            return True
    except OSError:
        return not path.exists()


def start(base: Path) -> Watcher:
    """The server's watcher, started (it begins watching after START_DELAY), unless
    LINECITE_WATCH=0."""
    return Watcher(base, os.environ.get(WATCH_ENV, "1") != "0").start()
