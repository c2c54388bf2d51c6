"""The reindex queue and the orchestrator process that drains it, one KB at a time.

Layer: orchestration, above the pipeline (it runs ingest.sync); the per-KB status record
it shares with every indexing run lives below, in run_status.py.

    python queue_runner.py                  # drain the queue, then exit
    python queue_runner.py --sweep-all      # deferred entries too
    python queue_runner.py prune-orphans    # remove KB folders that lost their config.json

Files at the base folder (`--base-path`, else LINECITE_HOME, else the user data folder):
- `reindex-queue.json`: `{"entries": [{kb_id, scope, scopes, force, deferred, requested_at,
  running}]}` (a job that found the KB busy also has `waiting`, `busy_since`, `retry_at`),
  rewritten atomically (temp file + os.replace) under `queue.lock`, so two writers never tear it.
- `orchestrator.lock`: the running orchestrator's PID lock (stale locks are taken over).
- `logs/queue_runner.log`: what a detached orchestrator printed.
`prune-orphans` prints `{"removed": [...], "failed": {kb: reason}}` and exits 1 on a failure.
Per KB: `index-status.json` and `.cancel`, which stops the running job at the next file
boundary, or keeps a job taken from the queue from starting; it is made and cleared only under
`queue.lock` beside the entry's `running` flag, so a job never clears the cancel meant for it.
Every indexing run (queued, `python ingest.py`, the `ingest_file` tool) writes the
status file while it holds the KB's `.writer.lock`: `running` with its pid and progress at the
start, `last_run` (counts, the first MAX_LIST_ROWS errors and `errors_total`, how it was
started) at the end, under `.status.lock`. `live_status` reads it against the lock's live
holder, so a killed run shows `interrupted`.

A request for a KB that already waits in the queue joins that entry instead of adding a
second one, and the entry does what each request asked: `scopes` lists every scope asked
(`scope` names the widest), and one run does them all (a `full` sync re-embeds only what
changed, so `embedding` then `full` must still re-embed every chunk); `force` is kept if any
request forced. A job whose KB another process is writing (a CLI ingest) waits in the queue,
retried with back-off for up to BUSY_WAIT_MAX; the drain runs other KBs meanwhile. After the
drain lets its lock go it looks at the queue again: a request that came while it was about to
exit saw a live orchestrator and started none, so this drain runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import kb as kbmod
from common import atomic, paths, run_status
from common.commands import command
from common.pidlock import LockBusy, PidLock
from common.run_status import (
    WRITER_LOCK,
    RunStatus,
    briefly_held,
    error_text,
    now,
    read_json,
    read_status,
)

# ---------------------------------------------------------------------------
QUEUE_FILE = "reindex-queue.json"
SCOPE_RANK = {scope: rank for rank, scope in enumerate(kbmod.SCOPES)}
CANCEL_FILE = ".cancel"
CREATE_NEW_PROCESS_GROUP = 0x00000200  # Windows creation flags (the subprocess constants
CREATE_BREAKAWAY_FROM_JOB = 0x01000000  # exist only on Windows; values from the Win32 docs)
CREATE_NO_WINDOW = 0x08000000
BUSY_RETRY_FIRST = 2.0  # seconds before a job whose KB was busy is tried again, doubled ...
BUSY_RETRY_MAX = 60.0  # ... up to this: a finished CLI ingest is noticed within a minute
BUSY_WAIT_MAX = 12 * 3600.0  # seconds a job waits for a KB's writer before it is failed
# ---------------------------------------------------------------------------


# the queue file

@contextmanager
def locked_entries(base: Path) -> Iterator[list[dict]]:
    """The queue's entries, to read and change; written back atomically when the block ends."""
    with briefly_held(base / "queue.lock", "a queue update"):
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
    """Queue a KB, or join the entry already waiting for it (which then does what each request
    asked: every scope, forced if one was); returns the entry and its position."""
    if scope not in SCOPE_RANK:
        raise ValueError(f"scope must be one of {', '.join(SCOPE_RANK)}, not {scope!r}")
    with locked_entries(base) as queue:
        waiting = next((e for e in queue if e["kb_id"] == kb_id and not e.get("running")), None)
        if waiting is None:
            waiting = {"kb_id": kb_id, "scope": scope, "scopes": [scope], "force": force,
                       "deferred": deferred, "requested_at": now(), "running": False}
            queue.append(waiting)
            merged = False
        else:
            waiting["scopes"] = sorted({*scopes_of(waiting), scope}, key=SCOPE_RANK.__getitem__)
            waiting["scope"] = waiting["scopes"][-1]  # the widest, as the answer names it
            waiting["force"] = waiting["force"] or force
            waiting["deferred"] = waiting["deferred"] and deferred
            merged = True
        result = {**waiting, "position": position(queue, kb_id), "merged": merged}
    return result


def scopes_of(entry: dict) -> list[str]:
    """Every scope the entry's requests asked for (an entry queued before `scopes`: its one)."""
    return entry.get("scopes") or [entry["scope"]]


