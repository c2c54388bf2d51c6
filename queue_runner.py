"""The reindex queue and the orchestrator process that drains it, one KB at a time.

    python queue_runner.py                  # drain the queue, then exit
    python queue_runner.py --sweep-all      # deferred entries too
    python queue_runner.py prune-orphans    # remove KB folders that lost their config.json

Files at the base folder (`--base-path`, else LINECITE_HOME, else the user data folder):
- `reindex-queue.json`: `{"entries": [{kb_id, scope, force, deferred, requested_at, running}]}`,
  rewritten atomically (temp file + os.replace) under `queue.lock`, so two writers never tear it.
- `orchestrator.lock`: the running orchestrator's PID lock (stale locks are taken over).
- `logs/queue_runner.log`: what a detached orchestrator printed.
`prune-orphans` prints `{"removed": [...], "failed": {kb: reason}}` and exits 1 on a failure.
Per KB: `index-status.json` and `.cancel`, which stops the running job at the next file
boundary. Every indexing run (queued, `python ingest.py`, the `ingest_file` tool) writes the
status file while it holds the KB's `.writer.lock`: `running` with its pid and progress at the
start, `last_run` (counts, errors, how it was started) at the end, under `.status.lock`.
`live_status` reads it against the lock's live holder, so a killed run shows `interrupted`.

Scopes nest: full ⊃ contextualization ⊃ embedding. A request for a KB that already waits in
the queue upgrades that entry to the wider scope instead of adding a second one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import atomic
import kb as kbmod
from pidlock import LockBusy, PidLock

# ---------------------------------------------------------------------------
QUEUE_FILE = "reindex-queue.json"
SCOPE_RANK = {scope: rank for rank, scope in enumerate(kbmod.SCOPES)}
STATUS_FILE = "index-status.json"
STATUS_LOCK = ".status.lock"  # per KB: one status writer at a time (read, change, replace)
WRITER_LOCK = ".writer.lock"  # per KB: held by the one process indexing it (ingest.Indexer)
CANCEL_FILE = ".cancel"
QUEUE_LOCK_WAIT = 10.0  # seconds to wait for another writer of the queue file
PROGRESS_EVERY = 0.5  # seconds between progress writes to index-status.json
CREATE_NEW_PROCESS_GROUP = 0x00000200  # Windows creation flags (the subprocess constants
CREATE_BREAKAWAY_FROM_JOB = 0x01000000  # exist only on Windows; values from the Win32 docs)
CREATE_NO_WINDOW = 0x08000000
# ---------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path, default: dict) -> dict:
    try:
        text = atomic.retry_in_use(lambda: path.read_text(encoding="utf-8"),
                                   f"could not read {path}")
        data = json.loads(text)
    except (FileNotFoundError, json.JSONDecodeError):
        return default
    return data if isinstance(data, dict) else default


# ---------------------------------------------------------------------------
# the queue file

@contextmanager
def _briefly_held(path: Path, purpose: str) -> Iterator[None]:
    """Hold a lock kept for milliseconds by each holder, waiting up to QUEUE_LOCK_WAIT for it."""
    lock = PidLock(path, purpose)
    deadline = time.monotonic() + QUEUE_LOCK_WAIT
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


@contextmanager
def locked_entries(base: Path) -> Iterator[list[dict]]:
    """The queue's entries, to read and change; written back atomically when the block ends."""
    with _briefly_held(base / "queue.lock", "a queue update"):
        entries = read_json(base / QUEUE_FILE, {"entries": []}).get("entries", [])
        yield entries
        atomic.write_json(base / QUEUE_FILE, {"entries": entries})


def entries(base: Path) -> list[dict]:
    return read_json(base / QUEUE_FILE, {"entries": []}).get("entries", [])


def position(queue: list[dict], kb_id: str) -> int | None:
    """1-based place of the KB's waiting entry (0: running now), None when not queued."""
    waiting = [e for e in queue if not e.get("running")]
    for number, entry in enumerate(waiting, 1):
        if entry["kb_id"] == kb_id:
            return number
    return 0 if any(e["kb_id"] == kb_id for e in queue) else None


