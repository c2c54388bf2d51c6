"""query_expansion.py against chat servers on 127.0.0.1 that speak each API's real wire format
(OpenAI chat completions, Ollama chat, Anthropic messages): what is asked, how the answer is
parsed, the LRU cache, the time bound, every failure falling back to the question alone with
a note, and the `queryExpansion` block's checks in kb.py.
"""

import json
import re
import threading
import time

import pytest
from conftest import JsonApi

import fulltext
import kb as kbmod
from providers import chat
from ranking import query_expansion as qe

KEY = "sk-test-5151"
QUESTION = "When is the release?"
REWRITES = ["배포 일정은 언제인가요?", "When is the deployment scheduled?", "release schedule date"]
# a messy answer: reasoning, a preamble, numbering, quotes, markdown, the question again, a
# repeat and one line too many
MESSY = ("<think>The user wants the release date.</think>\nHere are 3 queries:\n"
         "1. 배포 일정은 언제인가요?\n2) \"When is the deployment scheduled?\"\n"
         "- **release schedule date**\nWhen is the release\n배포 일정은 언제인가요?\n"
         "ship date of the next version")


class Chat(JsonApi):
    """A chat API on 127.0.0.1 (`kind`: openai, ollama or anthropic) answering `reply`; while
    `hold` is set it answers only once `release` is set (a model that does not answer)."""

    def __init__(self, kind: str = "openai", reply: str = MESSY) -> None:
        self.kind, self.reply = kind, reply
        self.hold = False
        self.release = threading.Event()
        super().__init__()

    def close(self) -> None:
        self.release.set()
        super().close()

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        if self.hold:
            self.release.wait(10)
        if self.kind == "anthropic":
            if headers.get("x-api-key") != KEY:
                return 401, {}, {"type": "error", "error": {"type": "authentication_error",
                                                            "message": "invalid x-api-key"}}
            return 200, {}, {"id": "msg_01", "type": "message", "role": "assistant",
                             "model": body["model"], "stop_reason": "end_turn",
                             "content": [{"type": "text", "text": self.reply}],
                             "usage": {"input_tokens": 60, "output_tokens": 30}}
        if self.kind == "ollama":
            return 200, {}, {"model": body["model"], "created_at": "2025-01-01T00:00:00Z",
                             "message": {"role": "assistant", "content": self.reply},
                             "done": True, "done_reason": "stop", "eval_count": 30}
        if headers.get("authorization") != f"Bearer {KEY}":
            return 401, {}, {"error": {"message": "Incorrect API key provided.",
                                       "type": "invalid_request_error",
                                       "code": "invalid_api_key"}}
        return 200, {}, {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                         "model": body["model"], "choices": [{
                             "index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": self.reply}}],
                         "usage": {"prompt_tokens": 60, "completion_tokens": 30,
                                   "total_tokens": 90}}


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty cache (a closed server's port can be reused)."""
    monkeypatch.setattr(qe, "_cache", qe._Lru(qe.CACHE_ENTRIES))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


@pytest.fixture
def server():
    api = Chat()
    yield api
    api.close()


def block(api: Chat, **extra) -> dict:
    preset = {"apiKeyPreset": "OpenAI"} if api.kind == "openai" else {}
    return {"provider": api.kind, "model": "qwen3:4b", "baseUrl": api.url, **preset, **extra}


def user_text(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def test_the_question_and_languages_are_sent_and_the_rewrites_parsed(server) -> None:
    expansion = qe.Expander(block(server)).expand(QUESTION, ["ko", "en"])
    assert expansion == qe.Expansion([QUESTION, *REWRITES], None)

    [request] = server.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "qwen3:4b"
    assert body["max_tokens"] == qe.DEFAULT_COUNT * qe.TOKENS_PER_REWRITE
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == qe.SYSTEM_PROMPT
    assert user_text(body) == ("Document languages: English (en), Korean (ko)\n"
                               "Number of queries: 3\nQuestion: When is the release?")


def test_a_repeated_question_is_answered_from_the_cache(server) -> None:
    expander = qe.Expander(block(server))
    first = expander.expand(QUESTION, ["en", "ko"])
    again = expander.expand(f"  {QUESTION}\n", ["ko", "en", "ko"])  # same question, same set
    assert again.queries == [f"  {QUESTION}\n", *REWRITES] and again.note is None
    assert first.queries[1:] == REWRITES
    assert len(server.requests) == 1
    # another language set, count or model is another question to the LLM
    expander.expand(QUESTION, ["en"])
    qe.Expander(block(server, count=2)).expand(QUESTION, ["en", "ko"])
    qe.Expander(block(server, model="other")).expand(QUESTION, ["en", "ko"])
    assert len(server.requests) == 4
    assert "Document languages: English (en)\n" in user_text(server.requests[1]["body"])
    assert server.requests[2]["body"]["max_tokens"] == 2 * qe.TOKENS_PER_REWRITE


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    lru = qe._Lru(2)
    lru.put(("a",), ["1"])
    lru.put(("b",), ["2"])
    assert lru.get(("a",)) == ["1"]  # a is now the most recent
    lru.put(("c",), ["3"])
    assert (lru.get(("a",)), lru.get(("b",)), lru.get(("c",))) == (["1"], None, ["3"])


def test_count_bounds_the_rewrites(server) -> None:
    server.reply = "\n".join(f"rewrite number {i}" for i in range(20))
    expansion = qe.Expander(block(server, count=2)).expand(QUESTION, ["en"])
    assert expansion.queries == [QUESTION, "rewrite number 0", "rewrite number 1"]


def test_a_slow_model_costs_one_search_the_timeout_then_is_skipped(server) -> None:
    server.hold = True
    expander = qe.Expander(block(server, timeout=0.5))
    started = time.monotonic()
    expansion = expander.expand(QUESTION, ["en"])
    took = time.monotonic() - started
    assert 0.4 < took < 1.5, took
    assert expansion.queries == [QUESTION]
    assert "query expansion failed" in expansion.note
    assert "did not answer (no answer within 0.5 s)" in expansion.note
    assert "searched with the question alone" in expansion.note
    # the endpoint is paused: the next search does not wait, and nothing is sent
    started = time.monotonic()
    skipped = expander.expand("another question", ["en"])
    assert time.monotonic() - started < 0.1
    assert skipped.queries == ["another question"]
    assert re.match(r"query expansion skipped for \d+ s more: .*did not answer", skipped.note)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status, answer, why", [
    (500, {"error": {"message": "model crashed"}}, "did not answer (HTTP 500)"),
    (200, {"unexpected": True}, "is not in openai's format"),
    (200, "plain text, not an object", "is not in openai's format"),
    (400, {"error": {"message": "bad request: context too long"}}, "context too long"),
])
def test_an_error_or_garbage_answer_falls_back_to_the_question(server, status, answer,
                                                               why) -> None:
    server.script = [(status, {}, answer)]
    expansion = qe.Expander(block(server)).expand(QUESTION, ["en"])
    assert expansion.queries == [QUESTION]
    assert why in expansion.note and expansion.note.startswith("query expansion failed")


