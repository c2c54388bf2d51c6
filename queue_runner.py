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
Per KB: `index-status.json` (status, progress, last run) and `.cancel`, which stops the
running job at the next file boundary.

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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import kb as kbmod
from pidlock import LockBusy, PidLock

# ---------------------------------------------------------------------------
QUEUE_FILE = "reindex-queue.json"
SCOPE_RANK = {"embedding": 0, "contextualization": 1, "full": 2}
STATUS_FILE = "index-status.json"
CANCEL_FILE = ".cancel"
QUEUE_LOCK_WAIT = 10.0  # seconds to wait for another writer of the queue file
PROGRESS_EVERY = 0.5  # seconds between progress writes to index-status.json
REPLACE_TRIES = 10  # os.replace / read attempts while Windows reports the file in use
REPLACE_BACKOFF = 0.01  # seconds before the 2nd attempt, doubled each time (~4.5 s in all)
CREATE_NEW_PROCESS_GROUP = 0x00000200  # Windows creation flags (the subprocess constants
CREATE_BREAKAWAY_FROM_JOB = 0x01000000  # exist only on Windows; values from the Win32 docs)
CREATE_NO_WINDOW = 0x08000000
# ---------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def retry_in_use(action, what: str):
    """Run `action()`, again with backoff while Windows says the file is in use.

    Windows refuses to replace, rename or delete a file another process has open (Python opens
    files without FILE_SHARE_DELETE; Defender and indexers open them too); the holder lets go
    within milliseconds, so waiting is the fix. Elsewhere a PermissionError means real
    permissions: the same tries cost seconds before the clear error, once.
    """
    delay = REPLACE_BACKOFF
    for attempt in range(REPLACE_TRIES):
        try:
            return action()
        except PermissionError as err:
            if attempt == REPLACE_TRIES - 1:
                raise PermissionError(f"{what}: the file stayed in use by another process "
                                      f"({err}); close what holds it and try again") from err
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    return None


def write_json_atomic(path: Path, data: dict) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    try:
        retry_in_use(lambda: os.replace(temp, path), f"could not update {path}")
    except OSError:
        temp.unlink(missing_ok=True)
        raise


def read_json(path: Path, default: dict) -> dict:
    try:
        text = retry_in_use(lambda: path.read_text(encoding="utf-8"), f"could not read {path}")
        data = json.loads(text)
    except (FileNotFoundError, json.JSONDecodeError):
        return default
    return data if isinstance(data, dict) else default


# ---------------------------------------------------------------------------
# the queue file

@contextmanager
def locked_entries(base: Path) -> Iterator[list[dict]]:
    """The queue's entries, to read and change; written back atomically when the block ends."""
    lock = PidLock(base / "queue.lock", "a queue update")
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
        entries = read_json(base / QUEUE_FILE, {"entries": []}).get("entries", [])
        yield entries
        write_json_atomic(base / QUEUE_FILE, {"entries": entries})
    finally:
        lock.release()


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
    write_json_atomic(kb_folder / STATUS_FILE, {**read_status(kb_folder), **fields})


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
    import ingest

    folder = base / entry["kb_id"]
    cancel = folder / CANCEL_FILE
    cancel.unlink(missing_ok=True)
    update_status(folder, status="running", started_at=_now(), scope=entry["scope"],
                  progress={"current": 0, "total": 0, "file": None})
    last_write = 0.0

    def report(done: int, total: int, message: str) -> None:
        nonlocal last_write
        if time.monotonic() - last_write >= PROGRESS_EVERY or done == total:
            last_write = time.monotonic()
            update_status(folder, progress={"current": done, "total": total, "file": message})

    run = {"scope": entry["scope"], "force": entry["force"], "started_at": read_status(folder)
           .get("started_at")}
    try:
        kb = kbmod.load(base, entry["kb_id"])
        summary = ingest.sync(kb, entry["scope"], entry["force"], report=report,
                              should_stop=cancel.exists)
        run.update(ok=True, cancelled=summary.cancelled,
                   counts={k: getattr(summary, k) for k in ("indexed", "unchanged", "deleted",
                                                            "embedded", "chunks", "pages")},
                   errors=summary.failed)
    except (kbmod.ConfigError, LockBusy, ingest.EmbedderUnavailable, FileNotFoundError,
            ValueError) as err:
        run.update(ok=False, error=str(err))
    cancel.unlink(missing_ok=True)
    update_status(folder, status="idle", progress=None, last_run={**run, "finished_at": _now()})


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