def enqueue(base: Path, kb_id: str, scope: str, force: bool, deferred: bool) -> dict:
    """Queue a KB, or widen the entry already waiting for it; returns the entry and position."""
    if scope not in SCOPE_RANK:
        raise ValueError(f"scope must be one of {', '.join(SCOPE_RANK)}, not {scope!r}")
    with locked_entries(base) as queue:
        waiting = next((e for e in queue if e["kb_id"] == kb_id and not e.get("running")), None)
        if waiting is None:
            waiting = {"kb_id": kb_id, "scope": scope, "force": force, "deferred": deferred,
                       "requested_at": _now(), "running": False}
            queue.append(waiting)
            merged = False
        else:
            if SCOPE_RANK[scope] > SCOPE_RANK[waiting["scope"]]:
                waiting["scope"] = scope
            waiting["force"] = waiting["force"] or force
            waiting["deferred"] = waiting["deferred"] and deferred
            merged = True
        result = {**waiting, "position": position(queue, kb_id), "merged": merged}
    return result


def drop_waiting(base: Path, kb_id: str) -> bool:
    with locked_entries(base) as queue:
        before = len(queue)
        queue[:] = [e for e in queue if e["kb_id"] != kb_id or e.get("running")]
        return len(queue) != before


def _take_next(base: Path, sweep_all: bool) -> dict | None:
    """Mark the first runnable entry running (it stays queued until done, so a crash redoes it)."""
    with locked_entries(base) as queue:
        for entry in queue:
            if not entry.get("running") and (sweep_all or not entry.get("deferred")):
                entry["running"] = True
                return dict(entry)
    return None


def _finish(base: Path, entry: dict) -> None:
    with locked_entries(base) as queue:
        queue[:] = [e for e in queue if not (e.get("running") and e["kb_id"] == entry["kb_id"])]


def _requeue_interrupted(base: Path) -> None:
    """Entries a dead orchestrator left running wait again (only one orchestrator lives)."""
    with locked_entries(base) as queue:
        for entry in queue:
            entry["running"] = False


# ---------------------------------------------------------------------------
# per-KB status, cancel

def read_status(kb_folder: Path) -> dict:
    return read_json(kb_folder / STATUS_FILE, {"status": "idle"})


def update_status(kb_folder: Path, **fields) -> None:
    """Change some fields; under the status lock, so a writer never undoes another's change."""
    kb_folder.mkdir(parents=True, exist_ok=True)
    with _briefly_held(kb_folder / STATUS_LOCK, "a status update"):
        atomic.write_json(kb_folder / STATUS_FILE, {**read_status(kb_folder), **fields})


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:500]


