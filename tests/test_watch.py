"""Folders that keep themselves current (watcher.py): a real server.py, over real stdio and
streamable HTTP with the official `mcp` client, watches a KB's sourcePaths and the real queue
and orchestrator index what changed. KBs here have no embedder (provider none), so a queued
run takes a fraction of a second and the time measured is the watcher's.
"""

import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from conftest import clean_env, free_port, stop_process, wait_for_http
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import fulltext
import ingest
import kb as kbmod
from index import states
from service import watcher

REPO = Path(__file__).resolve().parent.parent
SERVER = str(REPO / "server.py")
FOUND_WITHIN = 10.0  # seconds a saved file may take to be searchable (it takes about 3)
Call = Callable[..., Awaitable[dict]]


def make_kb(base: Path, kb_id: str, docs: list[Path], **fields) -> kbmod.KnowledgeBase:
    """A KB with no embedder over `docs`, its folders indexed once."""
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config.update(sourcePaths=[str(d) for d in docs], embedding={"provider": "none"}, **fields)
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    kb = kbmod.load(base, kb_id)
    ingest.sync(kb)
    return kb


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def caller(session: ClientSession) -> Call:
    async def call(tool: str, **args) -> dict:
        result = await session.call_tool(tool, args)
        assert not result.is_error, result.content[0].text
        return result.structured_content
    return call


@asynccontextmanager
async def stdio_server(base: Path, log: Path):
    params = StdioServerParameters(command=sys.executable, args=[SERVER, "--base-path", str(base)],
                                   env=clean_env(LINECITE_WATCH="1"), cwd=str(REPO))
    with log.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write_), \
                ClientSession(read, write_) as session:
            await session.initialize()
            yield caller(session)


