"""Windows behaviour, driven here with injected platforms, fake profile trees and files that
refuse to move (issue 18), and the PID lock under many contenders (issue 14).

What runs for real: the lock's contenders are separate processes (multiprocessing spawn), the
orchestrator's detached start is a real process on POSIX, the config merges write real files.
What cannot run off Windows (the creation flags taking effect, a file held open refusing
os.replace) is pinned by the flag values and the retry paths, and by the Windows-only test at
the end, which runs where pytest runs on Windows.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kb as kbmod
import queue_runner
from common import atomic, paths, pidlock, run_status
from common.pidlock import LockBusy, PidLock
from setup import mcp_config

DEAD = {"pid": 2**22 + 17, "started": 1.0, "purpose": "a crashed run"}  # no such process


def fail_first(monkeypatch, module, name: str, times: int, error=PermissionError):
    """Make module.name raise `error` on its first `times` calls (what Windows does while
    another process holds the file), then behave; returns the list of calls."""
    real, calls = getattr(module, name), []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise error(13, "The process cannot access the file because it is being used")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, flaky)
    return calls


# ---------------------------------------------------------------------------
# Claude Desktop's config: the MSIX package folder(s) and the classic one

def profile(tmp_path: Path, packages: tuple[str, ...] = (), classic: bool = False) -> dict:
    """A fake Windows profile: LOCALAPPDATA with Claude package folders, APPDATA."""
    local, roaming = tmp_path / "AppData" / "Local", tmp_path / "AppData" / "Roaming"
    for name in packages:
        (local / "Packages" / name / "LocalCache" / "Roaming" / "Claude").mkdir(parents=True)
    (local / "Packages" / "Microsoft.WindowsTerminal_8wekyb3d8bbwe").mkdir(parents=True)
    roaming.mkdir(parents=True)
    if classic:
        (roaming / "Claude").mkdir()
    return {"LOCALAPPDATA": str(local), "APPDATA": str(roaming), "USERPROFILE": str(tmp_path)}


def msix_config(env: dict, package: str) -> Path:
    return (Path(env["LOCALAPPDATA"]) / "Packages" / package / "LocalCache" / "Roaming" /
            "Claude" / mcp_config.CONFIG_NAME)


def test_claude_config_paths_follow_what_is_installed(tmp_path):
    classic_only = profile(tmp_path / "a", classic=True)
    assert mcp_config.claude_config_paths(classic_only, "win32") == [
        Path(classic_only["APPDATA"]) / "Claude" / mcp_config.CONFIG_NAME]
    # nothing installed yet: the classic path, which a later unpackaged install reads
    nothing = profile(tmp_path / "b")
    assert mcp_config.claude_config_paths(nothing, "win32") == [
        Path(nothing["APPDATA"]) / "Claude" / mcp_config.CONFIG_NAME]
    # regression (issue 18): an MSIX install reads only its package's file
    msix = profile(tmp_path / "c", packages=("Claude_pzs8sxrjxfjjc",))
    assert mcp_config.claude_config_paths(msix, "win32") == [
        msix_config(msix, "Claude_pzs8sxrjxfjjc")]
    both = profile(tmp_path / "d", packages=("Claude_pzs8sxrjxfjjc", "Claude_other"),
                   classic=True)
    assert mcp_config.claude_config_paths(both, "win32") == [
        msix_config(both, "Claude_other"), msix_config(both, "Claude_pzs8sxrjxfjjc"),
        Path(both["APPDATA"]) / "Claude" / mcp_config.CONFIG_NAME]


def test_configure_writes_every_file_claude_reads_keeping_other_servers(tmp_path, monkeypatch,
                                                                        capsys):
    env = profile(tmp_path, packages=("Claude_pzs8sxrjxfjjc",), classic=True)
    home = tmp_path / "Jérôme 김" / ".linecite"
    monkeypatch.setenv("LINECITE_HOME", str(home))
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path / "tessdata"))
    monkeypatch.delenv("LINECITE_WHISPER_MODEL")  # conftest's test model: not in this entry
    msix = msix_config(env, "Claude_pzs8sxrjxfjjc")
    other = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"]}
    msix.write_text(json.dumps({"mcpServers": {"filesystem": other}}), encoding="utf-8-sig")
    paths = mcp_config.claude_config_paths(env, "win32")
    assert mcp_config.write_all_claude(paths) == 0
    expected = {"command": sys.executable, "args": [str(mcp_config.HERE / "server.py")],
                "env": {"LINECITE_HOME": str(home),
                        "TESSDATA_PREFIX": str(tmp_path / "tessdata")}}
    msix_json = json.loads(msix.read_text(encoding="utf-8"))
    assert msix_json["mcpServers"] == {"filesystem": other, "linecite": expected}
    classic = json.loads(paths[1].read_text(encoding="utf-8"))  # created: the folder existed
    assert classic["mcpServers"] == {"linecite": expected}
    assert len(list(msix.parent.glob("*.bak-*"))) == 1  # backed up before the change
    assert not list(paths[1].parent.glob("*.bak-*"))  # nothing to back up there
    out = capsys.readouterr().out
    assert f"Wrote linecite into {msix} (kept: filesystem)" in out
    assert "tray icon" in out or sys.platform != "win32"
    assert "tray icon" in mcp_config.quit_hint("win32")


def test_info_is_ascii_json_that_round_trips_non_ascii_paths(tmp_path):
    """Regression (issue 18): PowerShell decoded Python's output in the OEM code page, so a
    user name like Jérôme or 김 came back garbled; the installer now reads ASCII JSON."""
    home = tmp_path / "Jérôme" / "김민준" / ".linecite"
    env = {**os.environ, "LINECITE_HOME": str(home), "PYTHONIOENCODING": "cp437:strict"}
    out = subprocess.run([sys.executable, str(mcp_config.HERE / "cli.py"), "host-config", "--info"],
                         env=env, capture_output=True, check=True).stdout
    assert out.isascii()
    assert json.loads(out)["base"] == str(home)


# ---------------------------------------------------------------------------
# the base folder: outside AppData on Windows, the old one moved once

def test_windows_base_folder_is_outside_appdata(tmp_path):
    env = profile(tmp_path / "Jérôme")
    base = paths.default_base_path(env, "win32")
    assert base == tmp_path / "Jérôme" / ".linecite"
    assert not str(base).startswith((env["LOCALAPPDATA"], env["APPDATA"]))
    assert paths.default_base_path({**env, "LINECITE_HOME": "~/kbs"}, "win32") == \
        Path.home() / "kbs"
    assert paths.default_base_path({"XDG_DATA_HOME": str(tmp_path)}, "linux") == \
        tmp_path / "linecite"


def legacy_kb(local: Path, kb_id: str) -> None:
    folder = local / "linecite" / kb_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"id": kb_id}), encoding="utf-8")


def test_old_base_folder_moves_once_with_a_message(tmp_path):
    env = profile(tmp_path, packages=("Claude_pzs8sxrjxfjjc",))
    local = Path(env["LOCALAPPDATA"])
    legacy_kb(local, "manuals")
    sandboxed = local / "Packages" / "Claude_pzs8sxrjxfjjc" / "LocalCache" / "Local"
    legacy_kb(sandboxed, "private")
    message = paths.move_legacy_base(env, "win32")
    new = tmp_path / ".linecite"
    assert message.startswith(f"linecite: moved the base folder {local / 'linecite'} to {new}")
    assert str(sandboxed / "linecite") in message  # the sandbox's copy is named, not merged
    assert kbmod.list_ids(new) == ["manuals"] and not (local / "linecite").exists()
    # once: the old folder is gone now; only the sandbox copy is left, and the new one exists
    again = paths.move_legacy_base(env, "win32")
    assert "still there beside the new one" in again and kbmod.list_ids(new) == ["manuals"]
    assert paths.move_legacy_base(env, "linux") is None
    assert paths.move_legacy_base({**env, "LINECITE_HOME": str(tmp_path / "x")}, "win32") is None


def test_a_refused_move_changes_nothing_and_says_what_to_do(tmp_path, monkeypatch):
    env = profile(tmp_path)
    legacy_kb(Path(env["LOCALAPPDATA"]), "manuals")

    def held(*_args):  # what Windows answers while Claude's server holds fulltext.sqlite3
        raise PermissionError(32, "The process cannot access the file")

    monkeypatch.setattr(kbmod.shutil, "move", held)
    with pytest.raises(OSError, match="quit Claude Desktop from its tray icon"):
        paths.move_legacy_base(env, "win32")
    assert kbmod.list_ids(Path(env["LOCALAPPDATA"]) / "linecite") == ["manuals"]


# ---------------------------------------------------------------------------
# KB ids Windows cannot hold

@pytest.mark.parametrize("kb_id", ["CON", "con", "Nul", "PRN.txt", "aux.tar.gz", "COM1", "lpt9",
                                   "COM1.json"])
def test_reserved_device_names_are_refused(kb_id):
    with pytest.raises(kbmod.ConfigError, match="device name Windows reserves"):
        kbmod.check_kb_id(kb_id)


def test_names_near_reserved_ones_are_fine_and_trailing_dots_are_not():
    for kb_id in ("console", "COM10", "LPT0", "auxiliary", "nul1", "con-notes"):
        assert kbmod.check_kb_id(kb_id) == kb_id
    with pytest.raises(kbmod.ConfigError, match="ends with a dot or a space"):
        kbmod.check_kb_id("notes.")


def test_an_id_differing_only_by_case_is_refused_at_creation(tmp_path):
    kbmod.open_or_create(tmp_path, "Manuals")
    with pytest.raises(kbmod.ConfigError, match="differs only by case from the existing "
                                                "knowledge base 'Manuals'"):
        kbmod.open_or_create(tmp_path, "manuals")
    assert kbmod.list_ids(tmp_path) == ["Manuals"]  # no second folder on a case-sensitive disk
    assert kbmod.open_or_create(tmp_path, "Manuals").id == "Manuals"


# ---------------------------------------------------------------------------
# the orchestrator's start: no window, out of the host's job, never DETACHED_PROCESS

def test_windows_creation_flags():
    flags = queue_runner.detach_options("win32")["creationflags"]
    assert flags == 0x08000000 | 0x00000200 | 0x01000000  # NO_WINDOW|NEW_GROUP|BREAKAWAY
    assert not flags & 0x00000008  # regression (issue 18): DETACHED_PROCESS opened a console
    assert queue_runner.detach_options("win32", breakaway=False) == {
        "creationflags": 0x08000000 | 0x00000200}
    if sys.platform == "win32":  # the module's values are Windows' own
        assert flags == (subprocess.CREATE_NO_WINDOW | subprocess.CREATE_NEW_PROCESS_GROUP
                         | subprocess.CREATE_BREAKAWAY_FROM_JOB)
    assert queue_runner.detach_options("linux") == {"start_new_session": True}


def test_a_refused_breakaway_starts_it_inside_the_job():
    calls = []

    def popen(command, **kwargs):  # CreateProcess in a job without breakaway rights
        calls.append(kwargs["creationflags"])
        if kwargs["creationflags"] & queue_runner.CREATE_BREAKAWAY_FROM_JOB:
            raise PermissionError(5, "Access is denied")
        return "started"

    assert queue_runner.spawn_detached(["x"], "win32", popen) == "started"
    assert calls == [0x09000200, 0x08000200]
    with pytest.raises(FileNotFoundError):  # elsewhere an OSError is not retried
        queue_runner.spawn_detached(["/no/such/program"], "linux")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX sessions")
def test_the_detached_orchestrator_leads_its_own_session(tmp_path):
    out = tmp_path / "sid"
    code = "import os, sys; open(sys.argv[1], 'w').write(f'{os.getsid(0)} {os.getpid()}')"
    proc = queue_runner.spawn_detached([sys.executable, "-c", code, str(out)])
    assert proc.wait(timeout=30) == 0
    sid, pid = out.read_text().split()
    assert sid == pid != str(os.getsid(0))


# ---------------------------------------------------------------------------
# files Windows will not let go of

def test_status_replace_retries_while_the_file_is_in_use(tmp_path, monkeypatch):
    calls = fail_first(monkeypatch, run_status.os, "replace", 2)
    run_status.update_status(tmp_path, status="running")
    assert len(calls) == 3 and run_status.read_status(tmp_path)["status"] == "running"


def test_a_file_in_use_for_good_fails_clearly_and_keeps_the_old_one(tmp_path, monkeypatch):
    run_status.update_status(tmp_path, status="idle")
    monkeypatch.setattr(atomic, "REPLACE_TRIES", 3)
    fail_first(monkeypatch, run_status.os, "replace", 99)
    with pytest.raises(PermissionError, match="stayed in use by another process"):
        run_status.update_status(tmp_path, status="running")
    assert run_status.read_status(tmp_path)["status"] == "idle"
    assert not list(tmp_path.glob("*.tmp"))


def test_queue_read_retries_while_the_file_is_in_use(tmp_path, monkeypatch):
    queue_runner.enqueue(tmp_path, "a", "full", False, False)
    calls = fail_first(monkeypatch, Path, "read_text", 2)
    assert [e["kb_id"] for e in queue_runner.entries(tmp_path)] == ["a"]
    assert len(calls) == 3


def test_a_queue_lock_that_cannot_be_deleted_does_not_block_later_updates(tmp_path,
                                                                          monkeypatch):
    """Regression (issue 18): release() could not delete queue.lock on Windows, which kept a
    live PID, so every later queue update waited 10 s and failed until a restart."""
    monkeypatch.setattr("common.pidlock.RELEASE_TRIES", 2)
    real_rename = os.rename

    def rename(src, dst):
        if str(src).endswith("queue.lock"):  # held open by a scanner: cannot be moved
            raise PermissionError(32, "The process cannot access the file")
        return real_rename(src, dst)

    monkeypatch.setattr("common.pidlock.os.rename", rename)
    queue_runner.enqueue(tmp_path, "a", "full", False, False)
    assert json.loads((tmp_path / "queue.lock").read_text(encoding="utf-8"))["released"]
    monkeypatch.setattr("common.pidlock.os.rename", real_rename)
    start = time.monotonic()
    queue_runner.enqueue(tmp_path, "b", "full", False, False)
    assert time.monotonic() - start < 2
    assert [e["kb_id"] for e in queue_runner.entries(tmp_path)] == ["a", "b"]
    assert not (tmp_path / "queue.lock").exists()


def test_release_retries_a_rename_refused_for_a_moment(tmp_path, monkeypatch):
    lock = PidLock(tmp_path / "x.lock", "test")
    lock.acquire()
    calls = fail_first(monkeypatch, pidlock.os, "rename", 2)
    lock.release()
    assert len(calls) == 3 and list(tmp_path.iterdir()) == []


def orphan(base: Path, name: str) -> Path:
    folder = base / name
    (folder / "chroma").mkdir(parents=True)
    (folder / "chroma" / "data.bin").write_bytes(b"x")
    return folder


def test_prune_orphans_reports_a_held_folder_and_goes_on(tmp_path, monkeypatch):
    for name in ("a", "held", "z"):
        orphan(tmp_path, name)
    real_rename = Path.rename

    def rename(self, target):  # a server holds held/chroma/data.bin: Windows refuses
        if self.name == "held":
            raise PermissionError(32, "The process cannot access the file")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    result = kbmod.prune_orphans(tmp_path)
    assert result["removed"] == ["a", "z"]
    assert list(result["failed"]) == ["held"] and "stop the linecite server" in \
        result["failed"]["held"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held"]  # whole, not half-deleted
    assert (tmp_path / "held" / "chroma" / "data.bin").exists()


def test_prune_orphans_retries_a_delete_and_finishes_a_later_run(tmp_path, monkeypatch):
    orphan(tmp_path, "slow")
    fail_first(monkeypatch, kbmod.shutil, "rmtree", 2, OSError)
    assert kbmod.prune_orphans(tmp_path) == {"removed": ["slow"], "failed": {}}
    orphan(tmp_path, "stuck")
    monkeypatch.setattr(kbmod, "PRUNE_TRIES", 2)
    fail_first(monkeypatch, kbmod.shutil, "rmtree", 2, OSError)
    result = kbmod.prune_orphans(tmp_path)
    assert result["removed"] == [] and "delete it by hand" in result["failed"]["stuck"]
    [aside] = tmp_path.iterdir()
    assert aside.name.startswith(kbmod.PRUNING_PREFIX + "stuck-")  # out of the KB list
    assert kbmod.prune_orphans(tmp_path) == {"removed": ["stuck"], "failed": {}}
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# the PID lock: atomic takeover of a stale lock

def slowed(action):
    """`action` after a random pause: widens the gap between judging a lock and acting on it,
    where two contenders used to interleave (they would, rarely, on their own)."""
    import random

    def later(*args, **kwargs):
        time.sleep(random.uniform(0, 0.03))
        return action(*args, **kwargs)

    return later


def contend(path: str, start, done, results) -> None:
    """One contender: take the lock once; a winner holds it until every contender has tried."""
    os.unlink, os.rename = slowed(os.unlink), slowed(os.rename)  # this process only
    lock = PidLock(Path(path), "a contender")
    start.wait(timeout=120)  # a barrier: every contender is ready, then all go at once
    try:
        lock.acquire()
    except LockBusy:
        results.put("busy")
        return
    results.put("held")
    done.wait(timeout=120)
    lock.release()


@pytest.mark.slow  # ~25 s: two dozen spawned interpreters
@pytest.mark.parametrize("stale", [DEAD, None], ids=["dead-holder", "empty-old-file"])
def test_exactly_one_of_many_contenders_takes_a_stale_lock(tmp_path, stale):
    """Regression (issue 14): takeover was unlink-then-create, so two contenders that both
    judged the lock stale could delete each other's fresh lock and both hold it."""
    ctx = multiprocessing.get_context("spawn")
    contenders = 12
    for round_ in range(2):
        path = tmp_path / f"round{round_}.lock"
        path.write_text(json.dumps(stale) if stale else "", encoding="utf-8")
        if stale is None:  # a crash between create and write, long ago
            os.utime(path, (time.time() - 60, time.time() - 60))
        start, done, results = ctx.Barrier(contenders + 1), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=contend, args=(str(path), start, done, results))
                 for _ in range(contenders)]
        for proc in procs:
            proc.start()
        start.wait(timeout=120)
        outcomes = sorted(results.get(timeout=120) for _ in procs)
        done.set()
        for proc in procs:
            proc.join(timeout=60)
        assert outcomes == ["busy"] * (contenders - 1) + ["held"], f"round {round_}"
        assert not path.exists() and not list(tmp_path.glob(f"{path.name}.*"))


