"""install.sh's two modes, and `--stop` from any shell (issue 15).

stdio (the default) prints the block a host uses to start linecite itself and starts nothing;
`--http` starts one shared server and prints only its URL block. A server the installer
started must be found by `--stop` from a bare environment (`env -i`, no LINECITE_HOME), and
`--stop --port N` must stop that one only. Everything runs for real: install.sh in a copy of
the repo whose venv sees this interpreter's packages (no pip, no network), real server.py
processes on real ports, stopped through the installer.

    pytest tests/test_install_modes.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from conftest import free_port
from test_install import alive, port_open, repo_copy, run_sh, sandbox_env, show

BARE_PATH = "/usr/bin:/bin"  # what `env -i PATH=/usr/bin:/bin` leaves a user


# ---------------------------------------------------------------------------
# helpers

@pytest.fixture()
def served_copy(tmp_path):
    """A repo copy whose .venv (no pip) sees this interpreter's packages: server.py runs."""
    if sys.platform == "win32" or shutil.which("bash") is None:
        pytest.skip("install.sh needs bash (Linux, macOS)")
    folder = repo_copy(tmp_path / "linecite")
    venv = folder / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_linecite_test.pth").write_text("\n".join(sorted(ours)) + "\n")
    started: list[int] = []
    yield folder, tmp_path, started
    for pid in started:  # whatever a failed assertion left running
        if alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def start_http(folder: Path, tmp: Path, started: list[int], name: str) -> tuple[int, Path, dict]:
    """install.sh --http on a free port with LINECITE_HOME=tmp/name; (pid, base, env)."""
    env = sandbox_env(tmp / "home", tmp / name)
    port = free_port()
    result = run_sh(folder, env, "--skip-install", "--http", "--port", str(port))
    assert result.returncode == 0, show(result)
    pid = int((tmp / name / "logs" / "server.pid").read_text().strip())
    started.append(pid)
    assert alive(pid) and port_open(port)
    return port, pid, result


