"""rerank.py against small servers on 127.0.0.1 that speak each API's real wire format:
the Cohere-style rerank API (Cohere, Jina, vLLM, llama.cpp), text-embeddings-inference's
/rerank, and the three chat APIs for the listwise `llm` reranker. What is sent (model, query,
documents/texts, top_n, the prompt and its bounds), the order returned, the time budget
(a slow answer fails within it, a retry only when time is left), errors for 5xx, refused
keys, bad JSON and wrong indices, and the `rerank` block's validation in kb.py.
"""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import JsonApi, free_port

import kb as kbmod
from common import limits
from providers import embedders
from ranking import rerank
from ranking.rerank import RerankError, parse_ranking, reranker_for

KEY_ENV, KEY = "LINECITE_TEST_RERANK_KEY", "rk-test-5150"
QUERY = "harbour crane"
DOCS = ["The bakery sells rye bread.",  # 0: no query word
        "The crane lifts containers.",  # 1: one
        "The harbour crane was repainted; the harbour is busy.",  # 2: three
        "Tide tables for the harbour."]  # 3: one
ORDER = [2, 1, 3, 0]  # by overlap, ties in the given order


def overlap(query: str, text: str) -> float:
    """The stand-in model's relevance: query words found in the text, counted with repeats."""
    words = re.findall(r"\w+", text.lower())
    return float(sum(words.count(w) for w in set(re.findall(r"\w+", query.lower()))))


class RerankApi(JsonApi):
    """A cross-encoder server: `cohere` answers POST .../rerank like Cohere (results sorted
    best first), `tei` like text-embeddings-inference (a bare list, here left in input
    order: the client must sort). `delay` holds an answer back (until close); `key` is the
    Bearer token it wants (None: no auth)."""

    def __init__(self, kind: str, key: str | None = KEY) -> None:
        self.kind, self.key, self.delay = kind, key, 0.0
        self.release = threading.Event()
        super().__init__()

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        if self.delay:
            self.release.wait(self.delay)
        if self.key and headers.get("authorization") != f"Bearer {self.key}":
            return 401, {}, {"message": "invalid api token"}
        if self.kind == "tei":
            return 200, {}, [{"index": i, "score": overlap(body["query"], t) / 10}
                             for i, t in enumerate(body["texts"])]
        scores = [(i, overlap(body["query"], d) / 10) for i, d in enumerate(body["documents"])]
        scores.sort(key=lambda pair: -pair[1])
        return 200, {}, {"id": "e0a1", "results": [{"index": i, "relevance_score": s}
                                                   for i, s in scores[:body["top_n"]]],
                         "meta": {"billed_units": {"search_units": 1}}}

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed endpoint is tried again at once (its breaker pauses 0 s): a port another test
    left failing must not skip this test's rerank. The breaker test sets its own pause."""
    monkeypatch.setenv(embedders.BREAKER_PAUSE_ENV, "0")


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(params=["cohere", "tei"])
def server(request, keyed):
    api = RerankApi(request.param)
    yield api
    api.close()


def block(api, **extra) -> dict:
    model = {"model": "rerank-v3.5"} if api.kind == "cohere" else {}
    return {"provider": api.kind, "baseUrl": api.url, "apiKeyEnv": KEY_ENV, **model, **extra}


def scores_for(docs: list[str]) -> list[tuple[int, float]]:
    ranked = sorted(range(len(docs)), key=lambda i: (-overlap(QUERY, docs[i]), i))
    return [(i, overlap(QUERY, docs[i]) / 10) for i in ranked]


# --- the wire formats ----------------------------------------------------------------------


def test_cohere_request_and_ranking(keyed) -> None:
    api = RerankApi("cohere")
    try:
        got = reranker_for(block(api)).rerank(QUERY, DOCS)
        assert got == scores_for(DOCS) and [i for i, _ in got] == ORDER
        [request] = api.requests
        assert request["path"] == "/v1/rerank"
        assert request["body"] == {"model": "rerank-v3.5", "query": QUERY, "documents": DOCS,
                                   "top_n": 4}
        assert request["headers"]["authorization"] == f"Bearer {KEY}"
    finally:
        api.close()


def test_tei_request_and_ranking_sorted_by_the_client(keyed) -> None:
    api = RerankApi("tei", key=None)  # a local TEI without --api-key
    try:
        got = reranker_for({"provider": "tei", "baseUrl": api.url + "/"}).rerank(QUERY, DOCS)
        assert [i for i, _ in got] == ORDER and got[0] == (2, 0.3)
        [request] = api.requests
        assert request["path"] == "/rerank" and "authorization" not in request["headers"]
        assert request["body"] == {"query": QUERY, "texts": DOCS, "truncate": True}
    finally:
        api.close()