def test_a_failure_is_not_cached_and_only_no_answer_pauses(server) -> None:
    server.script = [(200, {}, {"unexpected": True})]
    expander = qe.Expander(block(server))
    assert expander.expand(QUESTION, ["en"]).note
    assert expander.expand(QUESTION, ["en"]).queries == [QUESTION, *REWRITES]  # asked again
    assert len(server.requests) == 2


@pytest.mark.parametrize("reply", [
    "When is the release?\n\"when is the release\"\n",  # only the question again
    "<think>The user asks about releases. I should give several",  # cut while thinking
    "",
])
def test_an_answer_with_no_rewrite_falls_back(server, reply) -> None:
    server.reply = reply
    expansion = qe.Expander(block(server)).expand(QUESTION, ["en"])
    assert expansion.queries == [QUESTION]
    assert "held no rewrite" in expansion.note


def test_a_refused_key_falls_back_naming_the_variable(server, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    expansion = qe.Expander(block(server)).expand(QUESTION, ["en"])
    assert expansion.queries == [QUESTION]
    assert "refused the API key (HTTP 401)" in expansion.note
    assert "OPENAI_API_KEY" in expansion.note and "sk-wrong" not in expansion.note


def test_an_unreachable_server_falls_back_at_once() -> None:
    api = Chat()
    api.close()  # nothing listens on its port now
    started = time.monotonic()
    expansion = qe.Expander(block(api)).expand(QUESTION, ["en"])
    assert time.monotonic() - started < 2
    assert expansion.queries == [QUESTION] and "cannot reach openai" in expansion.note


def test_a_long_question_is_not_sent(server) -> None:
    long = "word " * qe.MAX_EXPAND_CHARS
    expansion = qe.Expander(block(server)).expand(long, ["en"])
    assert expansion.queries == [long]
    assert f"over {qe.MAX_EXPAND_CHARS} characters" in expansion.note
    assert qe.Expander(block(server)).expand("  ", ["en"]) == qe.Expansion(["  "], None)
    assert server.requests == []


def test_the_blocks_languages_replace_the_kbs(server) -> None:
    qe.Expander(block(server, languages=["de", "Brazilian Portuguese"])).expand(QUESTION,
                                                                              ["ko", "en"])
    assert user_text(server.requests[0]["body"]).startswith(
        "Document languages: Brazilian Portuguese, German (de)\n")
    qe.Expander(block(server)).expand("what?", [])
    assert "Document languages: the question's own\n" in user_text(server.requests[1]["body"])


def test_ollama_wire_format() -> None:
    api = Chat("ollama")
    try:
        expansion = qe.Expander(block(api, numCtx=4096)).expand(QUESTION, ["ko", "en"])
        assert expansion.queries == [QUESTION, *REWRITES]
        [request] = api.requests
        body = request["body"]
        assert request["path"] == "/api/chat"
        assert "authorization" not in request["headers"]
        assert body["stream"] is False
        assert body["options"] == {"num_ctx": 4096, "num_predict": 3 * qe.TOKENS_PER_REWRITE,
                                   "temperature": 0}
        assert body["messages"][0] == {"role": "system", "content": qe.SYSTEM_PROMPT}
        assert "Question: When is the release?" in user_text(body)
    finally:
        api.close()


def test_anthropic_wire_format() -> None:
    api = Chat("anthropic")
    try:
        expansion = qe.Expander(block(api, count=1)).expand(QUESTION, ["ko", "en"])
        assert expansion.queries == [QUESTION, REWRITES[0]]
        [request] = api.requests
        body, headers = request["body"], request["headers"]
        assert request["path"] == "/v1/messages"
        assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
        assert body["system"] == qe.SYSTEM_PROMPT
        assert body["max_tokens"] == qe.TOKENS_PER_REWRITE
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert "Korean (ko)" in user_text(body)
    finally:
        api.close()


@pytest.mark.parametrize("answer, expected", [
    ("Query 1: release date\nKorean (ko): 출시일\nTranslation: 发布日期", ["release date", "출시일",
                                                                        "发布日期"]),
    ("```\n* one\n• two\n(3) three\n```", ["one", "two", "three"]),
    ("3.5 release notes\n2024 roadmap", ["3.5 release notes", "2024 roadmap"]),
    ("reasoning without an opening tag</think>\nthe answer", ["the answer"]),
    ("「引号里的问题」\n" + "x" * (qe.MAX_REWRITE_CHARS + 1), ["引号里的问题"]),
])
def test_rewrites_are_parsed_robustly(answer, expected) -> None:
    assert qe.parse_rewrites(answer, QUESTION, 8) == expected


def test_languages_held_follow_the_indexs_scripts() -> None:
    assert set(fulltext.SEGMENTER_SCRIPTS) == set(qe.SCRIPT_LANGUAGES)  # every script named
    assert qe.languages_held(" ".join(fulltext.SEGMENTER_SCRIPTS)) == ["ko", "zh", "en"]
    assert qe.languages_held("") == ["en"]


def test_expander_for_reuses_one_expander_per_block(server) -> None:
    assert qe.expander_for(None) is None and qe.expander_for({"provider": "none"}) is None
    first = qe.expander_for(block(server))
    assert qe.expander_for(dict(reversed(block(server).items()))) is first
    assert qe.expander_for(block(server, count=2)) is not first
    assert isinstance(first.chat, chat.OpenAIChat)


@pytest.mark.parametrize("expansion, message", [
    ({"provider": "gpt"}, "'queryExpansion.provider' is 'gpt'; known providers"),
    ({"provider": "ollama"}, "'queryExpansion.model' is needed"),
    ({"provider": "ollama", "model": "m", "count": 9}, "'queryExpansion.count' must be 1-8"),
    ({"provider": "ollama", "model": "m", "count": True}, "'queryExpansion.count' must be"),
    ({"provider": "ollama", "model": "m", "timeout": 0.1}, "'queryExpansion.timeout' must be "
                                                           "0.5-30"),
    ({"provider": "ollama", "model": "m", "timeout": True}, "'queryExpansion.timeout' must be"),
    ({"provider": "ollama", "model": "m", "languages": "ko"}, "'queryExpansion.languages' must"),
    ({"provider": "ollama", "model": "m", "languages": ["ko", ""]}, "up to 8 language codes"),
    ({"provider": "ollama", "model": "m", "languages": ["en"] * 9}, "up to 8 language codes"),
    ({"provider": "openai", "model": "m", "rewrites": 3}, "'queryExpansion.rewrites' is not"),
    ({"provider": "openai", "model": "m", "apiKeyEnv": "sk-live-123"}, "not the key itself"),
])
def test_a_wrong_query_expansion_block_is_refused_naming_the_field(
        tmp_path, expansion, message) -> None:
    kb = kbmod.open_or_create(tmp_path, "docs")
    (kb.folder / "config.json").write_text(json.dumps({"queryExpansion": expansion}),
                                           encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=re.escape(message)):
        kbmod.load(tmp_path, "docs")


def test_a_good_block_is_loaded(tmp_path) -> None:
    good = {"provider": "ollama", "model": "qwen3:4b", "count": 8, "timeout": 2.5,
            "languages": ["ko", "en"]}
    kb = kbmod.open_or_create(tmp_path, "docs")
    (kb.folder / "config.json").write_text(json.dumps({"queryExpansion": good}),
                                           encoding="utf-8")
    assert kbmod.load(tmp_path, "docs").query_expansion == good
    assert kbmod.open_or_create(tmp_path, "plain").query_expansion == {}