def stop_bare(folder: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The printed stop hint run from a bare shell elsewhere: no HOME, no LINECITE_HOME."""
    return subprocess.run(["env", "-i", f"PATH={BARE_PATH}", "bash", str(folder / "install.sh"),
                           "--stop", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def gone(pid: int, port: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while (alive(pid) or port_open(port)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid) and not port_open(port)


def printed_block(out: str) -> dict:
    return json.loads(out[out.index('{\n  "mcpServers"'):out.index("\n}\n") + 2])


def state_files(folder: Path) -> list[Path]:
    return sorted((folder / ".venv").glob(".linecite-http-*.state"))


# ---------------------------------------------------------------------------
# the mode decides what starts and what is printed

def test_default_is_stdio_prints_its_block_and_starts_no_server(served_copy):
    folder, tmp, _ = served_copy
    env = sandbox_env(tmp / "home", tmp / "data")
    result = run_sh(folder, env, "--skip-install")
    assert result.returncode == 0, show(result)
    entry = printed_block(result.stdout)["mcpServers"]["linecite"]
    assert entry["command"] == str(folder / ".venv" / "bin" / "python")
    assert entry["args"] == [str(folder / "server.py")] and "url" not in entry
    assert "no server to keep running" in result.stdout
    assert "--http' instead of this block" in result.stdout  # when to pick the other mode
    assert "Starting the linecite server" not in result.stdout
    assert "streamable HTTP" not in result.stdout and "/mcp" not in result.stdout
    assert not (tmp / "data" / "logs" / "server.pid").exists() and not state_files(folder)


def test_http_starts_the_server_and_prints_only_its_url_block(served_copy):
    folder, tmp, started = served_copy
    port, pid, result = start_http(folder, tmp, started, "data")
    url = f"http://127.0.0.1:{port}/mcp"
    assert printed_block(result.stdout) == {"mcpServers": {"linecite": {"url": url}}}
    assert result.stdout.count('"mcpServers"') == 1  # no stdio block beside it
    assert f"claude mcp add --transport http linecite {url}" in result.stdout
    # the stop hint carries what a bare shell needs: the script's full path and the port
    assert f"stop: bash '{folder / 'install.sh'}' --stop --port {port}" in result.stdout
    (state,) = state_files(folder)
    assert state.name == f".linecite-http-{port}.state"
    fields = dict(line.split("=", 1) for line in state.read_text().splitlines())
    assert fields == {"port": str(port), "host": "127.0.0.1", "base": str(tmp / "data"),
                      "pid_file": str(tmp / "data" / "logs" / "server.pid"), "pid": str(pid)}
    assert stop_bare(folder, tmp, "--port", str(port)).returncode == 0
    assert gone(pid, port)


def test_configure_claude_with_http_is_refused_with_the_reason(served_copy):
    folder, tmp, _ = served_copy
    env = sandbox_env(tmp / "home", tmp / "data")
    config = tmp / "home" / ".config" / "Claude" / "claude_desktop_config.json"
    for flags in (["--http"], ["--port", str(free_port())]):
        result = run_sh(folder, env, "--skip-install", "--configure-claude", *flags)
        assert result.returncode != 0, show(result)
        assert "two servers on the same stores" in result.stderr, show(result)
    assert not config.exists() and not state_files(folder)


# ---------------------------------------------------------------------------
# --stop whatever the shell's environment

def test_stop_from_a_bare_environment_ends_the_server(served_copy):
    """Regression (issue 15): from a shell without LINECITE_HOME, --stop looked for the PID file
    under the default base folder, said "no linecite server is running" (exit 0) and left the
    server listening."""
    folder, tmp, started = served_copy
    port, pid, _ = start_http(folder, tmp, started, "data")
    result = stop_bare(folder, tmp)
    assert result.returncode == 0, show(result)
    assert f"Stopping the linecite server on 127.0.0.1:{port} (PID {pid}" in result.stdout
    assert gone(pid, port), show(result)
    assert not (tmp / "data" / "logs" / "server.pid").exists() and not state_files(folder)
    again = stop_bare(folder, tmp)
    assert again.returncode == 0, show(again)
    assert "no linecite server started by this install is running" in again.stdout


def test_stop_port_stops_that_server_only(served_copy):
    """Regression (issue 15): --stop ignored --port."""
    folder, tmp, started = served_copy
    port_a, pid_a, _ = start_http(folder, tmp, started, "data-a")
    port_b, pid_b, _ = start_http(folder, tmp, started, "data-b")  # another base folder
    result = stop_bare(folder, tmp, "--port", str(port_a))
    assert result.returncode == 0, show(result)
    assert gone(pid_a, port_a), show(result)
    assert alive(pid_b) and port_open(port_b)
    assert [p.name for p in state_files(folder)] == [f".linecite-http-{port_b}.state"]
    again = stop_bare(folder, tmp, "--port", str(port_a))
    assert again.returncode == 0 and f"is running on port {port_a}" in again.stdout, show(again)
    assert alive(pid_b)
    rest = stop_bare(folder, tmp)  # no port: every server this install started
    assert rest.returncode == 0, show(rest)
    assert gone(pid_b, port_b) and not state_files(folder)


def test_stop_port_held_by_another_program_says_so(served_copy):
    folder, tmp, _ = served_copy
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = stop_bare(folder, tmp, "--port", str(port))
        assert port_open(port)  # left alone
    assert result.returncode != 0, show(result)
    assert f"port {port} is in use by another program" in result.stderr, show(result)


def test_a_server_an_older_installer_started_is_recorded_on_the_next_run(served_copy):
    """A server with a PID file but no state file (started before state files existed) is
    adopted by the next --http run on its port, so a bare shell can stop it too."""
    folder, tmp, started = served_copy
    port, pid, _ = start_http(folder, tmp, started, "data")
    for state in state_files(folder):
        state.unlink()
    env = sandbox_env(tmp / "home", tmp / "data")
    rerun = run_sh(folder, env, "--skip-install", "--port", str(port))  # --port: HTTP mode
    assert rerun.returncode == 0 and f"already running (PID {pid})" in rerun.stdout, show(rerun)
    assert len(state_files(folder)) == 1
    assert stop_bare(folder, tmp).returncode == 0
    assert gone(pid, port)


def test_stop_with_the_shells_base_folder_still_finds_a_server_without_state(served_copy):
    """The PID file of this shell's base folder is still read, for a server no state names."""
    folder, tmp, started = served_copy
    port, pid, _ = start_http(folder, tmp, started, "data")
    for state in state_files(folder):
        state.unlink()
    result = run_sh(folder, sandbox_env(tmp / "home", tmp / "data"), "--stop", timeout=60)
    assert result.returncode == 0 and f"(PID {pid}, PID file" in result.stdout, show(result)
    assert gone(pid, port)