@pytest.mark.parametrize("suffix, path", [("", "/v1/rerank"), ("/v2", "/v2/rerank"),
                                          ("/v3/", "/v3/rerank"), ("/rerank", "/rerank"),
                                          ("/v1/reranking", "/v1/reranking/v1/rerank")])
def test_cohere_url_rules(keyed, suffix: str, path: str) -> None:
    # /v2: Cohere's current API; /v3: OpenVINO Model Server; /rerank: llama.cpp and vLLM
    # as they are; any other path is taken for a host prefix (llama.cpp's /v1/reranking is
    # reached through its /v1/rerank alias, not this way)
    api = RerankApi("cohere")
    try:
        reranker_for(block(api, baseUrl=api.url + suffix)).rerank(QUERY, DOCS[:1])
        assert api.requests[0]["path"] == path
    finally:
        api.close()


def test_cohere_without_a_base_url_is_cohere_with_its_key(monkeypatch) -> None:
    monkeypatch.delenv(rerank.COHERE_KEY_ENV, raising=False)
    reranker = reranker_for({"provider": "cohere", "model": "rerank-v3.5"})
    assert reranker.where == "https://api.cohere.com/v2/rerank"
    with pytest.raises(RerankError, match=f"set the environment variable {rerank.COHERE_KEY_ENV}"):
        reranker.rerank(QUERY, DOCS)  # refused before any request: no key, no network


def test_documents_are_cut_and_inputs_bounded(server) -> None:
    reranker = reranker_for(block(server, topN=3))
    long_doc = "harbour " * 1000  # 8,000 characters
    assert reranker.rerank(QUERY, [long_doc, "crane"])[0][0] == 0
    sent = server.requests[0]["body"]
    texts = sent["documents"] if server.kind == "cohere" else sent["texts"]
    assert [len(t) for t in texts] == [rerank.DOCUMENT_CHARS, 5]
    with pytest.raises(ValueError, match=r"4 documents to rerank; 'rerank.topN' is 3"):
        reranker.rerank(QUERY, DOCS)
    with pytest.raises(limits.UserError, match="the limit is 4,000"):
        reranker.rerank("x" * (limits.MAX_QUERY_CHARS + 1), DOCS[:1])
    assert reranker.rerank(QUERY, []) == []
    assert len(server.requests) == 1  # none of the refused or empty calls reached it


# --- the time budget -----------------------------------------------------------------------


def test_a_slow_answer_fails_within_the_budget(server) -> None:
    server.delay = 5.0
    reranker = reranker_for(block(server, timeout=0.5))
    started = time.monotonic()
    with pytest.raises(RerankError, match=r"did not rerank within the budget of 0.5 s; .*"
                                          r"raise 'rerank.timeout'"):
        reranker.rerank(QUERY, DOCS)
    elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 0.8, elapsed
    assert len(server.requests) == 1


def test_a_5xx_is_retried_while_the_budget_lasts(server) -> None:
    server.script = [(503, {}, {"message": "model loading"})] * 2
    started = time.monotonic()
    got = reranker_for(block(server, timeout=2)).rerank(QUERY, DOCS)
    assert [i for i, _ in got] == ORDER and len(server.requests) == 3  # two backoffs
    assert time.monotonic() - started < 2 * rerank.BACKOFF + 0.5


def test_a_5xx_is_not_retried_past_the_budget(server) -> None:
    server.script = [(429, {"Retry-After": "5"}, {"message": "rate limited"})]
    started = time.monotonic()
    with pytest.raises(RerankError, match=r"answered HTTP 429 \(1 try within the 3 s budget"):
        reranker_for(block(server)).rerank(QUERY, DOCS)  # a 5 s wait does not fit in 3 s
    assert time.monotonic() - started < 0.3 and len(server.requests) == 1

    server.script = [(500, {}, {"message": "CUDA out of memory"})] * 50
    started = time.monotonic()
    with pytest.raises(RerankError, match=r"answered HTTP 500 \(\d tries within the 1 s"):
        reranker_for(block(server, timeout=1)).rerank(QUERY, DOCS)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 and 1 + 1 <= len(server.requests) <= 1 + 3, elapsed