def test_a_fresh_lock_moved_by_mistake_is_put_back(tmp_path):
    path = tmp_path / "x.lock"
    path.write_text(json.dumps(DEAD), encoding="utf-8")
    taker = PidLock(path, "late taker")
    _, raw, identity = taker._read()  # judged stale ...
    path.unlink()  # ... but meanwhile another process took it over and holds it
    winner = PidLock(path, "winner")
    winner.acquire()
    assert taker._move_stale_aside(raw, identity) is None
    assert taker.holder()["purpose"] == "winner" and winner.held
    with pytest.raises(LockBusy, match="winner is running"):
        taker.acquire()
    winner.release()
    assert not path.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# only on Windows: a file really held open

@pytest.mark.skipif(sys.platform != "win32", reason="only Windows refuses to replace open files")
def test_status_written_while_a_reader_holds_the_file(tmp_path):
    run_status.update_status(tmp_path, status="idle")
    handle = (tmp_path / run_status.STATUS_FILE).open("rb")
    threading.Timer(0.3, handle.close).start()
    run_status.update_status(tmp_path, status="running")
    assert run_status.read_status(tmp_path)["status"] == "running"


# ---------------------------------------------------------------------------
# LibreOffice's temp folder (issue 31): a file soffice.bin still holds when it is deleted

