"""rerank.py: reorder a search's best candidates by a reranker's judgement of the query.

Job: turn a KB's `rerank` config block into a `Reranker` whose `rerank(query, documents)`
returns every document's index, best first, with the reranker's score; the caller (search)
passes its top `topN` fused candidates in fused order and puts them in the returned order.

Providers (`PROVIDERS`), per KB in config.json's `rerank` block:
- `cohere`: the rerank API that Cohere, Jina, vLLM, llama.cpp's `llama-server --reranking`,
  OpenVINO Model Server, LocalAI and Together share: POST {model, query, documents, top_n}
  -> {results: [{index, relevance_score}]}. The URL: a baseUrl ending in /rerank is used as
  it is, one ending in a version (/v1, /v2, /v3) gets /rerank, any other gets /v1/rerank;
  no baseUrl is Cohere's own https://api.cohere.com/v2/rerank with the key in COHERE_API_KEY.
- `tei`: Hugging Face text-embeddings-inference: POST {baseUrl}/rerank {query, texts,
  truncate} -> [{index, score}] (its --max-client-batch-size, 32 by default, bounds topN).
- `llm`: listwise through a chat model (chat.py: anthropic, openai-compatible or ollama,
  named by `chatProvider`): one prompt with the numbered passages, each cut to
  PASSAGE_CHARS, answered by the numbers best first; see parse_ranking.
- `none` (the default): no rerank.

A rerank runs while a search waits, so it has a time budget (`timeout`) for the whole of it:
connect, send and answer of each try, and a 429/5xx is tried again only when its wait
(Retry-After, else BACKOFF) still leaves RETRY_MIN_LEFT of the budget. Any failure (no answer
in time, an HTTP error, an answer that is not a ranking of the documents) raises RerankError
with what failed and what to do; the caller then keeps the fused order. An endpoint that gave
no answer (timeout, no connection, still 429/5xx) is skipped by embedders.py's per-endpoint
breaker: reranks fail at once (RerankUnreachable) for a pause that doubles while it keeps
failing (embedders.BREAKER_PAUSE, LINECITE_EMBED_PAUSE), so a hung server does not cost every
search its whole budget; after the pause one rerank tries again. Keys come only from
the environment (embedders.py's HttpEmbedder: apiKeyPreset/apiKeyEnv), never stored or logged.
Importing this module loads no httpx.

Layer: query: a step after fusion, beside the embedders (ground clients below it); search.py
and library.py call it, kb.py checks its block against CONFIG_FIELDS.
"""

from __future__ import annotations

import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitTimeout
from typing import Any

from common import limits
from providers import chat, embedders

# -----------------------------------------------------------------------------
PROVIDERS = ("cohere", "tei", "llm", "none")  # rerank.provider values
DEFAULT_BASE_URLS = {"cohere": "https://api.cohere.com/v2", "tei": "http://127.0.0.1:8080"}
COHERE_KEY_ENV = "COHERE_API_KEY"  # the key's variable on Cohere's own API (no baseUrl)
DEFAULT_TOP_N = 30  # candidates reranked (fits TEI's default client batch of 32)
TOP_N_RANGE = (1, 100)  # bounds on topN
# s for the whole rerank: a cross-encoder on 30 passages answers in ~0.1-1 s; a chat model
# writing 30 numbers needs several seconds
DEFAULT_TIMEOUT = {"cohere": 3.0, "tei": 3.0, "llm": 10.0}
TIMEOUT_RANGE = (0.5, 60.0)  # bounds on timeout
DOCUMENT_CHARS = 2000  # characters of each document sent to a cross-encoder (cut there)
PASSAGE_CHARS = 400  # characters of each passage in the llm prompt: 30 of them ~ 3-4k tokens
TOKENS_PER_PASSAGE = 8  # the llm answer's bound: "[12] > " per passage, plus ANSWER_SLACK
ANSWER_SLACK = 32
BACKOFF = 0.2  # s before a retry after a 429/5xx that names no Retry-After
RETRY_MIN_LEFT = 0.5  # s of the budget a retry must still have after its wait
RERANK_THREADS = 4  # reranks in flight at once (more wait their turn, within their budget)
# -----------------------------------------------------------------------------

# field -> (JSON type, what it should look like); kb.py checks config.json against this
CONFIG_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "provider": (str, f"one of {', '.join(PROVIDERS)}"),
    "model": (str, 'a rerank model name such as "rerank-v3.5" or "bge-reranker-v2-m3"'),
    "chatProvider": (str, f"one of {', '.join(chat.PROVIDERS)} (provider llm only)"),
    "apiKeyPreset": chat.CONFIG_FIELDS["apiKeyPreset"],
    "apiKeyEnv": (str, 'an environment variable name such as "COHERE_API_KEY"'),
    "baseUrl": (str, '"http://127.0.0.1:8080"'),
    "topN": (int, f"a whole number {TOP_N_RANGE[0]}-{TOP_N_RANGE[1]} of candidates"),
    "timeout": ((int, float), f"seconds, {TIMEOUT_RANGE[0]:g}-{TIMEOUT_RANGE[1]:g}"),
    "numCtx": chat.CONFIG_FIELDS["numCtx"],
}