def test_a_hung_server_is_skipped_until_its_pause_ends(server, monkeypatch) -> None:
    monkeypatch.setenv(embedders.BREAKER_PAUSE_ENV, "1")
    reranker = reranker_for(block(server, timeout=0.5))
    server.delay = 5.0
    with pytest.raises(rerank.RerankUnreachable, match=r"within the budget of 0.5 s.*"
                                                       r"searches skip the reranker until"):
        reranker.rerank(QUERY, DOCS)
    started = time.monotonic()
    for _ in range(3):  # skipped at once, no request
        with pytest.raises(rerank.RerankUnreachable, match=r"budget of 0.5 s.*skip the rerank"):
            reranker.rerank(QUERY, DOCS)
    assert time.monotonic() - started < 0.1 and len(server.requests) == 1
    server.delay = 0.0
    time.sleep(1.1)  # the pause is over: one rerank tries, and its answer closes the breaker
    assert [i for i, _ in reranker.rerank(QUERY, DOCS)] == ORDER
    assert [i for i, _ in reranker.rerank(QUERY, DOCS)] == ORDER
    assert len(server.requests) == 3


def test_no_server_fails_at_once() -> None:
    reranker = reranker_for({"provider": "tei", "baseUrl": f"http://127.0.0.1:{free_port()}"})
    started = time.monotonic()
    with pytest.raises(RerankError, match=r"cannot reach tei at .*; start it, or fix "
                                          r"'rerank.baseUrl'"):
        reranker.rerank(QUERY, DOCS)
    assert time.monotonic() - started < 1.0


# --- wrong answers -------------------------------------------------------------------------


def cohere_results(*pairs) -> dict:
    return {"results": [{"index": i, "relevance_score": s} for i, s in pairs]}


@pytest.mark.parametrize("answer, message", [
    (cohere_results((0, 0.9), (7, 0.5), (1, 0.1), (2, 0.0)), "answered index 7 for 4 documents"),
    (cohere_results((0, 0.9), (0, 0.5), (1, 0.1), (2, 0.0)), "answered index 0 twice"),
    (cohere_results((0, 0.9), (True, 0.5)), "answered index True for 4"),
    (cohere_results((0, "high"), (1, 0.5)), "answered score 'high' for index 0"),
    (cohere_results((0, 0.9), (1, 0.5)), "scored 2 of 4 documents"),
    ({"data": [{"index": 0, "relevance_score": 0.5}]}, "is not in cohere's rerank format"),
    ({"results": [{"index": 0}]}, "is not in cohere's rerank format"),
    ([1, 2, 3], "is not in cohere's rerank format"),
])
def test_an_answer_that_is_not_a_ranking_is_an_error(keyed, answer, message) -> None:
    api = RerankApi("cohere")
    api.script = [(200, {}, answer)]
    try:
        with pytest.raises(RerankError, match=re.escape(message)):
            reranker_for(block(api)).rerank(QUERY, DOCS)
    finally:
        api.close()


def test_refusals_name_what_to_fix(server, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, "rk-wrong")
    with pytest.raises(RerankError, match=f"refused the API key \\(HTTP 401\\); set the "
                                          f"environment variable {KEY_ENV} to a valid key"):
        reranker_for(block(server)).rerank(QUERY, DOCS)
    monkeypatch.setenv(KEY_ENV, KEY)
    server.script = [(413, {}, {"error": "batch size 40 > maximum allowed batch size 32",
                                "error_type": "Validation"})]
    with pytest.raises(RerankError, match=r"HTTP 413: batch size 40 > maximum allowed batch "
                                          r"size 32\); check 'rerank.model', and 'rerank.topN'"):
        reranker_for(block(server)).rerank(QUERY, DOCS)
    assert "rk-wrong" not in json.dumps(reranker_for(block(server)).__dict__, default=str)


def test_an_answer_that_is_not_json_is_an_error() -> None:
    class Html(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            data = b"<html><body>Welcome to nginx!</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        reranker = reranker_for({"provider": "tei",
                                 "baseUrl": f"http://127.0.0.1:{httpd.server_address[1]}"})
        with pytest.raises(RerankError, match="answered with something that is not JSON; "
                                              "check 'rerank.baseUrl'"):
            reranker.rerank(QUERY, DOCS)
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- the `rerank` block in config.json -------------------------------------------------------


def load_with(tmp_path, rerank_block) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(tmp_path, "docs")
    (kb.folder / "config.json").write_text(json.dumps({"rerank": rerank_block}),
                                           encoding="utf-8")
    return kbmod.load(tmp_path, "docs")


