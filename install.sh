#!/usr/bin/env bash
# linecite installer for Linux and macOS: Python check, .venv beside this script, requirements,
# a stdio self-test, then the MCP server over HTTP in the background. Running it again changes
# nothing that is already in place.
#
#   bash install.sh                     # install, check, start http://127.0.0.1:8000/mcp
#   bash install.sh --configure-claude  # ... and add linecite to Claude Desktop's config
#   bash install.sh --stop              # stop the background server
#
# Windows: install.ps1 does the same steps.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
VENV_PY="$VENV/bin/python"
REQUIREMENTS="$HERE/requirements.txt"
STAMP="$VENV/.linecite-requirements.sha256"  # hash of the requirements.txt last installed

PORT=8000
HOST=127.0.0.1
LAUNCH=1
INSTALL=1
CLAUDE=0
OCR=0
AUDIO=0
STOP=0
CHANGED=0  # set when a step changed something; 0 at the end means "nothing to do"

usage() {
    cat <<'EOF'
Usage: bash install.sh [options]
  --port N            HTTP port (default 8000)
  --host ADDR         address to bind (default 127.0.0.1; any other needs LINECITE_HTTP_TOKEN)
  --no-launch         install and check only; do not start the server
  --skip-install      start the server only (the venv must exist)
  --configure-claude  add linecite to Claude Desktop's config (backed up first)
  --with-ocr          also install Tesseract with Korean and Chinese data
  --with-audio        also install faster-whisper and fetch its Whisper model (recordings)
  --stop              stop the background server and exit
Base folder: $LINECITE_HOME if set, else the user data folder.
EOF
}

step() { printf '==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --port) [ $# -ge 2 ] || die "--port needs a number"; PORT="$2"; shift ;;
        --port=*) PORT="${1#*=}" ;;
        --host) [ $# -ge 2 ] || die "--host needs an address"; HOST="$2"; shift ;;
        --host=*) HOST="${1#*=}" ;;
        --no-launch) LAUNCH=0 ;;
        --skip-install) INSTALL=0 ;;
        --configure-claude) CLAUDE=1 ;;
        --with-ocr) OCR=1 ;;
        --with-audio) AUDIO=1 ;;
        --stop) STOP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
    shift
done
case "$PORT" in
    ''|*[!0-9]*) die "--port must be a number, got '$PORT'" ;;
esac

# The base folder, as server.py works it out (kb.py): LINECITE_HOME, else the user data folder.
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
# True while the process runs (a zombie, exited but not yet reaped, counts as gone).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    case "$(ps -o stat= -p "$1" 2>/dev/null)" in *Z*) return 1 ;; esac
}

# The PID in the PID file when that process is alive and is our server.py; else nothing.
server_pid() {
    local pid args
    [ -f "$PID_FILE" ] || return 1
    pid="$(tr -dc '0-9' <"$PID_FILE")"
    [ -n "$pid" ] || return 1
    alive "$pid" || return 1
    args="$(ps -o args= -p "$pid" 2>/dev/null || true)"
    case "$args" in
        *server.py*--transport*http*) printf '%s\n' "$pid" ;;
        *) return 1 ;;
    esac
}

# True when something accepts connections on HOST:PORT (a wildcard bind is checked on loopback).
port_open() {
    local target="$HOST"
    case "$target" in 0.0.0.0|::|'[::]') target=127.0.0.1 ;; esac
    (exec 3<>"/dev/tcp/$target/$PORT") 2>/dev/null
}

is_loopback() {
    case "$HOST" in 127.*|localhost|::1|'[::1]') return 0 ;; *) return 1 ;; esac
}

stop_server() {
    local pid i
    if ! pid="$(server_pid)"; then
        info "no linecite server is running from $PID_FILE"
        rm -f "$PID_FILE"
        return 0
    fi
    step "Stopping the linecite server (PID $pid)"
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        alive "$pid" || break
        if [ "$i" -eq 50 ]; then kill -9 "$pid" 2>/dev/null || true; fi
        sleep 0.2
    done
    rm -f "$PID_FILE"
    info "stopped"
}

if [ "$STOP" = 1 ]; then
    stop_server
    exit 0
