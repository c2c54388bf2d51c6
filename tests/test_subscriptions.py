"""Completion and change notifications through fastmcp's Client over a real stdio `server.py`
(issue 49 item 6: `completion/complete`, `resources/subscribe` and `resources/unsubscribe`
answered -32601 Method not found). Two BM25 KBs follow real folders; every sync is
`ingest.py --kb ID` run as a subprocess, as the user or the queue runner runs it, and the
server hears of it by itself. The client speaks the handshake-era protocol the hosts speak
(`mode="legacy"`): on 2026-07-28 these notifications need `subscriptions/listen`."""

from __future__ import annotations

import asyncio
import sys
import time
import warnings
from pathlib import Path

import pytest
import pytest_asyncio
from conftest import bm25_kb, clean_env, ingest_cli
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from fastmcp.client.transports import StdioTransport
from mcp_types import PromptReference, ResourceTemplateReference

from surface import resources, subscriptions

REPO = Path(__file__).resolve().parent.parent
module_loop = pytest.mark.asyncio(loop_scope="module")
NOTES = {"guide.txt": "Install the pump.\n", "pages.txt": "one\n\ftwo\n\fthree\n",
         "reports/q1.txt": "first quarter\n", "reports/q2.txt": "second quarter\n"}
BULK = 120  # sources in `archive` under bulk/: more than one completion holds
WAIT = 15.0  # seconds a notification may take: a poll (1 s) after ingest.py has committed


class Heard(MessageHandler):
    """The change notifications the client received, in order."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.list_changed = 0

    async def on_resource_updated(self, message) -> None:
        self.updated.append(str(message.params.uri))

    async def on_resource_list_changed(self, message) -> None:
        self.list_changed += 1


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """(base folder, the notes KB's folder): `notes` and `archive`, synced by ingest.py."""
    tmp = tmp_path_factory.mktemp("subscriptions")
    base, notes, archive = tmp / "base", tmp / "notes", tmp / "archive"
    write(notes, NOTES)
    write(archive, {f"bulk/n{i:03d}.txt": f"note {i}\n" for i in range(BULK)})
    for kb_id, folder in (("notes", notes), ("archive", archive)):
        bm25_kb(base, kb_id, [folder])
        ingest_cli("--kb", kb_id, base=base)
    return base, notes


@pytest.fixture(scope="module")
def heard() -> Heard:
    return Heard()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(library, heard, tmp_path_factory):
    base, _notes = library
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(base)],
                               env=clean_env(), cwd=str(REPO), keep_alive=False, log_file=log)
    async with Client(transport, timeout=120, mode="legacy", message_handler=heard) as c:
        yield c
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


async def until(check, seconds: float = WAIT) -> bool:
    """Wait until check() holds, at most `seconds`; whether it did."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def subscribe(client, uri: str, on: bool = True) -> None:
    with warnings.catch_warnings():  # the SDK marks them deprecated for 2026-07-28 only
        warnings.simplefilter("ignore")
        await (client.session.subscribe_resource if on else
               client.session.unsubscribe_resource)(uri)


def sync(base: Path) -> None:
    """ingest.py --kb notes in a subprocess: what the user, the queue runner and so the
    folder watcher's jobs run."""
    ingest_cli("--kb", "notes", base=base)


# ----------------------------------------------------------------------------- completion


@module_loop
async def test_the_server_offers_completions_and_subscriptions(client):
    capabilities = client.initialize_result.capabilities
    assert capabilities.completions is not None
    assert capabilities.resources.subscribe is True
    assert capabilities.resources.list_changed is True


@module_loop
async def test_kb_ids_complete_in_templates_and_the_cite_prompt(client):
    source = ResourceTemplateReference(uri=resources.SOURCE_TEMPLATE)
    done = await client.complete(source, {"name": "kb_id", "value": "no"})
    assert (done.values, done.total, done.has_more) == (["notes"], 1, False)
    done = await client.complete(PromptReference(name="cite"), {"name": "kb_id", "value": ""})
    assert done.values == ["archive", "notes"]
    done = await client.complete(PromptReference(name="cite"), {"name": "question",
                                                                "value": "wh"})
    assert done.values == []  # a question is the user's own words


