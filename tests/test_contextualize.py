"""contextualize.py against small servers on 127.0.0.1 that speak each chat API's real wire
format (Anthropic messages, OpenAI chat completions, Ollama chat), through the real ingest
pipeline, SQLite, FTS5 and Chroma: what is sent, what is stored, where the context goes (BM25
tokens and embedded text, never hits), staleness and scope `contextualization`, failures.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import JsonApi
from test_embedders import Provider

import chroma_store
import contextualize
import fulltext
import ingest
import kb as kbmod
import search
from index import exact, segment
from pipeline.indexer import PAUSE_ENV
from providers import chat
from ranking.request import SearchRequest

MARKER = "zephyrkappa"  # a word only the model's contexts contain
MARKER_TOKEN = segment.prose_tokens(MARKER)[0]  # as the chunks' BM25 tokens hold it (a stem)
KEYS = {"anthropic": ("ANTHROPIC_API_KEY", "sk-ant-test-777"),
        "openai": ("OPENAI_API_KEY", "sk-test-4242"), "ollama": (None, None)}
MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4.1-mini", "ollama": "qwen2.5:7b"}
DOCS = {"harbour.txt": "The harbour crane lifts containers from the ships.\nIt was built "
                       "in 1970 and repainted in 2004.",
        "tide.txt": "Tide tables for March: high water at 06:12 at the pier.",
        "bakery.txt": "The bakery opens at seven and sells rye bread."}
PATHS = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions", "ollama": "/api/chat"}


class LLM(JsonApi):
    """One provider's chat API on 127.0.0.1: records every request; `script` holds canned
    (status, headers, body) answers for the next requests; a passage holding `refuse` gets a
    400; otherwise it answers a context naming the title, the model and MARKER."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.key = KEYS[kind][1]
        self.refuse: str | None = None
        super().__init__()

    def passages(self) -> list[str]:
        return [passage_of(r["body"]) for r in self.requests]

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        assert path == PATHS[self.kind], path
        if self.kind == "anthropic" and headers.get("x-api-key") != self.key:
            return 401, {}, {"type": "error", "error": {"type": "authentication_error",
                                                        "message": "invalid x-api-key"}}
        if self.kind == "openai" and headers.get("authorization") != f"Bearer {self.key}":
            return 401, {}, {"error": {"message": "Incorrect API key provided.",
                                       "type": "invalid_request_error",
                                       "code": "invalid_api_key"}}
        passage = passage_of(body)
        if self.refuse and self.refuse in passage:
            return 400, {}, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "prompt is too long"}}
        title = re.search(r"Document title: (.*)", user_text(body)).group(1)
        text = (f"**CONTEXT:** From {title}: {passage.split()[1]} notes.\n"
                f"**KEYWORDS:** {MARKER}, {body['model'].replace(':', ' ')}")
        if self.kind == "anthropic":
            return 200, {}, {"id": "msg_01", "type": "message", "role": "assistant",
                             "model": body["model"], "content": [{"type": "text", "text": text}],
                             "stop_reason": "end_turn", "stop_sequence": None,
                             "usage": {"input_tokens": 90, "output_tokens": 20}}
        if self.kind == "openai":
            return 200, {}, {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                             "model": body["model"], "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                             "usage": {"prompt_tokens": 90, "completion_tokens": 20,
                                       "total_tokens": 110}}
        return 200, {}, {"model": body["model"], "created_at": "2025-01-01T00:00:00Z",
                         "message": {"role": "assistant", "content": text}, "done": True,
                         "done_reason": "stop", "eval_count": 20}


def user_text(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def passage_of(body: dict) -> str:
    return re.search(r"<passage>\n(.*)\n</passage>", user_text(body), re.DOTALL).group(1)


@pytest.fixture(params=["anthropic", "openai", "ollama"])
def llm(request, monkeypatch: pytest.MonkeyPatch):
    """Each provider's server, with its key in the environment."""
    server = LLM(request.param)
    env, key = KEYS[request.param]
    if env:
        monkeypatch.setenv(env, key)
    yield server
    server.close()


def block(server: LLM, **extra) -> dict:
    """The contextualizer block for this server (an OpenAI-compatible baseUrl other than
    OpenAI's own needs its key preset named)."""
    preset = {"apiKeyPreset": "OpenAI"} if server.kind == "openai" else {}
    return {"provider": server.kind, "model": MODELS[server.kind], "baseUrl": server.url,
            **preset, **extra}


def make_kb(tmp_path: Path, contextualizer: dict, embedding: dict | None = None,
            docs: dict[str, str] | None = None) -> kbmod.KnowledgeBase:
    """KB `docs` syncing tmp_path/docs (BM25 only unless `embedding` is given)."""
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for name, text in (docs or {}).items():
        (folder / name).write_text(text, encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path / "base", "docs")
    config = {"id": "docs", "sourcePaths": [str(folder)], "contextualizer": contextualizer,
              "embedding": embedding or {"provider": "none"}}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "docs")