def test_a_conversion_whose_temp_folder_cannot_be_deleted_still_succeeds(tmp_path, monkeypatch):
    """Regression (issue 31): a soffice.bin outliving its conversion holds a file in the temp
    folder on Windows; deleting the folder then failed and turned a good conversion into a
    parser error. Here the delete of that file is refused the way Windows refuses it."""
    docx = pytest.importorskip("docx")
    from formats import legacy, office

    made = docx.Document()
    made.add_paragraph("The harbour crane inspection is due on Tuesday.")
    converted = tmp_path / "converted.docx"
    made.save(str(converted))
    folders: list[Path] = []

    def fake_soffice(command: list[str], path: Path) -> None:  # what LibreOffice leaves behind
        out = Path(command[command.index("--outdir") + 1])
        out.mkdir()
        (out / "in.docx").write_bytes(converted.read_bytes())
        (out.parent / "profile").mkdir()
        (out.parent / "profile" / "held.lock").write_text("soffice.bin", encoding="utf-8")
        folders.append(out.parent)

    real_unlink = os.unlink

    def held_unlink(name, *args, **kwargs):
        if str(name).endswith("held.lock"):
            raise PermissionError(32, "The process cannot access the file because it is being "
                                      "used by another process", str(name))
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(legacy, "find_soffice", lambda: "soffice")
    monkeypatch.setattr(legacy, "_run_bounded", fake_soffice)
    monkeypatch.setattr(os, "unlink", held_unlink)
    source = tmp_path / "old.doc"
    source.write_bytes(b"not read: the conversion stands in for it")
    result = legacy._converted(source, "Word", ".docx", office.extract_docx, ValueError("x"))
    monkeypatch.undo()
    assert result.parser.startswith("soffice+")
    assert any("harbour crane" in line for page in result.pages for line in page)
    assert (folders[0] / "profile" / "held.lock").exists()  # the held file was left, not fatal
    import shutil

    shutil.rmtree(folders[0])