@asynccontextmanager
async def http_server(base: Path, log: Path):
    port = free_port()
    with log.open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen([sys.executable, SERVER, "--transport", "http", "--port",
                                 str(port), "--base-path", str(base)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=errlog, env=clean_env(LINECITE_WATCH="1"), cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for_http(url, proc, log)
        async with streamable_http_client(url) as streams, \
                ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield caller(session)
    finally:
        stop_process(proc)


async def until(check: Callable[[], Awaitable[object]], what: str, limit: float = 20.0):
    """Poll `check` until it returns something true; its value. Fails after `limit` s."""
    deadline = time.monotonic() + limit
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {limit} s: {what}"
        await anyio.sleep(0.1)


async def names(call: Call, kb_id: str) -> set[str]:
    return {s["name"] for s in (await call("list_sources", kb_id=kb_id))["sources"]}


async def watching(call: Call, kb_id: str) -> dict:
    """get_index_info once every folder of the KB is watched (the watcher starts lazily)."""
    async def ready():
        info = await call("get_index_info", kb_id=kb_id)
        folders = info["watch"].get("folders")
        return info if folders and all(f["state"] == "watching" for f in folders) else None
    return await until(ready, f"{kb_id}'s folders watched")


async def settled(call: Call, kb_id: str) -> dict:
    """get_index_info once nothing waits: no file pending, no job queued or running."""
    async def idle():
        info = await call("get_index_info", kb_id=kb_id)
        quiet = info["watch"]["waiting"]["files_total"] == 0 and info["status"] == "idle"
        return info if quiet and info["queue_position"] is None else None
    return await until(idle, f"{kb_id} idle")


def runs_logged(base: Path, kb_id: str) -> int:
    """Jobs the orchestrators ran for the KB, from their log (one line a job)."""
    log = base / "logs" / "queue_runner.log"
    text = log.read_text(encoding="utf-8") if log.exists() else ""
    return text.count(f"full reindex of {kb_id!r}")


def index_dump(kb: kbmod.KnowledgeBase) -> dict:
    """Every source's row (but when it was indexed) and every line of every page."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        dump = {}
        for source in fulltext.list_sources(conn):
            row = {k: v for k, v in source.items() if k not in ("ingested_at",)}
            row["lines"] = [fulltext.page_lines(conn, source["name"], p)
                            for p in range(1, (source["pages"] or 0) + 1)]
            dump[source["name"]] = row
        return {"sources": dump, "chunk_ids": states.all_chunk_ids(conn)}
    finally:
        conn.close()


async def test_saved_files_are_indexed_once_settled_and_the_index_equals_a_rebuild(tmp_path):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write(docs / "note0.txt", "Note zero about the harbour crane.")
    write(docs / "note1.txt", "Note one about the tide tables.")
    kb = make_kb(base, "notes", [docs])
    async with stdio_server(base, tmp_path / "server.log") as call:
        info = await watching(call, "notes")
        assert info["watch"]["folders"][0]["mode"] == "native"
        assert info["watch"]["jobs_queued"] == 0  # the index was current: nothing queued

        async def found(query: str, mode: str = "bm25"):
            return (await call("search", query=query, search_mode=mode, kb_id="notes"))["hits"]

        # a file saved in a watched folder is searchable within a few seconds
        start = time.monotonic()
        write(docs / "fresh.txt", "The quarantine of the zeppelin hangar ends in May.")
        hits = await until(lambda: found("zeppelin hangar"), "fresh.txt searchable", FOUND_WITHIN)
        took = time.monotonic() - start
        assert hits[0]["source"] == "docs/fresh.txt", hits
        print(f"saved file searchable after {took:.1f} s")
        await settled(call, "notes")
        assert runs_logged(base, "notes") == 1

        # 50 saves in a second are one job
        for n in range(50):
            write(docs / "burst.txt", f"Draft {n} of the burst memo about walrus{n}.")
            time.sleep(0.02)
        await until(lambda: found("walrus49.", "exact"), "the last save searchable")
        info = await settled(call, "notes")
        assert (info["watch"]["jobs_queued"], runs_logged(base, "notes")) == (2, 2)
        assert info["watch"]["last_queued_files"] == [str(docs / "burst.txt")]
        assert not await found("walrus48.", "exact")  # the last save only

        # a file written in pieces is not indexed until it is whole
        parts = [f"Part {n} of the slow manifest for the lighthouse." for n in range(10)]
        seen_writing = False
        with (docs / "slow.txt").open("w", encoding="utf-8") as out:
            for part in parts:
                out.write(part + "\n")
                out.flush()
                await anyio.sleep(0.3)
                now = await call("get_index_info", kb_id="notes")
                seen_writing |= str(docs / "slow.txt") in now["watch"]["waiting"]["files"]
                assert "docs/slow.txt" not in await names(call, "notes")
        assert seen_writing  # get_index_info showed it waiting
        await until(lambda: found("slow manifest"), "slow.txt searchable")
        await settled(call, "notes")
        page = await call("read_range", kb_id="notes", source="docs/slow.txt", page=1)
        assert [line["text"] for line in page["lines"]] == parts
        assert runs_logged(base, "notes") == 3  # no job while it was being written

        # deletions and renames propagate
        (docs / "note0.txt").unlink()
        (docs / "note1.txt").rename(docs / "renamed.txt")
        await until(lambda: _has(call, "notes", {"docs/renamed.txt"}, {"docs/note0.txt",
                                                                     "docs/note1.txt"}),
                    "delete and rename in the index")
        await settled(call, "notes")
    assert runs_logged(base, "notes") == 4  # one job for the delete and the rename together
    assert "Traceback" not in (tmp_path / "server.log").read_text(encoding="utf-8")
    rebuilt = make_kb(tmp_path / "rebuilt", "notes", [docs])
    assert index_dump(kb) == index_dump(rebuilt)
    assert set(index_dump(kb)["sources"]) == {"docs/fresh.txt", "docs/burst.txt", "docs/slow.txt",
                                   "docs/renamed.txt"}


async def _has(call: Call, kb_id: str, present: set[str], absent: set[str]) -> bool:
    held = await names(call, kb_id)
    return present <= held and not absent & held


async def test_watch_false_an_offline_share_and_a_changed_config_over_http(tmp_path):
    base = tmp_path / "base"
    quiet, share, more = tmp_path / "quiet", tmp_path / "share", tmp_path / "more"
    write(quiet / "a.txt", "Quiet folder, first note about otters.")
    for n in range(3):
        write(share / f"s{n}.txt", f"Share note {n} about the ferry timetable.")
    write(more / "m.txt", "A folder added later, about the glacier survey.")
    make_kb(base, "quiet", [quiet], watch=False)
    kb = make_kb(base, "share", [share], watch="poll")
    async with http_server(base, tmp_path / "server.log") as call:
        info = await watching(call, "share")
        assert [f["mode"] for f in info["watch"]["folders"]] == ["polling"]
        off = (await call("get_index_info", kb_id="quiet"))["watch"]
        assert off["enabled"] is False and "watch" in off["reason"]

        # "watch": false watches nothing: a new file there stays unindexed
        write(quiet / "b.txt", "Quiet folder, second note about otters.")
        # a polled folder is found all the same
        write(share / "s3.txt", "Share note 3 about the night ferry.")
        await until(lambda: _has(call, "share", {"share/s3.txt"}, set()), "s3.txt indexed")
        assert await names(call, "quiet") == {"quiet/a.txt"}
        assert runs_logged(base, "quiet") == 0

        # a share that goes offline is reported, and its sources are kept
        before = await names(call, "share")
        share.rename(tmp_path / "share-away")
        async def offline():
            folders = (await call("get_index_info", kb_id="share"))["watch"]["folders"]
            return [f for f in folders if f["state"] == "offline"]
        gone = await until(offline, "the share reported offline")
        assert gone[0]["path"] == str(share)
        await anyio.sleep(watcher.QUIET + watcher.SETTLE + 1)
        assert await names(call, "share") == before
        # back, with a file added meanwhile: watched again and caught up
        (tmp_path / "share-away").rename(share)
        write(share / "s4.txt", "Share note 4 written while the share was away.")
        await until(lambda: _has(call, "share", {"share/s4.txt"}, set()), "the share caught up")
        await watching(call, "share")

        # a folder added to sourcePaths is watched (and its files indexed); removed, it is not
        config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
        config["sourcePaths"].append(str(more))
        (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        await until(lambda: _has(call, "share", {"more/m.txt"}, set()), "the new folder indexed")
        info = await watching(call, "share")
        assert {f["path"] for f in info["watch"]["folders"]} == {str(share), str(more)}
        config["sourcePaths"].remove(str(more))
        (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")

        async def one_folder():
            folders = (await call("get_index_info", kb_id="share"))["watch"]["folders"]
            return [f["path"] for f in folders] == [str(share)]
        await until(one_folder, "the removed folder no longer watched")
        await settled(call, "share")
    assert runs_logged(base, "quiet") == 0
    assert indexed_names(base / "quiet") == {"quiet/a.txt"}
    log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert "Application shutdown complete" in log and "Traceback" not in log  # stopped cleanly


@pytest.mark.skipif(sys.platform == "win32", reason="os.mkfifo is POSIX")
async def test_a_fifo_in_a_watched_folder_blocks_nothing_over_http(tmp_path):
    # Regression (issue 45): the watcher opened each changed file to see it settled, with its
    # lock held; a FIFO named like a document (pipe.txt), or a link to one outside the folder,
    # waits in open() for a writer for ever, so get_index_info stopped answering and nothing
    # was indexed again. A FIFO with no suffix (`pipe`) hung the folder's thread the same way
    # when its first bytes were read for a shebang.
    base, docs, outside = tmp_path / "base", tmp_path / "docs", tmp_path / "outside"
    write(docs / "a.txt", "Alpha note about the harbour crane.")
    outside.mkdir()
    os.mkfifo(outside / "far")
    make_kb(base, "notes", [docs])
    async with http_server(base, tmp_path / "server.log") as call:
        async def answered(tool: str, **args) -> dict:
            with anyio.fail_after(5):  # a blocked watcher holds the lock get_index_info needs
                return await call(tool, **args)

        await watching(answered, "notes")
        os.mkfifo(docs / "pipe.txt")
        (docs / "link.txt").symlink_to(outside / "far")
        await anyio.sleep(watcher.QUIET + watcher.SETTLE + 1)  # the ticker looks at them
        info = await answered("get_index_info", kb_id="notes")
        assert info["watch"]["folders"][0]["state"] == "watching"
        os.mkfifo(docs / "pipe")
        write(docs / "fresh.txt", "The quarantine of the zeppelin hangar ends in May.")

        async def found():
            return (await answered("search", query="zeppelin hangar", search_mode="bm25",
                                   kb_id="notes"))["hits"]
        hits = await until(found, "fresh.txt searchable beside the FIFOs", FOUND_WITHIN)
        assert hits[0]["source"] == "docs/fresh.txt"
        await settled(answered, "notes")
        assert await names(answered, "notes") == {"docs/a.txt", "docs/fresh.txt"}


def indexed_names(folder: Path) -> set[str]:
    conn = fulltext.connect(folder / fulltext.FILENAME, readonly=True)
    try:
        return {s["name"] for s in fulltext.list_sources(conn)}
    finally:
        conn.close()


def test_the_watch_field_is_checked(tmp_path):
    kb = kbmod.open_or_create(tmp_path, "k")
    assert kb.watch is True  # on unless config.json says otherwise
    for value, expected in ((False, False), ("poll", "poll")):
        (kb.folder / "config.json").write_text(json.dumps({"watch": value}), encoding="utf-8")
        assert kbmod.load(tmp_path, "k").watch == expected
    (kb.folder / "config.json").write_text(json.dumps({"watch": "yes"}), encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match="field 'watch' must be true .* not 'yes'"):
        kbmod.load(tmp_path, "k")


MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
server:/export /mnt/nfs nfs4 rw,relatime 0 0
//nas/docs /mnt/nas\\040docs cifs rw 0 0
/dev/vdb /mnt/nfs/local ext4 rw 0 0
"""


def test_network_mounts_are_polled():
    assert watcher.mount_type("/home/me/docs", MOUNTS) == "ext4"
    assert watcher.mount_type("/mnt/nfs/contracts", MOUNTS) == "nfs4"
    assert watcher.mount_type("/mnt/nas docs/x", MOUNTS) == "cifs"
    assert watcher.mount_type("/mnt/nfs/local/x", MOUNTS) == "ext4"  # the longest mount wins
    assert watcher.mount_type("/mnt/nfsx", MOUNTS) == "ext4"  # a name prefix is no parent
    assert not watcher.on_network_drive(Path(__file__).parent)


def test_stop_ends_every_thread(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "alpha")
    make_kb(tmp_path / "base", "k", [docs])
    watch = watcher.Watcher(tmp_path / "base").start()
    deadline = time.monotonic() + 10
    while not watch.status("k").get("folders"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    threads = [watch.ticker, *(w.thread for w in watch.kbs["k"].folders.values())]
    start = time.monotonic()
    watch.stop()
    assert not any(t.is_alive() for t in threads) and time.monotonic() - start < 2
    assert watch.status("k") == {"enabled": False, "state": "stopped"}