fi

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

    # -- 3. requirements, only when requirements.txt changed since the last install -----------
    step "Installing requirements.txt"
    WANT="$("$VENV_PY" -c 'import hashlib, pathlib, sys
print(hashlib.sha256(pathlib.Path(sys.argv[1]).read_bytes()).hexdigest())' "$REQUIREMENTS")"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
        info "unchanged since the last install, skipping pip"
    else
        "$VENV_PY" -m pip install --disable-pip-version-check -r "$REQUIREMENTS" ||
            die "pip could not install requirements.txt (see above)"
        CHANGED=1

        # -- 4. check: the server starts over stdio and lists its tools ------------------------
        step "Checking the install: starting server.py over stdio and listing its tools"
        "$VENV_PY" "$HERE/verify_install.py" ||
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
# faster-whisper stays out of requirements.txt: ~250 MB installed plus a model download that
# only users with recordings want. Without it a recording ends needs_action naming this switch.
if [ "$AUDIO" = 1 ]; then
    step "Installing the audio engine (faster-whisper) and fetching its Whisper model"
    "$VENV_PY" -m pip install --disable-pip-version-check -r "$HERE/requirements-audio.txt" ||
        die "pip could not install requirements-audio.txt (see above)"
    "$VENV_PY" "$HERE/audio.py" fetch ||
        warn "the Whisper model was not fetched now; linecite fetches it with the first" \
             "recording, or set LINECITE_WHISPER_MODEL to a local model folder"
    CHANGED=1
fi

# -- 6. Claude Desktop config (optional) -----------------------------------------------------
if [ "$CLAUDE" = 1 ]; then
    step "Adding linecite to Claude Desktop's config"
    before="$(cat "$CLAUDE_CONFIG" 2>/dev/null || true)"
    "$VENV_PY" "$HERE/mcp_config.py" --claude "$CLAUDE_CONFIG" ||
        die "could not update $CLAUDE_CONFIG (see above)"
    [ "$before" = "$(cat "$CLAUDE_CONFIG")" ] || CHANGED=1
fi

# -- 7. the HTTP server in the background -----------------------------------------------------
URL="http://$HOST:$PORT/mcp"
case "$HOST" in *:*) URL="http://[${HOST#[}"; URL="${URL%]}]:$PORT/mcp" ;; esac
if [ "$LAUNCH" = 1 ]; then
    step "Starting the linecite server on $URL"
    mkdir -p "$LOG_DIR"
    if pid="$(server_pid)"; then
        running="$(ps -o args= -p "$pid")"
        case " $running " in
            *" --host $HOST --port $PORT "*) info "already running (PID $pid)" ;;
            *) die "a linecite server is already running with other settings" \
                   "(PID $pid: $running). Stop it with 'bash install.sh --stop', then run again." ;;
        esac
    elif port_open; then
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
        CHANGED=1
        # Wait until it accepts connections; show the log's end if it dies first.
        for _ in $(seq 1 300); do
            port_open && break
            if ! alive "$pid"; then
                rm -f "$PID_FILE"
                tail -n 30 "$LOG" >&2
                die "the server exited at start (log above: $LOG)"
            fi
            sleep 0.2
        done
        port_open || die "the server did not open port $PORT within 60 s (log: $LOG; PID $pid)"
        info "started (PID $pid)"
    fi
    info "log:  $LOG"
    info "stop: bash '$HERE/install.sh' --stop   (or: kill \$(cat '$PID_FILE'))"
fi

# -- 8. what to paste into an MCP host --------------------------------------------------------
echo
if [ "$LAUNCH" = 1 ]; then
    echo "linecite MCP endpoint (streamable HTTP): $URL"
fi
if [ "$CLAUDE" = 1 ]; then
    echo "Claude Desktop config: $CLAUDE_CONFIG"
else
    echo "MCP host config (stdio), for claude_desktop_config.json or Cursor's mcp.json"
    echo "(or run again with --configure-claude to write it into Claude Desktop's config):"
    "$VENV_PY" "$HERE/mcp_config.py"
fi
echo "Index documents: '$VENV_PY' '$HERE/ingest.py' ~/Documents/reports"
if [ "$CHANGED" = 0 ]; then
    echo "Nothing to do: everything was already in place."
fi