# ---------------------------------------------------------------------------
# Tesseract without PATH or a user-wide TESSDATA_PREFIX (issue 31)

TESSERACT_SETTINGS = ("LINECITE_TESSERACT", "TESSDATA_PREFIX", "LINECITE_WHISPER_MODEL")


def test_the_host_entry_and_the_launcher_carry_tesseract_and_its_data(tmp_path, monkeypatch):
    """install.ps1 sets these for its own run only; the host's server and the CLI get them
    from the entry and the launcher, so nothing on the machine needs changing."""
    from setup import launcher
    for name in TESSERACT_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LINECITE_HOME", str(tmp_path / "base"))
    assert set(mcp_config.entry()["env"]) == {"LINECITE_HOME"}
    values = {"LINECITE_TESSERACT": "C:\\Program Files\\Tesseract-OCR\\tesseract.exe",
              "TESSDATA_PREFIX": "C:\\Users\\김\\.linecite\\tessdata",
              "LINECITE_WHISPER_MODEL": "D:\\models\\whisper-small"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert mcp_config.entry()["env"] == {"LINECITE_HOME": str(tmp_path / "base"), **values}
    text = launcher.cmd_text("C:\\x\\python.exe", "C:\\x\\cli.py", launcher.baked_env(),
                             {"USERPROFILE": "C:\\Users\\김"})
    assert ('if not defined LINECITE_TESSERACT set "LINECITE_TESSERACT=C:\\Program Files\\'
            'Tesseract-OCR\\tesseract.exe"') in text
    assert 'set "TESSDATA_PREFIX=%USERPROFILE%\\.linecite\\tessdata"' in text


@pytest.fixture
def own_tesseract(tmp_path, monkeypatch):
    """The real tesseract under a folder PATH does not hold, and a tessdata of English only."""
    import shutil

    pytesseract = pytest.importorskip("pytesseract")
    real = shutil.which("tesseract")
    if real is None:
        pytest.skip("needs tesseract (apt-get install tesseract-ocr)")
    folder = tmp_path / "Tesseract-OCR 김"
    folder.mkdir()
    (folder / "tesseract").symlink_to(real)
    system = next(Path("/usr/share/tesseract-ocr").glob("*/tessdata"))
    data = tmp_path / "tessdata"
    data.mkdir()
    shutil.copy(system / "eng.traineddata", data)
    shutil.copytree(system / "configs", data / "configs")
    from formats import ocr

    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "tesseract")  # restored after
    monkeypatch.setattr(ocr, "_LANGS", {})  # what earlier tests' tesseract listed
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("TESSDATA_PREFIX", str(data))
    monkeypatch.setenv("LINECITE_OCR_CACHE", str(tmp_path / "ocr-cache"))
    return folder / "tesseract"


