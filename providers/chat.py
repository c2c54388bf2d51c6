"""chat.py: one question to a chat LLM, answered as text, the same way for every caller.

Job: turn a config block (provider, model, baseUrl, apiKeyPreset, apiKeyEnv, numCtx) into a
ChatClient whose `ask(system, user, max_tokens, timeout=None)` returns the model's answer with
a reasoning model's <think> block removed. contextualize.py (a context per chunk, at indexing)
and query_expansion.py (rewrites of a search query, while a search waits) both ask through it.

Providers (`PROVIDERS`):
- `anthropic`: POST {baseUrl}/v1/messages (x-api-key, anthropic-version), key preset Claude.
- `openai`: any OpenAI-compatible POST {baseUrl}/v1/chat/completions (Bearer); a baseUrl
  that ends in /v1 is used as it is.
- `ollama`: POST {baseUrl}/api/chat with `stream: false` and `options.num_ctx`.

HTTP, keys and errors are embedders.py's (HttpEmbedder): keys only from the environment by
preset, never stored or logged; a refused key raises EmbedderAuthError (and stays refused for
the client's life). Without a `timeout` (indexing) each try waits up to CHAT_TIMEOUT and
429/5xx back off and retry, bounded; with one (a search waits) there is one try, answered
within `timeout` seconds in total or EmbedderUnreachable.

Layer: ground client (imports embedders only), used by the pipeline and the query side.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from providers import embedders

# -----------------------------------------------------------------------------
PROVIDERS = ("anthropic", "openai", "ollama")  # provider values of a chat block
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com",
                     "openai": "https://api.openai.com", "ollama": "http://127.0.0.1:11434"}
ANTHROPIC_VERSION = "2023-06-01"  # the anthropic-version header
DEFAULT_NUM_CTX = 8192  # Ollama's context window for these calls (its own default is 2-4k)
NUM_CTX_RANGE = (2048, 262144)
CHAT_TIMEOUT = 120.0  # s for one answer without a caller's timeout (a CPU model is slow)
OLLAMA_KEEP_ALIVE = "10m"  # keep the model loaded between calls
TIMED_THREADS = 4  # calls with a timeout in flight at once (more wait their turn, in time)
# -----------------------------------------------------------------------------

# field -> (JSON type, what it should look like); a caller's CONFIG_FIELDS start from these
CONFIG_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "provider": (str, f"one of {', '.join(PROVIDERS)}"),
    "model": (str, 'a chat model name such as "claude-haiku-4-5"'),
    "apiKeyPreset": (str, f"one of {', '.join(embedders.API_KEY_PRESETS)}"),
    "apiKeyEnv": (str, 'an environment variable name such as "MY_LLM_KEY"'),
    "baseUrl": (str, '"http://127.0.0.1:11434"'),
    "numCtx": (int, f"a whole number {NUM_CTX_RANGE[0]}-{NUM_CTX_RANGE[1]} (ollama only)"),
}

# timed calls run here, apart from embedders' query threads: a slow LLM holding these threads
# must not make a query embedding wait its turn and miss its own timeout
_timed_threads = ThreadPoolExecutor(TIMED_THREADS, "linecite-chat")
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def strip_thinking(answer: str) -> str:
    """The answer without a reasoning model's <think>...</think> blocks; also without the
    reasoning before a lone </think> (a server that ate the opening tag) or after a lone
    <think> (an answer cut at max_tokens while still thinking)."""
    text = _THINKING.sub("", answer)
    close = text.lower().rfind("</think>")
    if close >= 0:
        text = text[close + len("</think>"):]
    start = text.lower().find("<think>")
    return text if start < 0 else text[:start]


class _Http(embedders.HttpEmbedder):
    """embedders.py's HTTP plumbing (key from the environment, retries, error mapping), used
    here only for its `_post` and `_key`."""

    query_task = "answer"
    query_threads = _timed_threads

    def __init__(self, provider: str, config: dict, block: str) -> None:
        self.provider = provider
        self.config_block = block
        preset = config.get("apiKeyPreset") or {"anthropic": "Claude"}.get(provider)
        if provider == "openai" and not config.get("baseUrl") and not preset:
            preset = "OpenAI"  # OpenAI's own endpoint needs a key; a local server may not
        super().__init__({"model": config["model"], "batchSize": 1,
                          "baseUrl": config.get("baseUrl") or DEFAULT_BASE_URLS[provider],
                          "apiKeyPreset": preset, "apiKeyEnv": config.get("apiKeyEnv")})
        import httpx

        # made here, not lazily in _post: calls run in several threads at once
        self._client = httpx.Client(timeout=httpx.Timeout(CHAT_TIMEOUT,
                                                          connect=embedders.CONNECT_TIMEOUT))

    def post(self, path: str, body: dict, headers: dict[str, str],
             timeout: float | None) -> Any:
        if timeout is None:
            return self._post(self.base_url + path, body, headers)
        return self._post(self.base_url + path, body, headers, query=True, limit=timeout)


class ChatClient:
    """One provider's chat model, as named by a config block (`block` names that block in
    messages, e.g. 'contextualizer')."""

    provider = ""

    def __init__(self, config: dict, block: str) -> None:
        if not config.get("model"):
            raise ValueError(f"{block} provider {self.provider!r} needs '{block}.model'")
        self.model: str = config["model"]
        self.block = block
        self.http = _Http(self.provider, config, block)

    def ask(self, system: str, user: str, max_tokens: int,
            timeout: float | None = None) -> str:
        """The model's answer to `user` under `system`, at most `max_tokens` long, <think>
        removed; raises embedders.EmbedderError (or a subclass) saying what to fix."""
        try:
            answer = self._ask(system, user, max_tokens, timeout)
            if not isinstance(answer, str):
                raise TypeError(answer)
        except (KeyError, IndexError, TypeError, AttributeError):
            raise embedders.EmbedderError(
                f"the answer from {self.http.base_url} is not in {self.provider}'s format; "
                f"check '{self.block}.provider' and '{self.block}.baseUrl'") from None
        return strip_thinking(answer)

    def _ask(self, system: str, user: str, max_tokens: int, timeout: float | None) -> Any:
        raise NotImplementedError

    def _bearer(self) -> dict[str, str]:
        key = self.http._key()
        return {"Authorization": f"Bearer {key}"} if key else {}


class AnthropicChat(ChatClient):
    provider = "anthropic"

    def _ask(self, system: str, user: str, max_tokens: int, timeout: float | None) -> Any:
        headers = {"x-api-key": self.http._key() or "", "anthropic-version": ANTHROPIC_VERSION}
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": 0,
                "system": system, "messages": [{"role": "user", "content": user}]}
        answer = self.http.post("/v1/messages", body, headers, timeout)
        return "".join(block["text"] for block in answer["content"] if block["type"] == "text")


class OpenAIChat(ChatClient):
    """OpenAI's chat completions, or any server that speaks them (vLLM, LM Studio, ...)."""

    provider = "openai"

    def __init__(self, config: dict, block: str) -> None:
        super().__init__(config, block)
        # OpenAI's newer models refuse max_tokens; servers that copy the API know max_tokens
        self.bound = "max_tokens" if config.get("baseUrl") else "max_completion_tokens"

    def _ask(self, system: str, user: str, max_tokens: int, timeout: float | None) -> Any:
        body = {"model": self.model, self.bound: max_tokens,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}]}
        path = "/chat/completions" if self.http.base_url.endswith("/v1") \
            else "/v1/chat/completions"
        answer = self.http.post(path, body, self._bearer(), timeout)
        return answer["choices"][0]["message"]["content"]


class OllamaChat(ChatClient):
    provider = "ollama"

    def __init__(self, config: dict, block: str) -> None:
        super().__init__(config, block)
        self.num_ctx: int = config.get("numCtx") or DEFAULT_NUM_CTX

    def _ask(self, system: str, user: str, max_tokens: int, timeout: float | None) -> Any:
        body = {"model": self.model, "stream": False, "keep_alive": OLLAMA_KEEP_ALIVE,
                "options": {"num_ctx": self.num_ctx, "num_predict": max_tokens,
                            "temperature": 0},
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}]}
        return self.http.post("/api/chat", body, self._bearer(), timeout)["message"]["content"]


CLIENTS: dict[str, type[ChatClient]] = {"anthropic": AnthropicChat, "openai": OpenAIChat,
                                        "ollama": OllamaChat}


def client_for(config: dict, block: str) -> ChatClient:
    """The ChatClient for a config block whose provider is one of PROVIDERS; ValueError
    naming `block`'s field otherwise."""
    provider = config.get("provider")
    if provider not in CLIENTS:
        raise ValueError(f"{block} provider {provider!r} is not known; known providers: "
                         f"{', '.join(PROVIDERS)}")
    return CLIENTS[provider](config, block)