class RunStatus:
    """One indexing run's record in the KB's status file. The run's writer-lock holder calls
    `start` once it holds the lock and `finish` once at the end, before letting the lock go;
    a run that never got the lock records only its `last_run`, leaving a live holder's own
    status alone."""

    def __init__(self, kb_folder: Path, started_by: str, scope: str | None = None,
                 force: bool = False):
        self.folder = kb_folder
        self.record = {"started_by": started_by, "pid": os.getpid(), "scope": scope,
                       "force": force, "started_at": _now()}
        self.started = self.finished = False
        self._written = 0.0  # monotonic time of the last progress write

    def start(self) -> None:
        self.record["started_at"] = _now()
        update_status(self.folder, status="running", progress={"current": 0, "total": 0,
                                                                "file": None}, **self.record)
        self.started = True

    def reporter(self, forward: Callable[[int, int, str], None] | None):
        """A progress callback that writes the status file (at most every PROGRESS_EVERY s)
        and passes each call on to `forward` (the MCP client's progress)."""

        def report(done: int, total: int, message: str) -> None:
            if forward is not None:
                forward(done, total, message)
            if self.started and (time.monotonic() - self._written >= PROGRESS_EVERY
                                 or done == total):
                self._written = time.monotonic()
                try:
                    update_status(self.folder, progress={"current": done, "total": total,
                                                         "file": message})
                except (OSError, LockBusy):  # progress is best effort: never stop the run
                    pass

        return report

    def finish(self, summary=None, error: BaseException | None = None) -> None:
        """Record how the run ended (once; later calls do nothing)."""
        if self.finished:
            return
        self.finished = True
        last = {**self.record, "ok": error is None, "finished_at": _now()}
        if summary is not None:
            last.update(cancelled=summary.cancelled, errors=summary.failed,
                        counts={k: getattr(summary, k) for k in ("indexed", "unchanged",
                                                                 "deleted", "embedded",
                                                                 "chunks", "pages")})
        if error is not None:
            last["error"] = _error_text(error)
        if not self.folder.is_dir():  # the KB is gone: nothing to record into
            return
        if self.started or PidLock(self.folder / WRITER_LOCK, "").holder() is None:
            update_status(self.folder, status="idle" if error is None else "failed",
                          progress=None, last_run=last)
        else:  # another process is indexing this KB: its status stays, ours is noted
            update_status(self.folder, last_run=last)


def live_status(base: Path, kb_id: str) -> dict:
    """The KB's indexing status as it is now, from the live holder of its writer lock and the
    queue, not from what a run last wrote: `running` (pid, started_by, progress) while any
    process indexes it, a CLI run included; `interrupted` when a run recorded `running` but
    its process is gone (killed, crashed); `queued`; else `idle` or `failed` (last run).
    `last_run` is the last finished run's record."""
    folder = base / kb_id
    recorded = read_status(folder)
    place = position(entries(base), kb_id)
    info = {"status": recorded.get("status", "idle"), "pid": None, "started_by": None,
            "started_at": None, "progress": None, "queue_position": place,
            "last_run": recorded.get("last_run")}
    same_run = {k: recorded.get(k) for k in ("pid", "started_by", "started_at", "progress")}
    holder = PidLock(folder / WRITER_LOCK, "").holder()
    if holder is not None:
        mine = recorded.get("status") == "running" and recorded.get("pid") == holder.get("pid")
        info.update(same_run if mine else {}, status="running", pid=holder.get("pid"),
                    purpose=holder.get("purpose"))
    elif place == 0 and (boss := orchestrator(base)) is not None:
        info.update(status="running", pid=boss.get("pid"), started_by="queue")  # starting
    elif recorded.get("status") == "running" or place == 0:
        info.update(same_run, status="interrupted", detail=(
            "the indexing run stopped before it finished (its process is gone); the next run "
            "completes it: start_reindex, or `python ingest.py --kb " + kb_id + "`"))
    elif place is not None:
        info["status"] = "queued"
    return info


def orchestrator(base: Path) -> dict | None:
    """The live orchestrator's lock record, or None."""
    return PidLock(base / "orchestrator.lock", "").holder()


def request_cancel(base: Path, kb_id: str) -> dict:
    """Drop the KB's waiting entry and ask a running job for it to stop at the next file."""
    dropped = drop_waiting(base, kb_id)
    running = orchestrator(base) is not None and any(
        e["kb_id"] == kb_id and e.get("running") for e in entries(base))
    if running:
        (base / kb_id / CANCEL_FILE).touch()
    return {"kb_id": kb_id, "dropped_waiting_entry": dropped, "stopping_running_job": running}


def detach_options(platform: str, breakaway: bool = True) -> dict:
    """Popen options that let the orchestrator outlive its caller, with no window.

    Windows: CREATE_NO_WINDOW gives it a console without a window, which the real interpreter
    that the venv's python.exe redirector starts inherits (DETACHED_PROCESS would give it no
    console at all, so that child opened a visible one, and closing it killed the reindex;
    Windows also ignores CREATE_NO_WINDOW beside DETACHED_PROCESS). CREATE_NEW_PROCESS_GROUP
    keeps the host's Ctrl+C away from it, and CREATE_BREAKAWAY_FROM_JOB takes it out of a host
    job that kills its members when the host closes.
    """
    if platform != "win32":
        return {"start_new_session": True}
    flags = CREATE_NO_WINDOW | CREATE_NEW_PROCESS_GROUP
    return {"creationflags": flags | CREATE_BREAKAWAY_FROM_JOB if breakaway else flags}