def test_ocr_runs_the_tesseract_linecite_tesseract_names(own_tesseract, tmp_path, monkeypatch):
    from PIL import Image, ImageDraw

    from formats import ocr

    with pytest.raises(ocr.OcrUnavailable, match="Tesseract not found"):  # PATH has none
        ocr.languages("eng")
    monkeypatch.setenv(ocr.TESSERACT_ENV, str(own_tesseract))
    # TESSDATA_PREFIX reaches it: only the English of that folder is there, not Debian's kor
    assert ocr.languages("kor+eng") == ("eng", ["kor"])
    image = Image.new("L", (500, 90), 255)
    ImageDraw.Draw(image).text((10, 30), "HARBOUR CRANE SEVEN", fill=0, font_size=28)
    image.save(tmp_path / "sign.png")
    monkeypatch.setenv(ocr.LANG_ENV, "eng")
    texts, _warnings = ocr.read_image(tmp_path / "sign.png")
    assert "HARBOUR CRANE" in texts[0]


def test_a_linecite_tesseract_that_is_not_a_file_says_so(own_tesseract, tmp_path, monkeypatch):
    from formats import ocr

    monkeypatch.setenv(ocr.TESSERACT_ENV, str(tmp_path / "gone" / "tesseract.exe"))
    with pytest.raises(ocr.OcrUnavailable, match="LINECITE_TESSERACT names .*gone.*which is not "
                                                 "a file: point it at tesseract's program"):
        ocr.languages("eng")
