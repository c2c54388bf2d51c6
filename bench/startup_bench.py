"""`python -m bench startup`: how soon a new server lists its tools and answers, beside a bare
FastMCP server with one tool started the same way (issue 30.7).

    python -m bench startup                        # a small English and Korean KB, made here
    python -m bench startup --base BASE --kb ID    # an index of your own (its languages' queries)
    python -m bench startup --runs 7 --json

Each server is spawned as a host spawns it (`python FILE`, stdio, the official `mcp` client,
initialize then tools/list) and timed from the spawn: to its tools/list answer (median of
--runs, linecite against the bare server: the ratio is what linecite's own start costs); to
its first answer per mode (bm25, vector, auto) and language (English, Korean), asked right
after tools/list, each in a new process with the warm-up on, as a host runs it; and the HTTP
server (`--transport http`) from its start to its warm-up's "ready to search" line. Targets:
tools/list within 1.3x the bare server's time, a first `auto` answer in Korean within 3 s of
tools/list on a quiet machine.

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# -----------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent  # the project folder (bench/ sits in it)
SERVER = REPO / "server.py"
RATIO_TARGET = 1.3  # linecite's spawn -> tools/list against the bare server's
FIRST_AUTO_KO_TARGET = 3.0  # seconds from tools/list to the first auto answer in Korean
MODES = ("bm25", "vector", "auto")
QUERIES = {"English": "when was the harbour crane inspected",  # in the KB made here
           "Korean": "항구 크레인 점검 일정"}
HTTP_WAIT = 60.0  # seconds an HTTP server may take to say it is warm
BARE_SERVER = '''\
from fastmcp import FastMCP

mcp = FastMCP("bare")


@mcp.tool
def echo(text: str) -> str:
    """Say the text back."""
    return text


if __name__ == "__main__":
    mcp.run("stdio", show_banner=False)
'''
DOCUMENTS = {  # the KB made when no --base is given: a few pages in each language
    "harbour.txt": "\n".join([
        "Harbour maintenance log",
        "The harbour crane was inspected in May and its brakes were replaced.",
        "Tide gauges on the north pier are recalibrated every quarter.",
        "The ferry timetable changes on the first Monday of October."]),
    "항구_점검.txt": "\n".join([
        "항구 정비 기록",
        "항구 크레인 점검은 매년 오월에 실시하며 제동 장치를 교체했습니다.",
        "북쪽 부두의 조위계는 분기마다 다시 보정합니다.",
        "여객선 시간표는 시월 첫째 월요일에 바뀝니다."]),
}
# -----------------------------------------------------------------------------


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


def server_env(**extra: str) -> dict:
    """This environment without linecite's own settings (the flags say where), plus `extra`."""
    drop = ("LINECITE_HOME", "LINECITE_TRANSPORT", "LINECITE_HOST", "LINECITE_PORT",
            "LINECITE_WARM_UP")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def make_base(folder: Path) -> Path:
    """A base folder with one KB `default` holding DOCUMENTS, indexed by ingest.py."""
    docs, base = folder / "docs", folder / "base"
    docs.mkdir(parents=True)
    for name, text in DOCUMENTS.items():
        (docs / name).write_text(text + "\n", encoding="utf-8")
    subprocess.run([sys.executable, str(REPO / "ingest.py"), str(docs), "--base-path",
                    str(base), "--kb", "default", "--quiet"], check=True, cwd=REPO,
                   env=server_env(), stdout=subprocess.DEVNULL, timeout=600)
    return base


# ----------------------------------------------------------------------------- stdio