SYSTEM_PROMPT = """You rank search results by how well they answer a search query.
You get the query and numbered passages. Answer with every passage number exactly once,
most relevant first, in this form and nothing else: [3] > [1] > [2]"""

USER_TEMPLATE = """Search query: {query}

{count} passages (each cut to {chars} characters):
{passages}

Rank the {count} passages, most relevant first."""

# a rerank's request runs here so the search stops waiting at its budget even when a server
# trickles bytes; apart from the embedders' and chat's threads, so a slow reranker cannot
# make a query embedding wait its turn; threads start on first use
_rerank_threads = ThreadPoolExecutor(RERANK_THREADS, "linecite-rerank")


class RerankError(RuntimeError):
    """The rerank failed (no answer within its budget, an HTTP error, an answer that is not
    a ranking); the message says what failed and what to do. The fused order stands."""


class RerankUnreachable(RerankError):
    """No answer within the budget, no connection, or still 429/5xx: the endpoint's breaker
    opens, and reranks skip it (at once) until its pause ends."""


def reranker_for(config: dict | None) -> Reranker | None:
    """The Reranker for a KB's `rerank` block; None for `none` or no block. The block is
    checked by kb.py when config.json loads; a wrong provider here is a ValueError."""
    config = config or {}
    provider = config.get("provider") or "none"
    if provider == "none":
        return None
    classes = {"cohere": CohereReranker, "tei": TeiReranker, "llm": LlmReranker}
    if provider not in classes:
        raise ValueError(f"rerank provider {provider!r} is not known; known providers: "
                         f"{', '.join(PROVIDERS)}")
    return classes[provider](config)


class Reranker:
    """One KB's reranker: `rerank(query, documents)` within `timeout` seconds."""

    provider = "none"

    def __init__(self, config: dict) -> None:
        self.model: str = config.get("model") or ""
        self.top_n: int = config.get("topN") or DEFAULT_TOP_N
        self.timeout = float(config.get("timeout") or DEFAULT_TIMEOUT[self.provider])
        self.where = ""  # the endpoint, for messages (set by each provider)

    def rerank(self, query: str, documents: list[str]) -> list[tuple[int, float]]:
        """(index into `documents`, score) for every document, best first; ties keep the
        given order. At most topN documents, each cut to the provider's bound; a query within
        limits.MAX_QUERY_CHARS. Raises RerankError on any failure, within the budget."""
        if len(documents) > self.top_n:
            raise ValueError(f"{len(documents)} documents to rerank; 'rerank.topN' is "
                             f"{self.top_n}: pass the best {self.top_n}")
        limits.check_length(query, "query", limits.MAX_QUERY_CHARS)
        if not documents:
            return []
        breaker = embedders.breaker_for(f"rerank-{self.provider}", self.where, self.model)
        try:
            breaker.admit()
        except embedders.EmbedderPaused:
            raise RerankUnreachable(f"{breaker.last_error} {_skipped(breaker)}") from None
        try:
            ranked = self._call(query, documents)
        except RerankUnreachable as err:
            breaker.failed(embedders.EmbedderUnreachable(str(err)))
            raise RerankUnreachable(f"{err} {_skipped(breaker)}") from None
        except BaseException:
            breaker.answered()  # any other answer, even a 4xx, says the server is up
            raise
        breaker.answered()
        return ranked

    def _call(self, query: str, documents: list[str]) -> list[tuple[int, float]]:
        """The provider's ranking within the budget, every failure as a RerankError."""
        deadline = time.monotonic() + self.timeout
        try:
            return self._rerank(query, documents, deadline)
        except embedders.EmbedderRequestError as err:  # a 4xx other than 401/403
            raise RerankError(f"rerank failed: {err}; check 'rerank.model', and 'rerank.topN' "
                              "against the server's limit on documents per request") from None
        except embedders.EmbedderError as err:  # the HTTP plumbing's and chat.py's others
            raise RerankError(f"rerank failed: {err}") from None
        except (KeyError, IndexError, TypeError, AttributeError):
            raise RerankError(f"the answer from {self.where} is not in {self.provider}'s "
                              "rerank format; check 'rerank.provider' and 'rerank.baseUrl'"
                              ) from None

    def _rerank(self, query: str, documents: list[str],
                deadline: float) -> list[tuple[int, float]]:
        raise NotImplementedError

    def _ranked(self, pairs: list[tuple[Any, Any]], count: int) -> list[tuple[int, float]]:
        """A server's (index, score) pairs checked to score each of `count` documents once,
        sorted best first (servers sort, but nothing in the APIs promises it)."""
        scores: dict[int, float] = {}
        for index, score in pairs:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                problem = f"index {index!r} for {count} documents"
            elif index in scores:
                problem = f"index {index} twice"
            elif isinstance(score, bool) or not isinstance(score, (int, float)) \
                    or not math.isfinite(score):
                problem = f"score {score!r} for index {index}"
            else:
                scores[index] = float(score)
                continue
            raise RerankError(f"{self.provider} at {self.where} answered {problem}; check that "
                              "'rerank.model' is a rerank model and 'rerank.provider' its API")
        if len(scores) != count:
            raise RerankError(f"{self.provider} at {self.where} scored {len(scores)} of {count} "
                              "documents; check that the server ranks every document sent")
        return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def _skipped(breaker: embedders.Breaker) -> str:
    """What a paused endpoint means for searches, for the end of a message."""
    until = time.strftime("%H:%M:%S", time.localtime(breaker.retry_at))
    return f"(searches skip the reranker until {until}, then try it again)"