@pytest.mark.parametrize("rerank_block, message", [
    ("cohere", "field 'rerank' must be {\"provider\": \"none\"}"),
    ({"provider": "jina"}, "'rerank.provider' is 'jina'; known providers: cohere, tei, llm, "
                           "none"),
    ({"provider": "cohere"}, "'rerank.model' is needed for provider 'cohere'; name the model, "
                             "e.g. 'rerank-v3.5'"),
    ({"provider": "llm", "model": "m"}, "'rerank.chatProvider' is None; provider 'llm' asks a "
                                        "chat model through one of anthropic, openai, ollama"),
    ({"provider": "llm", "model": "m", "chatProvider": "gemini"}, "'rerank.chatProvider' is "
                                                                  "'gemini'"),
    ({"provider": "tei", "chatProvider": "ollama"}, "'rerank.chatProvider' is for provider "
                                                    "'llm' only"),
    ({"provider": "tei", "numCtx": 8192}, "'rerank.numCtx' is for provider 'llm' only"),
    ({"provider": "tei", "topN": 0}, "'rerank.topN' must be 1-100, not 0"),
    ({"provider": "tei", "topN": 500}, "'rerank.topN' must be 1-100, not 500"),
    ({"provider": "tei", "topN": 2.5}, "'rerank.topN' must be a whole number 1-100"),
    ({"provider": "tei", "timeout": 0.1}, "'rerank.timeout' must be 0.5-60, not 0.1"),
    ({"provider": "tei", "timeout": 120}, "'rerank.timeout' must be 0.5-60, not 120"),
    ({"provider": "tei", "timeout": "3s"}, "'rerank.timeout' must be seconds, 0.5-60"),
    ({"provider": "tei", "timeout": True}, "'rerank.timeout' must be 0.5-60, not True"),
    ({"provider": "llm", "model": "m", "chatProvider": "ollama", "numCtx": 100},
     "'rerank.numCtx' must be 2048-262144, not 100"),
    ({"provider": "tei", "top_n": 5}, "'rerank.top_n' is not known; known fields: provider, "
                                      "model, chatProvider"),
    ({"provider": "cohere", "model": "m", "apiKeyEnv": "co-live-123-456"}, "not the key itself"),
    ({"provider": "cohere", "model": "m", "apiKeyPreset": "Cohere"}, "'rerank.apiKeyPreset' "
                                                                     "is 'Cohere'; known"),
    ({"provider": "tei", "baseUrl": "localhost:8080"}, "'rerank.baseUrl' must look like "
                                                       "http://host:port"),
])
def test_a_wrong_rerank_block_is_refused_naming_the_field(tmp_path, rerank_block,
                                                           message) -> None:
    with pytest.raises(kbmod.ConfigError, match=re.escape(message)):
        load_with(tmp_path, rerank_block)


@pytest.mark.parametrize("rerank_block", [
    {"provider": "none"},
    {"provider": "tei", "baseUrl": "http://127.0.0.1:8080", "topN": 32, "timeout": 1.5},
    {"provider": "cohere", "model": "rerank-v3.5", "apiKeyEnv": "COHERE_API_KEY", "timeout": 3},
    {"provider": "llm", "chatProvider": "ollama", "model": "qwen2.5:7b", "numCtx": 16384,
     "topN": 20, "timeout": 20},
])
def test_a_good_rerank_block_loads_and_builds_its_reranker(tmp_path, rerank_block) -> None:
    kb = load_with(tmp_path, rerank_block)
    assert kb.rerank == rerank_block
    reranker = reranker_for(kb.rerank)
    if rerank_block["provider"] == "none":
        assert reranker is None and reranker_for(None) is None
        return
    provider = rerank_block["provider"]
    assert (reranker.provider, reranker.top_n) == (provider, rerank_block.get("topN", 30))
    assert reranker.timeout == rerank_block.get("timeout", rerank.DEFAULT_TIMEOUT[provider])


# --- listwise through a chat model ----------------------------------------------------------

CHAT_PATHS = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions",
              "ollama": "/api/chat"}