def _drop(queue: list[dict], kb_id: str, running: bool) -> bool:
    """Remove the KB's running (or waiting) entry from the queue in hand; True if one was."""
    before = len(queue)
    queue[:] = [e for e in queue if e["kb_id"] != kb_id or bool(e.get("running")) != running]
    return len(queue) != before


def _runnable(entry: dict, sweep_all: bool) -> bool:
    return not entry.get("running") and (sweep_all or not entry.get("deferred"))


def _take_next(base: Path, sweep_all: bool) -> dict | None:
    """Mark the first runnable entry that is due running (it stays queued until done, so a
    crash redoes it); a job waiting for a busy KB is due at its `retry_at`. Its KB's cancel
    file is cleared in the same locked step: request_cancel makes one only for a running
    entry, under this lock, so one found now is stale and one made later is for this job."""
    now = time.time()
    with locked_entries(base) as queue:
        for entry in queue:
            if _runnable(entry, sweep_all) and entry.get("retry_at", 0) <= now:
                (base / entry["kb_id"] / CANCEL_FILE).unlink(missing_ok=True)
                entry["running"] = True
                return dict(entry)
    return None


def _next_retry(base: Path, sweep_all: bool) -> float | None:
    """When the earliest job waiting for a busy KB is due (time.time()), None if none waits."""
    due = [e["retry_at"] for e in entries(base) if _runnable(e, sweep_all) and "retry_at" in e]
    return min(due, default=None)


def _requeue_busy(base: Path, entry: dict, holder: dict | None) -> None:
    """The job's KB is being written by another process: it waits again, tried after a
    back-off that doubles up to BUSY_RETRY_MAX; after BUSY_WAIT_MAX it is failed instead. A
    job cancelled since it was taken is dropped instead, recorded cancelled (looked at under
    the queue lock: a waiting entry's cancel would be cleared as stale when it is next taken)."""
    now = time.time()
    since = entry.get("busy_since", now)
    if now - since > BUSY_WAIT_MAX:
        _run_status(base, entry).finish(error=RuntimeError(
            f"the KB stayed busy for {BUSY_WAIT_MAX / 3600:g} h ({_busy_text(holder)}); the "
            "queued job was dropped: start_reindex again once that run is done"))
        _finish(base, entry)
        return
    delay = min(BUSY_RETRY_FIRST * 2 ** entry.get("busy_tries", 0), BUSY_RETRY_MAX)
    cancel = base / entry["kb_id"] / CANCEL_FILE
    with locked_entries(base) as queue:
        if cancelled := cancel.exists():
            _drop(queue, entry["kb_id"], running=True)
            cancel.unlink()
        else:
            for waiting in queue:
                if waiting.get("running") and waiting["kb_id"] == entry["kb_id"]:
                    waiting.update(running=False, waiting=_busy_text(holder), busy_since=since,
                                   busy_tries=entry.get("busy_tries", 0) + 1,
                                   retry_at=now + delay)
    if cancelled:
        _record_cancelled(base, entry)


def _busy_text(holder: dict | None) -> str:
    if holder is None:
        return "the KB's writer lock was busy"
    return f"KB is being written by PID {holder.get('pid')} ({holder.get('purpose')})"


def _finish(base: Path, entry: dict) -> None:
    with locked_entries(base) as queue:
        _drop(queue, entry["kb_id"], running=True)


def _requeue_interrupted(base: Path) -> None:
    """Entries a dead orchestrator left running wait again (only one orchestrator lives)."""
    with locked_entries(base) as queue:
        for entry in queue:
            entry["running"] = False


# ---------------------------------------------------------------------------
# per-KB status, cancel

def live_status(base: Path, kb_id: str) -> dict:
    """The KB's indexing status as it is now, from the live holder of its writer lock and the
    queue, not from what a run last wrote: `running` (pid, started_by, progress) while any
    process indexes it, a CLI run included; `interrupted` when a run recorded `running` but
    its process is gone (killed, crashed); `queued`; else `idle` or `failed` (last run).
    `waiting` says why a queued job has not run yet (another process writes the KB).
    `last_run` is the last finished run's record; `recent_runs` the last HISTORY_RUNS, newest
    first, without their error lists."""
    folder = base / kb_id
    recorded = read_status(folder)
    queue = entries(base)
    place = position(queue, kb_id)
    info = {"status": recorded.get("status", "idle"), "pid": None, "started_by": None,
            "started_at": None, "progress": None, "queue_position": place,
            "last_run": recorded.get("last_run"),
            "recent_runs": run_status.read_history(folder)[::-1]}
    if waiting := next((e["waiting"] for e in queue if e["kb_id"] == kb_id and "waiting" in e
                        and not e.get("running")), None):
        info["waiting"] = waiting
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
            "completes it: start_reindex, or `" + command("ingest", "--kb", kb_id) + "`"))
    elif place is not None:
        info["status"] = "queued"
    return info


def orchestrator(base: Path) -> dict | None:
    """The live orchestrator's lock record, or None."""
    return PidLock(base / "orchestrator.lock", "").holder()