def chunk_rows(kb: kbmod.KnowledgeBase) -> dict[str, dict]:
    """source -> its (only) chunk's row, as stored."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return {r["source"].split("/")[-1]: dict(r) for r in conn.execute(
            "SELECT s.name AS source, s.ingested_at, c.* FROM chunks c"
            " JOIN sources s ON s.id = c.source_id")}
    finally:
        conn.close()


def bm25_sources(kb: kbmod.KnowledgeBase, query: str) -> list[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return sorted(h.source.split("/")[-1]
                      for h in search.Searcher(conn).search(SearchRequest(query, 10, "bm25")))
    finally:
        conn.close()


def kb_state(kb: kbmod.KnowledgeBase) -> dict:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return contextualize.state(conn, kb.contextualizer)
    finally:
        conn.close()


def test_each_provider_speaks_its_format_and_the_context_is_searched_not_shown(
        tmp_path, llm) -> None:
    kb = make_kb(tmp_path, block(llm, concurrency=2), docs=DOCS)
    summary = ingest.sync(kb)
    assert (summary.indexed, summary.failed, summary.warnings) == (3, [], [])

    assert sorted(llm.passages()) == sorted(DOCS.values())
    for request in llm.requests:
        body, headers = request["body"], request["headers"]
        assert request["path"] == PATHS[llm.kind]
        assert body["model"] == MODELS[llm.kind]
        assert re.search(r"Document title: docs/\w+\.txt", user_text(body))
        system = body["system"] if llm.kind == "anthropic" else body["messages"][0]["content"]
        assert system == contextualize.SYSTEM_PROMPT
        if llm.kind == "anthropic":
            assert headers["x-api-key"] == llm.key
            assert headers["anthropic-version"] == "2023-06-01"
            assert body["max_tokens"] == contextualize.MAX_OUTPUT_TOKENS
            assert [m["role"] for m in body["messages"]] == ["user"]
        elif llm.kind == "openai":
            assert headers["authorization"] == f"Bearer {llm.key}"
            assert body["max_tokens"] == contextualize.MAX_OUTPUT_TOKENS  # not OpenAI's own URL
        else:
            assert "authorization" not in headers
            assert body["stream"] is False
            assert body["options"]["num_ctx"] == chat.DEFAULT_NUM_CTX

    rows = chunk_rows(kb)
    model, prompt = contextualize.signature_of(kb.contextualizer)
    words = MODELS[llm.kind].replace(":", " ")
    assert rows["tide.txt"]["llm_context"] == (f"From docs/tide.txt: tables notes.\n"
                                               f"{MARKER}, {words}")
    assert {(r["llm_state"], r["llm_model"], r["llm_prompt"]) for r in rows.values()} == {
        ("done", model, prompt)}
    assert rows["tide.txt"]["context"] == ""  # the sheet-header column is left alone
    assert MARKER_TOKEN in rows["tide.txt"]["tokens"].split()
    # a word only in the contexts finds every chunk; hits and read_range show the raw lines
    assert bm25_sources(kb, MARKER) == sorted(DOCS)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        hit = search.Searcher(conn).search(SearchRequest(f"{MARKER} tide", 1, "bm25"))[0]
        assert hit.text == DOCS["tide.txt"]
        assert [t for _, t in fulltext.page_lines(conn, "docs/tide.txt", 1)] == [
            DOCS["tide.txt"]]
        assert exact.exact_search(conn, MARKER, 10) == []
    finally:
        conn.close()
    assert kb_state(kb) == {"provider": llm.kind, "model": MODELS[llm.kind], "contextualized": 3,
                            "stale": 0, "pending": 0, "failed": 0, "stopped": None}


def test_the_context_is_embedded_with_the_chunk_and_chroma_keeps_the_raw_text(
        tmp_path, monkeypatch) -> None:
    llm, embedder = LLM("ollama"), Provider("openai")
    monkeypatch.setenv("OPENAI_API_KEY", embedder.key)
    try:
        kb = make_kb(tmp_path, block(llm), {"provider": "openai", "baseUrl": embedder.url,
                                            "model": "text-embedding-3-small",
                                            "apiKeyPreset": "OpenAI"}, DOCS)
        assert ingest.sync(kb).embedded == 3
        embedded = [t for r in embedder.requests for t in r["body"]["input"]]
        assert len(embedded) == 3
        for text in DOCS.values():  # each chunk embedded once, after its context
            assert sum(t.endswith(text) and MARKER in t for t in embedded) == 1
        store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
        conn = fulltext.connect(kb.fulltext_path, readonly=True)
        try:
            stored = store._open().get(include=["documents"])["documents"]
            assert stored == [None] * 3  # the text lives in SQLite only (issue 16)
            hits = search.Searcher(conn, store).search(SearchRequest(f"{MARKER} rye", 3, "vector"))
            assert hits[0].source == "docs/bakery.txt" and hits[0].text == DOCS["bakery.txt"]
        finally:
            store.close()
            conn.close()
    finally:
        llm.close()
        embedder.close()


def test_a_changed_model_is_stale_and_scope_contextualization_redoes_only_those(
        tmp_path, monkeypatch) -> None:
    llm = LLM("anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", llm.key)
    try:
        kb = make_kb(tmp_path, block(llm), docs=DOCS)
        ingest.sync(kb)
        before = chunk_rows(kb)
        # the user picks another model, then a new file comes in under it
        kb = make_kb(tmp_path, block(llm, model="claude-sonnet-4-5"),
                     docs={"mill.txt": "The windmill grinds barley."})
        llm.requests.clear()
        ingest.sync(kb)
        assert llm.passages() == ["The windmill grinds barley."]
        assert kb_state(kb) | {"action": None} == {
            "provider": "anthropic", "model": "claude-sonnet-4-5", "contextualized": 1,
            "stale": 3, "pending": 0, "failed": 0, "stopped": None, "action": None}
        assert "scope 'contextualization'" in kb_state(kb)["action"]

        llm.requests.clear()
        extracted = []
        monkeypatch.setattr("extract.extract", lambda *a: extracted.append(a))
        summary = ingest.sync(kb, "contextualization")
        assert extracted == [] and summary.indexed == 0
        assert sorted(llm.passages()) == sorted(DOCS.values())  # exactly the stale ones
        assert {r["body"]["model"] for r in llm.requests} == {"claude-sonnet-4-5"}
        after = chunk_rows(kb)
        for name in DOCS:
            assert after[name]["ingested_at"] == before[name]["ingested_at"]
            assert after[name]["chunk_id"] == before[name]["chunk_id"]
            assert after[name]["llm_context"].endswith("claude-sonnet-4-5")
        assert kb_state(kb)["contextualized"] == 4 and kb_state(kb)["stale"] == 0
        assert bm25_sources(kb, "sonnet") == sorted([*DOCS, "mill.txt"])
        assert bm25_sources(kb, "haiku") == []  # the old contexts' tokens are gone

        llm.requests.clear()
        ingest.sync(kb, "contextualization")
        assert llm.requests == []  # nothing stale is left
    finally:
        llm.close()


def test_a_refused_key_stops_for_the_run_naming_the_variable(tmp_path, monkeypatch) -> None:
    llm = LLM("anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-31337")
    try:
        kb = make_kb(tmp_path, block(llm, concurrency=1), docs=DOCS)
        summary = ingest.sync(kb)
        assert summary.indexed == 3 and summary.failed == []
        assert len(llm.requests) == 1  # stopped after the first 401
        [warning] = [w["warning"] for w in summary.warnings]
        assert "ANTHROPIC_API_KEY" in warning and "HTTP 401" in warning
        assert "sk-ant-wrong-31337" not in json.dumps(summary.__dict__)
        state = kb_state(kb)
        assert (state["pending"], state["contextualized"]) == (3, 0)
        assert "ANTHROPIC_API_KEY" in state["stopped"]
        assert bm25_sources(kb, "crane") == ["harbour.txt"]  # indexed without a context
        assert {r["llm_state"] for r in chunk_rows(kb).values()} == {None}

        # the user sets the right key: the next run (no file changed) gives the contexts
        monkeypatch.setenv("ANTHROPIC_API_KEY", llm.key)
        summary = ingest.sync(kb)
        assert summary.warnings == [] and summary.unchanged == 3
        assert kb_state(kb)["contextualized"] == 3 and kb_state(kb)["stopped"] is None
    finally:
        llm.close()


def test_429_backs_off_then_succeeds(tmp_path, monkeypatch) -> None:
    llm = LLM("openai")
    monkeypatch.setenv("OPENAI_API_KEY", llm.key)
    llm.script = [(429, {"Retry-After": "0"}, {"error": {"message": "Rate limit reached",
                                                         "type": "requests",
                                                         "code": "rate_limit_exceeded"}}),
                  (503, {"Retry-After": "0"}, {"error": {"message": "overloaded"}})]
    try:
        kb = make_kb(tmp_path, block(llm), docs={"tide.txt": DOCS["tide.txt"]})
        assert ingest.sync(kb).warnings == []
        assert len(llm.requests) == 3
        assert chunk_rows(kb)["tide.txt"]["llm_state"] == "done"
    finally:
        llm.close()


def test_a_failing_chunk_is_retried_on_three_runs_then_given_up(tmp_path, monkeypatch) -> None:
    llm = LLM("ollama")
    llm.refuse = "bakery"
    try:
        kb = make_kb(tmp_path, block(llm), docs=DOCS)
        ingest.sync(kb)
        rows = chunk_rows(kb)
        assert (rows["bakery.txt"]["llm_state"], rows["bakery.txt"]["llm_attempts"]) == (
            "failed", 1)
        assert "HTTP 400" in rows["bakery.txt"]["llm_error"]
        assert rows["tide.txt"]["llm_state"] == "done"
        assert bm25_sources(kb, "rye") == ["bakery.txt"]  # still found by its own words
        for run in (2, 3, 4):
            llm.requests.clear()
            ingest.sync(kb)
            tried = [p for p in llm.passages() if "bakery" in p]
            assert len(tried) == (1 if run <= 3 else 0)
        assert chunk_rows(kb)["bakery.txt"]["llm_attempts"] == 3
        assert kb_state(kb)["failed"] == 1 and kb_state(kb)["contextualized"] == 2
    finally:
        llm.close()


def test_unchanged_text_of_a_changed_file_keeps_its_context(tmp_path) -> None:
    llm = LLM("ollama")
    pages = ["The harbour crane lifts containers.", "Tide tables for March."]
    try:
        kb = make_kb(tmp_path, block(llm), docs={"book.txt": "\f".join(pages)})
        ingest.sync(kb)
        assert len(llm.requests) == 2
        # a line is inserted above page 1's text (its chunk id changes) and page 2 changes
        (tmp_path / "docs" / "book.txt").write_text(
            "Foreword.\n" + pages[0] + "\fTide tables for April.", encoding="utf-8")
        llm.requests.clear()
        ingest.sync(kb)
        assert sorted(llm.passages()) == ["Foreword.\nThe harbour crane lifts containers.",
                                          "Tide tables for April."]
    finally:
        llm.close()


def test_a_moved_chunk_keeps_its_context_and_its_tokens(tmp_path) -> None:
    llm = LLM("ollama")
    pages = ["The harbour crane lifts containers.", "Tide tables for March."]
    try:
        kb = make_kb(tmp_path, block(llm), docs={"book.txt": "\f".join(pages)})
        ingest.sync(kb)
        (tmp_path / "docs" / "book.txt").write_text(
            "Preface page.\f" + "\f".join(pages), encoding="utf-8")  # both move a page down
        llm.requests.clear()
        ingest.sync(kb)
        assert llm.passages() == ["Preface page."]
        conn = fulltext.connect(kb.fulltext_path, readonly=True)
        try:
            rows = conn.execute("SELECT page, llm_state, tokens FROM chunks ORDER BY page")
            assert [(p, s, MARKER_TOKEN in t.split()) for p, s, t in rows] == [
                (1, "done", True), (2, "done", True), (3, "done", True)]
        finally:
            conn.close()
    finally:
        llm.close()


def test_without_a_contextualizer_scope_contextualization_clears_old_contexts(tmp_path) -> None:
    llm = LLM("ollama")
    try:
        kb = make_kb(tmp_path, block(llm), docs=DOCS)
        ingest.sync(kb)
        kb = make_kb(tmp_path, {"provider": "none"})
        assert kb_state(kb)["stale"] == 3
        assert bm25_sources(kb, MARKER) == sorted(DOCS)  # kept until the user asks
        ingest.sync(kb, "contextualization")
        assert bm25_sources(kb, MARKER) == []
        assert kb_state(kb) == {"provider": "none", "model": None, "contextualized": 0,
                                "stale": 0, "pending": 0, "failed": 0, "stopped": None}
        assert chunk_rows(kb)["tide.txt"]["tokens"] == " ".join(
            segment.prose_tokens("tide\nTide tables for March: high water at 06:12 at the pier."))
    finally:
        llm.close()


@pytest.mark.parametrize("answer, expected", [
    ("CONTEXT: A tide table.\nKEYWORDS: tide, 조수", "A tide table.\ntide, 조수"),
    ("<think>the user wants</think>\n**Context**: 조수표의 일부.\n- **Keywords:** 조수, tide",
     "조수표의 일부.\n조수, tide"),
    ("Just a sentence   without labels.", "Just a sentence without labels."),
    ("CONTEXT: " + "word " * 300, ("word " * 20).strip()),
])
def test_answers_are_parsed_and_bounded(answer, expected) -> None:
    assert contextualize.parse_answer(answer, 100) == expected


@pytest.mark.parametrize("contextualizer, message", [
    ({"provider": "gpt"}, "'contextualizer.provider' is 'gpt'; known providers"),
    ({"provider": "anthropic"}, "'contextualizer.model' is needed"),
    ({"provider": "ollama", "model": "m", "maxChars": 5}, "'contextualizer.maxChars' must be"),
    ({"provider": "openai", "model": "m", "apiKey": "sk-1"}, "'contextualizer.apiKey' is not"),
    ({"provider": "openai", "model": "m", "apiKeyEnv": "sk-live-123"}, "not the key itself"),
])
def test_a_wrong_contextualizer_block_is_refused_naming_the_field(
        tmp_path, contextualizer, message) -> None:
    kb = kbmod.open_or_create(tmp_path, "docs")
    (kb.folder / "config.json").write_text(json.dumps({"contextualizer": contextualizer}),
                                           encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=re.escape(message)):
        kbmod.load(tmp_path, "docs")


def test_kill_9_mid_embedding_keeps_the_contexts_and_a_changed_model_reembeds_them(
        tmp_path, monkeypatch) -> None:
    llm, embedder = LLM("ollama"), Provider("openai")
    monkeypatch.setenv("OPENAI_API_KEY", embedder.key)
    text = "\n".join(f"Paragraph {i} about the harbour, the cranes and the tides. " * 12
                     for i in range(40))  # 40 chunks: more than one embedding batch
    try:
        kb = make_kb(tmp_path, block(llm), {"provider": "openai", "baseUrl": embedder.url,
                                            "model": "text-embedding-3-small",
                                            "apiKeyPreset": "OpenAI"}, {"long.txt": text})
        env = {k: v for k, v in os.environ.items() if k != PAUSE_ENV}
        proc = subprocess.Popen(
            [sys.executable, str(Path(ingest.__file__)), "--kb", "docs", "--base-path",
             str(tmp_path / "base"), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", env={**env, PAUSE_ENV: "mid-embedding"})
        try:
            for line in proc.stderr:
                if "paused at mid-embedding" in line:
                    break
            else:
                pytest.fail("ingest never reached mid-embedding")
        finally:
            proc.kill()
            proc.wait(timeout=30)
        rows = chunk_rows_all(kb)
        chunks = len(rows)
        assert chunks >= 40 and {r["llm_state"] for r in rows} == {"done"}  # before vectors
        assert {r["embed_state"] for r in rows} == {"indexed", "pending"}
        calls = len(llm.requests)

        embedder.requests.clear()
        summary = ingest.sync(kb)
        assert (summary.indexed, summary.unchanged) == (0, 1)  # not extracted again
        assert len(llm.requests) == calls  # nor contextualized again
        inputs = [t for r in embedder.requests for t in r["body"]["input"]]
        assert 0 < len(inputs) < chunks and all(MARKER in t for t in inputs)
        assert {r["embed_state"] for r in chunk_rows_all(kb)} == {"indexed"}

        # another model: scope contextualization re-embeds exactly the re-contextualized chunks
        kb = make_kb(tmp_path, block(llm, model="llama3.2"), kb.embedding)
        embedder.requests.clear()
        ingest.sync(kb, "contextualization")
        inputs = [t for r in embedder.requests for t in r["body"]["input"]]
        assert len(inputs) == chunks and all("llama3.2" in t for t in inputs)
    finally:
        llm.close()
        embedder.close()


def chunk_rows_all(kb: kbmod.KnowledgeBase) -> list[dict]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM chunks")]
    finally:
        conn.close()
