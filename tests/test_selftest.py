"""The self-test a user runs (`linecite selftest`, install.ps1 -SelfTest) and the launcher the
installers write (issues 30 and 31).

verify_install.py --first-hour runs for real here, as it runs on Windows: Kiwi and jieba,
Chroma, ingest.py on a DOCX and a PDF it writes, server.py over stdio with fastmcp's client,
every search mode and read_range, under a base folder whose name holds Hangul. The launcher
is written by launcher.py and run as a user would run it, from a shell without LINECITE_HOME.

    pytest tests/test_selftest.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli
import ingest
from common import commands
from setup import launcher, verify_install

REPO = Path(__file__).resolve().parent.parent
TOKENIZE = "tokenize Hangul (Kiwi), Han (jieba) and English (Snowball)"
STEPS = ["the base folder the MCP host uses", TOKENIZE,
         "Chroma round-trip", "index a DOCX and a text PDF (ingest.py)",
         "server.py over stdio lists its tools", *(f"search {mode} finds its sample"
                                                    for mode in verify_install.MODES),
         "read_range returns a hit's lines"]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without LINECITE_* or XDG_*, HOME in tmp (no host config is found)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LINECITE_", "XDG_", "TESSDATA_PREFIX"))}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "PYTHONUTF8": "1", **extra}


def first_hour(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "cli.py"), "verify", "--first-hour",
                           *args], env=env, cwd=REPO, capture_output=True, text=True,
                          encoding="utf-8", timeout=300, stdin=subprocess.DEVNULL)


def lines_of(out: str) -> dict[str, str]:
    """step -> its PASS/FAIL line."""
    found = {}
    for line in out.splitlines():
        for step in STEPS:
            if line[6:].startswith(step + ":"):
                found[step] = line
    return found


def test_first_hour_passes_every_step_under_a_hangul_base_and_cleans_up(tmp_path):
    base = tmp_path / "사용자 김" / "linecite"
    result = first_hour(clean_env(tmp_path / "home"), "--base", str(base))
    assert result.returncode == 0, result.stdout + result.stderr
    found = lines_of(result.stdout)
    assert list(found) == STEPS, result.stdout  # one line a step, in order
    assert all(line.startswith("PASS  ") for line in found.values()), result.stdout
    assert "서울" in found[TOKENIZE]
    assert "selftest.pdf" in found["search vector finds its sample"]
    assert "selftest.docx" in found["search auto finds its sample"]  # the Korean query
    # nothing of the self-test is left in the user's base folder but the server's log
    assert sorted(p.name for p in base.iterdir()) == ["logs"]
    assert "Traceback" not in (base / "logs" / "selftest-server.log").read_text(
        encoding="utf-8", errors="replace")


def test_a_failing_step_says_fail_with_its_fix_and_the_steps_it_blocks(tmp_path):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("x", encoding="utf-8")
    result = first_hour(clean_env(tmp_path / "home"), "--base", str(blocked))
    assert result.returncode == 1
    found = lines_of(result.stdout)
    assert list(found) == STEPS, result.stdout
    base_line = found["the base folder the MCP host uses"]
    assert base_line.startswith("FAIL  ") and " -- fix: set LINECITE_HOME to a writable" \
        in base_line
    assert found[TOKENIZE].startswith("PASS  ")  # independent
    assert found["index a DOCX and a text PDF (ingest.py)"].startswith("FAIL  ")
    for step in STEPS[4:]:
        assert found[step].startswith("FAIL  ") and "not run" in found[step], found[step]
        assert " -- fix: read " in found[step]
    assert blocked.read_text(encoding="utf-8") == "x"


def test_the_base_folder_is_the_one_the_host_config_names(tmp_path, monkeypatch):
    """The self-test checks the folder the host reads (its config's LINECITE_HOME), and says
    so when this shell's commands would use another one."""
    config = tmp_path / "config" / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    host = tmp_path / "host base"
    config.write_text(json.dumps({"mcpServers": {"linecite": {
        "command": "python", "env": {"LINECITE_HOME": str(host)}}}}), encoding="utf-8")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LINECITE_HOME", str(tmp_path / "shell base"))
    base, where = verify_install.host_base()
    assert base == host and where == f"from {config}"
    run = verify_install.Run(base, from_host=True)
    with pytest.raises(verify_install.StepFailed, match="this shell's commands use"):
        verify_install.check_base(run)
    monkeypatch.setenv("LINECITE_HOME", str(host))
    assert verify_install.check_base(run) == str(host)


def test_a_kb_of_that_name_the_check_did_not_make_is_left_alone(tmp_path):
    run = verify_install.Run(tmp_path)
    run.kb_dir.mkdir()
    (run.kb_dir / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(verify_install.StepFailed, match="was not made by this check"):
        verify_install.check_index(run)
    verify_install.remove(run)
    assert (run.kb_dir / "config.json").read_text(encoding="utf-8") == "{}"


# ---------------------------------------------------------------------------
# the launcher and its commands

@pytest.mark.skipif(sys.platform == "win32", reason="the sh launcher (Windows: linecite.cmd)")
def test_the_launcher_indexes_into_the_hosts_base_from_a_shell_without_linecite_home(
        tmp_path, monkeypatch):
    """Regression (issue 30): the printed commands ran the system Python, and from a new shell
    (no LINECITE_HOME) the CLI wrote to another base folder than the host reads."""
    base = tmp_path / "base"
    monkeypatch.setenv("LINECITE_HOME", str(base))  # what the host config carries
    monkeypatch.setattr(commands, "BIN", tmp_path / "bin")
    path, changed = launcher.write("linux")
    assert changed and path == tmp_path / "bin" / "linecite" and os.access(path, os.X_OK)
    assert launcher.write("linux") == (path, False)  # a second run leaves it alone
    note = tmp_path / "note.txt"
    note.write_text("The tide tables for Friday are on the harbour board.\n", encoding="utf-8")
    env = clean_env(tmp_path / "home", PATH="/usr/bin:/bin")  # no venv on PATH either
    done = subprocess.run([str(path), "ingest", str(note), "--kb", "notes", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["indexed"] == 1
    assert (base / "notes" / "fulltext.sqlite3").is_file()
    own = subprocess.run([str(path), "ingest", "--help"], env={**env, "LINECITE_HOME": "x"},
                         capture_output=True, text=True, timeout=60)
    assert own.returncode == 0 and own.stdout.startswith("usage: linecite ingest")


def test_the_cmd_launcher_keeps_non_ascii_out_of_the_file_or_switches_to_utf8(monkeypatch):
    profile = "C:\\Users\\김철수"
    python = f"{launcher.HERE}\\.venv\\Scripts\\python.exe"
    cli_py = f"{launcher.HERE}\\cli.py"
    text = launcher.cmd_text(python, cli_py, {"LINECITE_HOME": f"{profile}\\.linecite"},
                             {"USERPROFILE": profile})
    assert text.isascii() and "chcp" not in text and text.endswith("\r\n")
    assert 'if not defined LINECITE_HOME set "LINECITE_HOME=%USERPROFILE%\\.linecite"' in text
    assert '"%~dp0..\\.venv\\Scripts\\python.exe" "%~dp0..\\cli.py" %*' in text
    assert "setlocal" in text and "exit /b %ERRORLEVEL%" in text
    elsewhere = launcher.cmd_text(python, cli_py, {"LINECITE_HOME": "D:\\자료 100%"},
                                  {"USERPROFILE": profile})
    assert 'set "LINECITE_HOME=D:\\자료 100%%"' in elsewhere  # % doubled for cmd.exe
    lines = elsewhere.splitlines()
    assert lines.index("chcp 65001 >nul") < next(i for i, line in enumerate(lines)
                                                 if "자료" in line)
    assert lines[-3:] == ['set "LINECITE_RC=%ERRORLEVEL%"', "chcp %LINECITE_CP% >nul",
                          "exit /b %LINECITE_RC%"]


def test_cli_runs_each_command_and_refuses_an_unknown_one(capsys):
    assert cli.main(["nonsense"]) == 2
    assert "unknown command 'nonsense'" in capsys.readouterr().err
    assert cli.main([]) == 2 and "selftest" in capsys.readouterr().out
    for command in cli.COMMANDS:
        with pytest.raises(SystemExit) as done:
            cli.main([command, "--help"])
        assert done.value.code == 0
        assert f"usage: linecite {command}" in capsys.readouterr().out


def test_every_command_the_product_prints_is_the_launchers(tmp_path, capsys):
    """Regression (issue 49 item 3): the ingest summary's `following` said `python ingest.py
    --kb default`, which fails from a bare shell or under another Python."""
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "a.txt").write_text("Harbour crane inspection notes.\n", encoding="utf-8")
    base = tmp_path / "base"
    base.mkdir()
    (base / "default").mkdir()
    (base / "default" / "config.json").write_text(json.dumps(
        {"id": "default", "name": "default", "embedding": {"provider": "none"}}), encoding="utf-8")
    assert ingest.main([str(folder), "--base-path", str(base), "--quiet"]) == 0
    following = json.loads(capsys.readouterr().out)["following"]
    launcher_run = commands.command("ingest", "--kb", "default")
    assert f"`{launcher_run}`" in following and "python ingest.py" not in following
    assert launcher_run.startswith(str(commands.CHECKOUT / "bin" / "linecite"))
    assert commands.command("ingest", platform="win32").endswith("linecite.cmd ingest")


def test_install_hints_name_this_installs_python():
    """Regression (issue 49 item 3): the audio needs-action detail said `pip install -r
    requirements-audio.txt`, which installs into whatever Python `pip` belongs to."""
    from formats import audio

    message = audio._no_engine_message("faster-whisper")
    assert commands.pip_install("requirements-audio.txt") in message
    wanted = commands.CHECKOUT / "requirements-audio.txt"
    assert f'"{sys.executable}" -m pip install -r "{wanted}"' in message