# --- cross-encoder servers ---------------------------------------------------------------


class _Http(embedders.HttpEmbedder):
    """embedders.py's HTTP plumbing (key from the environment, its error mapping: 401/403
    name the key's variable, other 4xx carry the server's message), with the rerank's own
    retry rule: tries only within the budget."""

    config_block = "rerank"
    query_threads = _rerank_threads

    def __init__(self, provider: str, config: dict) -> None:
        self.provider = provider
        base = config.get("baseUrl")
        key_env = config.get("apiKeyEnv") or (COHERE_KEY_ENV if provider == "cohere"
                                              and not base and not config.get("apiKeyPreset")
                                              else None)
        # the plumbing wants a model name; a TEI server serves one model and needs none
        super().__init__({"model": config.get("model") or provider, "batchSize": 1,
                          "baseUrl": base or DEFAULT_BASE_URLS[provider],
                          "apiKeyPreset": config.get("apiKeyPreset"), "apiKeyEnv": key_env})
        import httpx

        # made here, not lazily in post: searches rerank in several threads at once; each
        # request gets its own timeout (what is left of its budget)
        self._client = httpx.Client()

    def post(self, url: str, body: dict, deadline: float, budget: float) -> Any:
        """POST JSON and return the decoded answer before `deadline` (time.monotonic), the
        end of a rerank's `budget` seconds."""
        import httpx

        if self._auth_error is not None:
            raise self._auth_error
        key = self._key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        attempt = 0
        while True:
            attempt += 1
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout
                response = self._send(url, body, headers, True, left)
            except (httpx.TimeoutException, WaitTimeout):
                raise RerankUnreachable(
                    f"{self.provider} at {self.base_url} did not rerank within the budget of "
                    f"{budget:g} s; check that it is running, or raise 'rerank.timeout' or "
                    "lower 'rerank.topN'") from None
            except httpx.TransportError as err:
                raise RerankUnreachable(
                    f"cannot reach {self.provider} at {self.base_url} ({type(err).__name__}); "
                    "start it, or fix 'rerank.baseUrl'") from None
            if response.status_code < 300:
                return self._json(response)
            self._raise_for(response)  # what a retry cannot fix
            wait = embedders._retry_after(response)
            wait = BACKOFF if wait is None else wait
            if deadline - time.monotonic() - wait < RETRY_MIN_LEFT:
                tries = "1 try" if attempt == 1 else f"{attempt} tries"
                raise RerankUnreachable(
                    f"{self.provider} at {self.base_url} answered HTTP {response.status_code} "
                    f"({tries} within the {budget:g} s budget); try again later")
            time.sleep(wait)

    def url(self, versioned: bool) -> str:
        """The rerank URL: baseUrl as it is when it ends in /rerank; else + /rerank, after
        /v1 when `versioned` and the baseUrl names no version."""
        if self.base_url.endswith("/rerank"):
            return self.base_url
        if versioned and not re.search(r"/v\d+$", self.base_url):
            return self.base_url + "/v1/rerank"
        return self.base_url + "/rerank"


class CohereReranker(Reranker):
    """Cohere's rerank API and the servers that copy it; `top_n` asks for every document."""

    provider = "cohere"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        if not self.model:
            raise ValueError("rerank provider 'cohere' needs 'rerank.model'")
        self.http = _Http(self.provider, config)
        self.where = self.http.url(versioned=True)

    def _rerank(self, query: str, documents: list[str],
                deadline: float) -> list[tuple[int, float]]:
        body = {"model": self.model, "query": query,
                "documents": [d[:DOCUMENT_CHARS] for d in documents], "top_n": len(documents)}
        results = self.http.post(self.where, body, deadline, self.timeout)["results"]
        return self._ranked([(r["index"], r["relevance_score"]) for r in results],
                            len(documents))