@module_loop
async def test_a_source_name_prefix_completes_within_the_kb_filled_in(client):
    page = ResourceTemplateReference(uri=resources.PAGE_TEMPLATE)
    done = await client.complete(page, {"name": "source", "value": "notes/rep"},
                                 {"kb_id": "notes"})
    assert (done.values, done.total, done.has_more) == (
        ["notes/reports/q1.txt", "notes/reports/q2.txt"], 2, False)
    done = await client.complete(page, {"name": "page", "value": ""},
                                 {"kb_id": "notes", "source": "notes/pages.txt"})
    assert done.values == ["1", "2", "3"]
    done = await client.complete(page, {"name": "source", "value": "r"}, {"kb_id": "nope"})
    assert done.values == []  # an unknown KB offers nothing, and is no error


@module_loop
async def test_a_completion_holds_at_most_100_values_and_says_how_many_match(client):
    source = ResourceTemplateReference(uri=resources.SOURCE_TEMPLATE)
    done = await client.complete(source, {"name": "source", "value": "archive/bulk/n"},
                                 {"kb_id": "archive"})
    assert len(done.values) == 100 and done.values[0] == "archive/bulk/n000.txt"
    assert (done.total, done.has_more) == (BULK, True)


# ----------------------------------------------------------------------------- subscriptions


@module_loop
async def test_a_synced_change_is_told_to_the_source_s_subscribers_only(client, heard,
                                                                          library):
    base, notes = library
    guide = resources.source_uri("notes", "notes/guide.txt")  # named from its folder's name
    second_page = resources.source_uri("notes", "notes/pages.txt", 2)
    await subscribe(client, guide)
    await subscribe(client, second_page)
    await subscribe(client, "test://watched-resource")  # another server's URI: kept, silent
    (notes / "guide.txt").write_text("Install the pump, then prime it.\n", encoding="utf-8")
    sync(base)
    assert await until(lambda: guide in heard.updated), heard.updated
    assert heard.updated == [guide]  # pages.txt did not change

    await subscribe(client, guide, on=False)
    (notes / "guide.txt").write_text("Install the pump; prime it twice.\n", encoding="utf-8")
    (notes / "pages.txt").write_text("one\n\ftwo, revised\n\fthree\n", encoding="utf-8")
    sync(base)
    assert await until(lambda: second_page in heard.updated), heard.updated
    await asyncio.sleep(2 * subscriptions.POLL_SECONDS)  # a later poll would tell guide too
    assert heard.updated == [guide, second_page]


@module_loop
async def test_sources_that_come_or_go_change_the_resource_list(client, heard, library):
    base, notes = library
    before = heard.list_changed
    (notes / "reports" / "q3.txt").write_text("third quarter\n", encoding="utf-8")
    sync(base)
    assert await until(lambda: heard.list_changed > before)
    listed = await client.list_resources()
    assert resources.source_uri("notes", "notes/reports/q3.txt") in {str(r.uri)
                                                                     for r in listed}

    before = heard.list_changed
    (notes / "reports" / "q3.txt").unlink()
    sync(base)
    assert await until(lambda: heard.list_changed > before)


def test_a_uri_names_its_source_and_other_uris_none():
    korean = "계약서 2024/임대 (최종).txt"
    assert subscriptions.parse_uri(resources.source_uri("kb", korean)) == ("kb", korean)
    assert subscriptions.parse_uri(resources.source_uri("kb", korean, 12)) == ("kb", korean)
    for other in ("test://watched-resource", "linecite://kb", "linecite://kb/a/b/c",
                  "linecite://kb/a/x", "linecite:///a"):
        assert subscriptions.parse_uri(other) is None