def request_cancel(base: Path, kb_id: str) -> dict:
    """Drop the KB's waiting entry and ask a running job for it to stop at the next file, or
    not to start if it has not. The cancel file is made under the queue lock, which
    _take_next holds while it clears a stale one (issue 45: one made between taking the job
    and starting it was cleared by the job itself, while this answer said it was stopping)."""
    alive = orchestrator(base) is not None
    with locked_entries(base) as queue:
        dropped = _drop(queue, kb_id, running=False)
        running = alive and any(e["kb_id"] == kb_id for e in queue)  # only running ones left
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

def _run_status(base: Path, entry: dict) -> RunStatus:
    return RunStatus(base / entry["kb_id"], "queue", "+".join(scopes_of(entry)), entry["force"])


def _record_cancelled(base: Path, entry: dict) -> None:
    """The outcome of a job cancelled before it started: `cancelled`, nothing done."""
    from pipeline.indexer import Summary

    _run_status(base, entry).finish(Summary(entry["kb_id"], cancelled=True))


def run_entry(base: Path, entry: dict) -> bool:
    """Run one queued job, every scope it asks in one run; False when it never started
    because another process holds the KB's writer lock (a CLI ingest): it must wait, not be
    dropped. Whatever else it raises ends as its recorded result (`failed`, with the reason);
    before, only five exception types did, and any other one killed the drain and left the
    status `running` for good (issue 14). A job cancelled since it was taken never starts:
    it is recorded cancelled (issue 45)."""
    import ingest

    cancel = base / entry["kb_id"] / CANCEL_FILE
    if cancel.exists():
        _record_cancelled(base, entry)
        cancel.unlink()
        return True
    run = _run_status(base, entry)
    try:
        kb = kbmod.load(base, entry["kb_id"])
        ingest.sync(kb, scopes_of(entry), entry["force"], should_stop=cancel.exists, run=run)
    except Exception as err:  # the job's failure, not the orchestrator's
        if run.waits_in_queue(err):
            return False  # a cancel made meanwhile stays: _requeue_busy honours it
        run.finish(error=err)
    cancel.unlink(missing_ok=True)
    return True


def _run_one(base: Path, entry: dict) -> None:
    """Run a job taken from the queue, then drop it, or requeue it when its KB was busy."""
    print(f"linecite: {'+'.join(scopes_of(entry))} reindex of {entry['kb_id']!r}",
          file=sys.stderr)
    try:
        if not run_entry(base, entry):
            _requeue_busy(base, entry, PidLock(base / entry["kb_id"] / WRITER_LOCK, "").holder())
            return
    except Exception as err:  # not even its result could be written
        print(f"linecite: reindex of {entry['kb_id']!r} failed and its status could "
              f"not be recorded: {error_text(err)}", file=sys.stderr)
    _finish(base, entry)


def _sleep_until(when: float) -> None:
    """Sleep until `when`, or BUSY_RETRY_FIRST at most: a job queued meanwhile starts soon."""
    time.sleep(max(0.0, min(when - time.time(), BUSY_RETRY_FIRST)))


def _run_queued(base: Path, sweep_all: bool) -> None:
    """Run jobs until none is left, sleeping while the only ones left wait for busy KBs."""
    while True:
        entry = _take_next(base, sweep_all)
        if entry is not None:
            _run_one(base, entry)
        elif (due := _next_retry(base, sweep_all)) is not None:
            _sleep_until(due)
        else:
            return


def drain(base: Path, sweep_all: bool = False) -> int:
    """Run queued jobs until none is left; exit code 3 when another orchestrator runs.

    A request queued after the last look at the queue but before the lock is let go saw a
    live orchestrator and started none, so the queue is read again once the lock is free: a
    runnable entry there is drained too, by this process unless another took the lock."""
    lock = PidLock(base / "orchestrator.lock", "the reindex orchestrator")
    try:
        lock.acquire()
    except LockBusy as err:
        print(f"linecite: not starting: {err}", file=sys.stderr)
        return 3
    while True:
        try:
            _requeue_interrupted(base)
            _run_queued(base, sweep_all)
        finally:
            lock.release()
        if not any(_runnable(e, sweep_all) for e in entries(base)):
            return 0
        try:
            lock.acquire()
        except LockBusy:  # another orchestrator started meanwhile: it drains them
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Drain linecite's reindex queue.")
    parser.add_argument("command", nargs="?", choices=["drain", "prune-orphans"],
                        default="drain")
    parser.add_argument("--base-path", type=Path, default=None)
    parser.add_argument("--sweep-all", action="store_true", help="run deferred entries too")
    args = parser.parse_args(argv)
    base = args.base_path or paths.default_base_path()
    if args.command == "prune-orphans":
        result = kbmod.prune_orphans(base)
        for name, reason in result["failed"].items():
            print(f"linecite: could not prune {name!r}: {reason}", file=sys.stderr)
        print(json.dumps(result, ensure_ascii=False))
        return 1 if result["failed"] else 0
    return drain(base, args.sweep_all)


if __name__ == "__main__":
    sys.exit(main())