class TeiReranker(Reranker):
    """text-embeddings-inference's /rerank; `truncate` lets a text longer than the model's
    window be scored on its start instead of failing the whole request."""

    provider = "tei"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.http = _Http(self.provider, config)
        self.where = self.http.url(versioned=False)

    def _rerank(self, query: str, documents: list[str],
                deadline: float) -> list[tuple[int, float]]:
        body = {"query": query, "texts": [d[:DOCUMENT_CHARS] for d in documents],
                "truncate": True}
        results = self.http.post(self.where, body, deadline, self.timeout)
        return self._ranked([(r["index"], r["score"]) for r in results], len(documents))


# --- listwise through a chat model ---------------------------------------------------------


class LlmReranker(Reranker):
    """A chat model ranks the numbered passages in one answer (listwise); the score of the
    passage at position p (0 = best) of n is 1 - p/n."""

    provider = "llm"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        if config.get("chatProvider") not in chat.PROVIDERS:
            raise ValueError("rerank provider 'llm' needs 'rerank.chatProvider', one of "
                             f"{', '.join(chat.PROVIDERS)}")
        fields = ("model", "baseUrl", "apiKeyPreset", "apiKeyEnv", "numCtx")
        self.chat = chat.client_for({"provider": config.get("chatProvider"),
                                     **{k: config[k] for k in fields if k in config}}, "rerank")
        self.where = self.chat.http.base_url

    def _rerank(self, query: str, documents: list[str],
                deadline: float) -> list[tuple[int, float]]:
        left = round(deadline - time.monotonic(), 2)  # one try: the answer takes most of it
        try:
            answer = self.chat.ask(SYSTEM_PROMPT, prompt(query, documents),
                                   TOKENS_PER_PASSAGE * len(documents) + ANSWER_SLACK, left)
        except embedders.EmbedderUnreachable as err:
            raise RerankUnreachable(f"rerank failed: {err}; a chat model ranking {len(documents)} "
                              "passages may need a higher 'rerank.timeout' or a lower "
                              "'rerank.topN'") from None
        order = parse_ranking(answer, len(documents))
        if order is None:
            raise RerankError(f"the model {self.model!r} at {self.where} named none of the "
                              f"{len(documents)} passages; use a stronger chat model for "
                              "'rerank.model'")
        return [(index, 1.0 - position / len(order)) for position, index in enumerate(order)]


def prompt(query: str, documents: list[str]) -> str:
    """The user message: the query and the passages numbered from 1, each cut to
    PASSAGE_CHARS with its line breaks folded (a passage is one line)."""
    passages = "\n".join(f"[{number}] {' '.join(text[:PASSAGE_CHARS].split())}"
                         for number, text in enumerate(documents, 1))
    return USER_TEMPLATE.format(query=query, count=len(documents), chars=PASSAGE_CHARS,
                                passages=passages)


_BRACKETED = re.compile(r"\[(\d{1,4})\]")
_NUMBER = re.compile(r"(?<![\d.])(\d{1,4})(?![\d.])")


def parse_ranking(answer: str, count: int) -> list[int] | None:
    """0-based indices of `count` passages from an answer like "[3] > [1] > [2]", best
    first: numbers outside 1-count and repeats are ignored, passages the answer leaves out
    follow in the given (fused) order. Bracketed numbers are read when there are any (then a
    numbered list's "1." or a number in echoed text is not taken for a passage), else every
    bare number. None when the answer names no passage."""
    text = chat.strip_thinking(answer or "")
    numbers = _BRACKETED.findall(text) or _NUMBER.findall(text)
    order: list[int] = []
    for number in map(int, numbers):
        if 1 <= number <= count and number - 1 not in order:
            order.append(number - 1)
    if not order:
        return None
    return order + [index for index in range(count) if index not in order]


def rerank_hits(reranker: Reranker, query: str, hits: list) -> tuple[list, str | None]:
    """The best `top_n` hits (search.py's, in fused order) in the reranker's order, each
    scored by it and ranked under `rerank`, then the rest; on any failure the fused order
    and why it stands (never raises: a search answers without its reranker)."""
    top, rest = hits[:reranker.top_n], hits[reranker.top_n:]
    try:
        order = reranker.rerank(query, [hit.text for hit in top])
    except (RerankError, ValueError) as err:
        return hits, f"rerank skipped, fused order kept: {err}"
    ranked = []
    for position, (index, score) in enumerate(order, 1):
        hit = top[index]
        hit.score = score
        hit.ranks["rerank"] = position
        ranked.append(hit)
    return ranked + rest, None