async def spawned(script: Path, args: list[str], ask: tuple[str, dict] | None,
                  log: Path) -> tuple[float, float | None]:
    """(seconds from spawn to the tools/list answer, to the answer of `ask` sent right after
    it, or None) for one new process of `script`, spoken to by the official `mcp` client."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(script), *args],
                                   env=server_env(), cwd=str(REPO))
    with log.open("a", encoding="utf-8") as errlog:
        start = time.perf_counter()
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            listed = time.perf_counter() - start
            if ask is None:
                return listed, None
            result = await session.call_tool(*ask)
            answered = time.perf_counter() - start
    if result.is_error:
        raise RuntimeError(f"{ask[0]} {ask[1]} failed: {result.content[0].text}")
    return listed, answered


def time_to_tools(script: Path, args: list[str], runs: int, log: Path) -> list[float]:
    """Spawn -> tools/list, `runs` times, sorted."""
    import anyio

    return sorted(anyio.run(spawned, script, args, None, log)[0] for _ in range(runs))


def first_answers(base: Path, kb_id: str, log: Path) -> dict[str, tuple[float, float]]:
    """'mode language' -> (spawn -> tools/list, spawn -> first answer), each a new server."""
    import anyio

    out = {}
    for mode in MODES:
        for language, query in QUERIES.items():
            ask = ("search", {"query": query, "search_mode": mode, "kb_id": kb_id})
            out[f"{mode} {language}"] = anyio.run(spawned, SERVER, ["--base-path", str(base)],
                                                  ask, log)
    return out


# ----------------------------------------------------------------------------- http


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_warm(base: Path, log: Path) -> float | None:
    """Seconds from starting `server.py --transport http` to its "ready to search" line on
    stderr (None if it never says so within HTTP_WAIT), nobody having asked it anything."""
    import queue
    import threading

    args = [sys.executable, str(SERVER), "--transport", "http", "--port", str(free_port()),
            "--base-path", str(base)]
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, encoding="utf-8", errors="replace", cwd=REPO,
                            env=server_env())
    lines: queue.Queue = queue.Queue()  # stderr read on a thread, so the wait has a deadline
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True,
                     ).start()
    try:
        with log.open("a", encoding="utf-8") as out:
            while (left := HTTP_WAIT - (time.perf_counter() - start)) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    return None
                out.write(line)
                if "ready to search" in line:
                    return time.perf_counter() - start
        return None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- the run


def measure(base: Path, kb_id: str, runs: int, scratch: Path) -> dict:
    """Every figure of one run, in seconds."""
    bare = scratch / "bare_server.py"
    bare.write_text(BARE_SERVER, encoding="utf-8")
    log = scratch / "servers.log"
    time_to_tools(bare, [], 1, log)  # one untimed spawn each: the page cache, .pyc files
    time_to_tools(SERVER, ["--base-path", str(base)], 1, log)
    bare_times = time_to_tools(bare, [], runs, log)
    ours = time_to_tools(SERVER, ["--base-path", str(base)], runs, log)
    answers = first_answers(base, kb_id, log)
    return {"runs": runs, "bare_tools_list_s": statistics.median(bare_times),
            "tools_list_s": statistics.median(ours),
            "tools_list_ratio": statistics.median(ours) / statistics.median(bare_times),
            "first_answer_s": {k: {"tools_list": a, "answer": b, "after_tools_list": b - a}
                               for k, (a, b) in answers.items()},
            "http_start_to_warm_s": http_warm(base, log), "log": str(log)}


def report(figures: dict) -> list[str]:
    """The run as lines of text, each target with its verdict."""
    ratio = figures["tools_list_ratio"]
    lines = [f"startup: spawn -> tools/list, median of {figures['runs']} (official mcp client, "
             "stdio)",
             f"  bare FastMCP, one tool  {figures['bare_tools_list_s']:6.2f} s",
             f"  linecite                {figures['tools_list_s']:6.2f} s   ratio {ratio:.2f} "
             f"(target <= {RATIO_TARGET}: {'met' if ratio <= RATIO_TARGET else 'NOT met'})",
             "first answer, each in a new server asked right after tools/list (warm-up on):",
             f"  {'mode language':16} {'tools/list':>10} {'answer':>8} {'after list':>10}"]
    for key, row in figures["first_answer_s"].items():
        lines.append(f"  {key:16} {row['tools_list']:8.2f} s {row['answer']:6.2f} s "
                     f"{row['after_tools_list']:8.2f} s")
    ko = figures["first_answer_s"]["auto Korean"]["after_tools_list"]
    verdict = "met" if ko <= FIRST_AUTO_KO_TARGET else "NOT met"
    lines.append(f"  auto Korean {ko:.2f} s after tools/list (target <= "
                 f"{FIRST_AUTO_KO_TARGET:g} s: {verdict})")
    warm = figures["http_start_to_warm_s"]
    lines.append("http: start -> warm (\"ready to search\"), nobody asking: "
                 + (f"{warm:.2f} s" if warm is not None else f"not within {HTTP_WAIT:g} s"))
    return lines


def run(base: Path | None, kb_id: str, runs: int, as_json: bool) -> int:
    if base is not None and not (base / kb_id / "fulltext.sqlite3").exists():
        return fail(f"no index at {base / kb_id}; index files first (`python ingest.py FOLDER "
                    f"--base-path {base} --kb {kb_id}`) or leave out --base")
    with tempfile.TemporaryDirectory(prefix="linecite-startup-") as scratch:
        folder = Path(scratch)
        figures = measure(base or make_base(folder), kb_id, max(1, runs), folder)
        print("\n".join(report(figures)))
        if as_json:
            print(json.dumps(figures))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=None,
                        help="an indexed base folder (default: a small KB made for the run)")
    parser.add_argument("--kb", default="default", help="knowledge base id in --base")
    parser.add_argument("--runs", type=int, default=5, help="spawns timed per server")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    return run(args.base, args.kb, args.runs, args.json)


if __name__ == "__main__":
    sys.exit(main())
