"""Run status: a KB's `index-status.json`, the short locks its writers take, and RunStatus.

Layer: storage helpers, below the pipeline. ingest.py (every indexing run) and queue_runner.py
(the queue and orchestrator) both write a run's record here; neither imports the other for it.
Per KB: `index-status.json` (`running` with its pid and progress at the start, `last_run` at
the end) is rewritten atomically under `.status.lock`; `.writer.lock` is held by the one
process indexing the KB; `run-history.json` keeps the last HISTORY_RUNS runs' outcomes (the
web page's timeline, get_index_info's `recent_runs`), rewritten atomically under that lock.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from common import atomic, limits
from common.pidlock import LockBusy, PidLock

# ---------------------------------------------------------------------------
STATUS_FILE = "index-status.json"
STATUS_LOCK = ".status.lock"  # per KB: one status writer at a time (read, change, replace)
WRITER_LOCK = ".writer.lock"  # per KB: held by the one process indexing it (pipeline/indexer.py)
BRIEF_LOCK_WAIT = 10.0  # seconds to wait for another holder of a queue or status lock
PROGRESS_EVERY = 0.5  # seconds between progress writes to index-status.json
HISTORY_FILE = "run-history.json"
HISTORY_RUNS = 20  # finished runs kept per KB, oldest dropped first
HISTORY_FIELDS = ("started_by", "scope", "force", "started_at", "finished_at", "ok", "cancelled",
                  "counts", "errors_total", "error")  # a run's record without its error list
# ---------------------------------------------------------------------------


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path, default: dict) -> dict:
    try:
        text = atomic.retry_in_use(lambda: path.read_text(encoding="utf-8"),
                                   f"could not read {path}")
        data = json.loads(text)
    except (FileNotFoundError, json.JSONDecodeError):
        return default
    return data if isinstance(data, dict) else default


@contextmanager
def briefly_held(path: Path, purpose: str) -> Iterator[None]:
    """Hold a lock kept for milliseconds by each holder, waiting up to BRIEF_LOCK_WAIT for it."""
    lock = PidLock(path, purpose)
    deadline = time.monotonic() + BRIEF_LOCK_WAIT
    while True:
        try:
            lock.acquire()
            break
        except LockBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield
    finally:
        lock.release()


def read_status(kb_folder: Path) -> dict:
    return read_json(kb_folder / STATUS_FILE, {"status": "idle"})


def update_status(kb_folder: Path, **fields) -> None:
    """Change some fields; under the status lock, so a writer never undoes another's change."""
    kb_folder.mkdir(parents=True, exist_ok=True)
    with briefly_held(kb_folder / STATUS_LOCK, "a status update"):
        atomic.write_json(kb_folder / STATUS_FILE, {**read_status(kb_folder), **fields})


def read_history(kb_folder: Path) -> list[dict]:
    """The KB's last finished runs, oldest first (at most HISTORY_RUNS)."""
    runs = read_json(kb_folder / HISTORY_FILE, {}).get("runs")
    if not isinstance(runs, list):
        return []
    return [r for r in runs if isinstance(r, dict)][-HISTORY_RUNS:]


def add_to_history(kb_folder: Path, last_run: dict) -> None:
    """Append a finished run (its HISTORY_FIELDS), dropping the oldest past HISTORY_RUNS."""
    entry = {k: last_run[k] for k in HISTORY_FIELDS if k in last_run}
    with briefly_held(kb_folder / STATUS_LOCK, "a run history update"):
        runs = read_history(kb_folder) + [entry]
        atomic.write_json(kb_folder / HISTORY_FILE, {"runs": runs[-HISTORY_RUNS:]})


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:500]


class RunStatus:
    """One indexing run's record in the KB's status file. The run's writer-lock holder calls
    `start` once it holds the lock and `finish` once at the end, before letting the lock go;
    a run that never got the lock records only its `last_run`, leaving a live holder's own
    status alone; a queued job that never got it records nothing (it waits in the queue)."""

    def __init__(self, kb_folder: Path, started_by: str, scope: str | None = None,
                 force: bool = False):
        self.folder = kb_folder
        self.record = {"started_by": started_by, "pid": os.getpid(), "scope": scope,
                       "force": force, "started_at": now()}
        self.started = self.finished = False
        self._written = 0.0  # monotonic time of the last progress write
        self._pending: dict | None = None  # the latest progress not yet written
        self._timer: threading.Timer | None = None  # writes `_pending` when the bound allows
        self._guard = threading.Lock()  # one progress writer at a time: the run or the timer

    def start(self) -> None:
        self.record["started_at"] = now()
        update_status(self.folder, status="running", progress={"current": 0, "total": 0,
                                                                "file": None}, **self.record)
        self.started = True

    def reporter(self, forward: Callable[[int, int, str], None] | None):
        """A progress callback that writes the status file (at most every PROGRESS_EVERY s)
        and passes each call on to `forward` (the MCP client's progress). `part` is how far
        the file in hand is (pipeline.indexer's Indexer.index_all: OCR pages, a recording's
        seconds). A report the bound holds back is written when the interval ends, so the file
        shown as in hand is never more than PROGRESS_EVERY s old, however long the next one
        takes."""

        def report(done: int, total: int, message: str, part: dict | None = None) -> None:
            if forward is not None:
                forward(done, total, message)
            if self.started:
                self._offer({"current": done, "total": total, "file": message, "part": part},
                            at_once=done == total)

        return report

    def _offer(self, progress: dict, at_once: bool) -> None:
        with self._guard:
            self._pending = progress
            wait = PROGRESS_EVERY - (time.monotonic() - self._written)
            if at_once or (wait <= 0 and self._timer is None):  # else the timer writes it
                self._write_pending()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._guard:
            self._timer = None
            if not self.finished:
                self._write_pending()

    def _write_pending(self) -> None:
        """Write the latest progress held back, if any (the caller holds `_guard`)."""
        progress, self._pending = self._pending, None
        if progress is None:
            return
        self._written = time.monotonic()
        try:
            update_status(self.folder, progress=progress)
        except (OSError, LockBusy):  # progress is best effort: never stop the run
            pass

    def finish(self, summary=None, error: BaseException | None = None) -> None:
        """Record how the run ended (once; later calls do nothing)."""
        if self.finished or self.waits_in_queue(error):
            return
        with self._guard:  # no held-back progress is written after the end
            self.finished, self._pending = True, None
            if self._timer is not None:
                self._timer.cancel()
        last = {**self.record, "ok": error is None, "finished_at": now()}
        if summary is not None:  # errors bounded like every file list an answer carries
            errors = summary.failed + summary.needs_action  # each says its reason
            last.update(cancelled=summary.cancelled, errors=errors[:limits.MAX_LIST_ROWS],
                        errors_total=len(errors), counts=summary.counts())
        if error is not None:
            last["error"] = error_text(error)
        if not self.folder.is_dir():  # the KB is gone: nothing to record into
            return
        if self.started or PidLock(self.folder / WRITER_LOCK, "").holder() is None:
            update_status(self.folder, status="idle" if error is None else "failed",
                          progress=None, last_run=last)
        else:  # another process is indexing this KB: its status stays, ours is noted
            update_status(self.folder, last_run=last)
        try:
            add_to_history(self.folder, last)
        except (OSError, LockBusy):  # the timeline is a view: last_run above is the record
            pass

    def waits_in_queue(self, error: BaseException | None) -> bool:
        """A queued job that found the KB busy has no result yet: run_entry requeues it."""
        return (self.record["started_by"] == "queue" and not self.started
                and isinstance(error, LockBusy))