class ChatApi(JsonApi):
    """One chat API on 127.0.0.1 in its real answer shape; the model's text is `reply`
    (a string, or a function of the request body), held back `delay` seconds."""

    def __init__(self, kind: str) -> None:
        self.kind, self.delay, self.reply = kind, 0.0, "[3] > [2] > [4] > [1]"
        self.release = threading.Event()
        super().__init__()

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        assert path == CHAT_PATHS[self.kind], path
        if self.delay:
            self.release.wait(self.delay)
        text = self.reply(body) if callable(self.reply) else self.reply
        if self.kind == "anthropic":
            return 200, {}, {"id": "msg_01", "type": "message", "role": "assistant",
                             "model": body["model"], "content": [{"type": "text", "text": text}],
                             "stop_reason": "end_turn", "usage": {"input_tokens": 300,
                                                                  "output_tokens": 12}}
        if self.kind == "openai":
            return 200, {}, {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                             "model": body["model"], "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}]}
        return 200, {}, {"model": body["model"], "created_at": "2025-01-01T00:00:00Z",
                         "message": {"role": "assistant", "content": text}, "done": True}

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture(params=["anthropic", "openai", "ollama"])
def chat_api(request, keyed):
    api = ChatApi(request.param)
    yield api
    api.close()


def llm_block(api: ChatApi, **extra) -> dict:
    key = {} if api.kind == "ollama" else {"apiKeyEnv": KEY_ENV}
    return {"provider": "llm", "chatProvider": api.kind, "model": "a-chat-model",
            "baseUrl": api.url, **key, **extra}


def user_message(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def test_llm_prompt_bounds_and_ranking(chat_api) -> None:
    docs = [*DOCS[:3], "Line one\nline two " + "tide " * 200]  # 4: folded, and cut
    got = reranker_for(llm_block(chat_api)).rerank(QUERY, docs)
    assert got == [(2, 1.0), (1, 0.75), (3, 0.5), (0, 0.25)]
    [request] = chat_api.requests
    body = request["body"]
    user = user_message(body)
    assert user.startswith(f"Search query: {QUERY}\n\n4 passages (each cut to "
                           f"{rerank.PASSAGE_CHARS} characters):\n[1] {DOCS[0]}\n[2] {DOCS[1]}\n")
    passage = re.search(r"^\[4\] (.*)$", user, re.MULTILINE).group(1)
    assert passage.startswith("Line one line two tide") and len(passage) <= rerank.PASSAGE_CHARS
    assert user.endswith("Rank the 4 passages, most relevant first.")
    system = body["system"] if chat_api.kind == "anthropic" else body["messages"][0]["content"]
    assert system == rerank.SYSTEM_PROMPT
    tokens = {"anthropic": body.get("max_tokens"), "openai": body.get("max_tokens"),
              "ollama": body.get("options", {}).get("num_predict")}[chat_api.kind]
    assert tokens == rerank.TOKENS_PER_PASSAGE * 4 + rerank.ANSWER_SLACK
    assert body["model"] == "a-chat-model"


def test_llm_prompt_is_bounded_by_top_n(keyed) -> None:
    api = ChatApi("openai")
    api.reply = "[1]"
    try:
        docs = ["harbour " * 1000] * 100
        reranker_for(llm_block(api, topN=100)).rerank(QUERY, docs)
        user = user_message(api.requests[0]["body"])
        assert len(user) <= 100 * (rerank.PASSAGE_CHARS + len("[100] \n")) + 200
    finally:
        api.close()


def test_llm_slow_answer_fails_within_the_budget(chat_api) -> None:
    chat_api.delay = 5.0
    started = time.monotonic()
    with pytest.raises(RerankError, match=r"did not answer \(no answer within 0.5 s\); .* "
                                          r"may need a higher 'rerank.timeout'"):
        reranker_for(llm_block(chat_api, timeout=0.5)).rerank(QUERY, DOCS)
    assert time.monotonic() - started < 0.8


def test_llm_answer_naming_no_passage_is_an_error(keyed) -> None:
    api = ChatApi("ollama")
    api.reply = "I cannot rank these [0] [9]."
    try:
        with pytest.raises(RerankError, match="named none of the 4 passages; use a stronger "
                                              "chat model for 'rerank.model'"):
            reranker_for(llm_block(api)).rerank(QUERY, DOCS)
    finally:
        api.close()


@pytest.mark.parametrize("answer, order", [
    ("[3] > [1] > [2] > [4]", [2, 0, 1, 3]),
    ("<think>[4] looks best? no, [2] mentions 1970</think>\n[2] > [4]", [1, 3, 0, 2]),
    ("1. [4]\n2. [4]\n3. [9]\n4. [0]\n5. [1]", [3, 0, 1, 2]),  # repeats, unknown ignored
    ("2, 4, 3", [1, 3, 2, 0]),  # bare numbers when nothing is bracketed
    ("Passage 3 is best, then 1.5 and 12", [2, 0, 1, 3]),  # 1.5 is not passage 1
    ("[3] [3] [3]", [2, 0, 1, 3]),
    ("none of them", None),
    ("", None),
])
def test_llm_rankings_are_parsed_robustly(answer, order) -> None:
    assert parse_ranking(answer, 4) == order