def spawn_detached(command: list[str], platform: str = sys.platform, popen=subprocess.Popen,
                   **kwargs) -> subprocess.Popen:
    """Start `command` detached; a job that forbids breakaway refuses CreateProcess with
    ERROR_ACCESS_DENIED, and then it starts inside the job (it still has no window)."""
    try:
        return popen(command, **kwargs, **detach_options(platform))
    except OSError:
        if platform != "win32":
            raise
        return popen(command, **kwargs, **detach_options(platform, breakaway=False))


def start_orchestrator(base: Path) -> dict:
    """Spawn a detached orchestrator unless one is alive; it outlives the caller."""
    holder = orchestrator(base)
    if holder is not None:
        return {"started": False, "pid": holder.get("pid")}
    log = base / "logs" / "queue_runner.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        proc = spawn_detached([sys.executable, str(Path(__file__).resolve()), "--base-path",
                               str(base)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                              cwd=Path(__file__).resolve().parent)
    return {"started": True, "pid": proc.pid}


# ---------------------------------------------------------------------------
# the orchestrator

def run_entry(base: Path, entry: dict) -> None:
    """Run one queued job. Whatever it raises ends as its recorded result (`failed`, with the
    reason); before, only five exception types did, and any other one killed the drain and
    left the status `running` for good (issue 14)."""
    import ingest

    folder = base / entry["kb_id"]
    cancel = folder / CANCEL_FILE
    cancel.unlink(missing_ok=True)
    run = RunStatus(folder, "queue", entry["scope"], entry["force"])
    try:
        kb = kbmod.load(base, entry["kb_id"])
        ingest.sync(kb, entry["scope"], entry["force"], should_stop=cancel.exists, run=run)
    except Exception as err:  # the job's failure, not the orchestrator's
        run.finish(error=err)
    finally:
        cancel.unlink(missing_ok=True)


def drain(base: Path, sweep_all: bool = False) -> int:
    """Run queued jobs until none is left; exit code 3 when another orchestrator runs."""
    lock = PidLock(base / "orchestrator.lock", "the reindex orchestrator")
    try:
        lock.acquire()
    except LockBusy as err:
        print(f"linecite: not starting: {err}", file=sys.stderr)
        return 3
    try:
        _requeue_interrupted(base)
        while (entry := _take_next(base, sweep_all)) is not None:
            print(f"linecite: {entry['scope']} reindex of {entry['kb_id']!r}", file=sys.stderr)
            try:
                run_entry(base, entry)
            except Exception as err:  # not even its result could be written
                print(f"linecite: reindex of {entry['kb_id']!r} failed and its status could "
                      f"not be recorded: {_error_text(err)}", file=sys.stderr)
            finally:
                _finish(base, entry)
    finally:
        lock.release()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Drain linecite's reindex queue.")
    parser.add_argument("command", nargs="?", choices=["drain", "prune-orphans"],
                        default="drain")
    parser.add_argument("--base-path", type=Path, default=None)
    parser.add_argument("--sweep-all", action="store_true", help="run deferred entries too")
    args = parser.parse_args(argv)
    base = args.base_path or kbmod.default_base_path()
    if args.command == "prune-orphans":
        result = kbmod.prune_orphans(base)
        for name, reason in result["failed"].items():
            print(f"linecite: could not prune {name!r}: {reason}", file=sys.stderr)
        print(json.dumps(result, ensure_ascii=False))
        return 1 if result["failed"] else 0
    return drain(base, args.sweep_all)


if __name__ == "__main__":
    sys.exit(main())
