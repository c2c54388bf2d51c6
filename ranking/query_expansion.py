"""query_expansion.py: a search question rewritten by an LLM into several queries, in time.

Job: for a KB whose config.json has a `queryExpansion` block, `Expander.expand(query,
languages)` asks a chat LLM (chat.py) for `count` rewrites of the question: first the question
translated into each language the KB holds that it is not written in, then rewordings with
the terms a document would use. The search runs every query and fuses the hits. The answer is
parsed line by line (numbering, bullets, labels, quotes and a <think> block dropped; repeats
and the question itself dropped; each line bounded), and kept in a bounded in-process LRU
keyed by the question and every setting that shapes the answer.

A search waits on this, so it never fails one: the call has one try within `timeout` seconds
and any failure (no answer in time, HTTP error, refused key, an answer that is not the
provider's format or holds no rewrite) gives back the question alone with a `note` saying
why. An endpoint that did not answer (timeout, 5xx, unreachable) is not asked again for
PAUSE_AFTER_FAILURE seconds, so a dead LLM costs one search the timeout, not every search.

Layer: query side (question -> queries), above chat.py; search/library call it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from common import limits
from providers import chat, embedders

# -----------------------------------------------------------------------------
PROVIDERS = (*chat.PROVIDERS, "none")  # queryExpansion.provider values
DEFAULT_COUNT = 3  # count: rewrites asked for (the question itself is searched too)
COUNT_RANGE = (1, 8)
DEFAULT_TIMEOUT = 4.0  # timeout: s a search waits for the rewrites, at most
TIMEOUT_RANGE = (0.5, 30.0)
MAX_LANGUAGES = 8  # entries of `languages`
MAX_LANGUAGE_CHARS = 32  # characters of one entry ("ko", "Korean", "Brazilian Portuguese")
MAX_EXPAND_CHARS = 500  # a longer question is searched as it is (it is a passage, not a query)
# a longer answer line is dropped: 2,000 (a translation may be ~3x longer than the question)
MAX_REWRITE_CHARS = limits.MAX_QUERY_CHARS // 2
TOKENS_PER_REWRITE = 120  # max_tokens = count * this (a Korean line is ~1 token a character)
MAX_ANSWER_LINES = 64  # answer lines read, at most (a chatty model's tail is ignored)
CACHE_ENTRIES = 256  # questions remembered, per process (LRU): <= 256 * 8 * 2000 characters
EXPANDERS = 32  # Expanders kept for reuse (one per distinct block)
PAUSE_AFTER_FAILURE = 30.0  # s an endpoint that did not answer is not asked again
NOTE_ERROR_CHARS = 300  # characters of the failure kept in a note
# -----------------------------------------------------------------------------

# field -> (JSON type, what it should look like); kb.py checks config.json against this
CONFIG_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    **chat.CONFIG_FIELDS,
    "provider": (str, f"one of {', '.join(PROVIDERS)}"),
    "count": (int, f"a whole number {COUNT_RANGE[0]}-{COUNT_RANGE[1]} of rewrites"),
    "timeout": ((int, float), f"seconds, {TIMEOUT_RANGE[0]:g}-{TIMEOUT_RANGE[1]:g}"),
    "languages": (list, f'up to {MAX_LANGUAGES} language codes or names such as ["ko", "en"]'),
}

# language codes named in the prompt by name; any other entry is sent as it is written
LANGUAGE_NAMES = {"en": "English", "ko": "Korean", "zh": "Chinese", "ja": "Japanese",
                  "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
                  "pt": "Portuguese", "ru": "Russian", "vi": "Vietnamese", "ar": "Arabic"}
# fulltext.script_samples' word for a script -> the language the KB then holds
SCRIPT_LANGUAGES = {"\uac00": "ko", "\u4e2d": "zh"}

SYSTEM_PROMPT = """You write search queries for a document search engine that matches both \
words and meaning. Given a question, write other queries that find the same documents.
Rules:
- Write exactly the number of queries asked for, each on its own line, and nothing else: no \
numbering, no quotes, no labels, no explanation.
- First, the question translated faithfully into each listed document language it is not \
written in.
- Then, rewordings of the question in its own language, using synonyms and the terms a \
document on the subject would use.
- Keep each query about as short as the question."""

USER_TEMPLATE = """Document languages: {languages}
Number of queries: {count}
Question: {query}"""

PROMPT_HASH = hashlib.sha256(f"{SYSTEM_PROMPT}\0{USER_TEMPLATE}".encode()).hexdigest()[:12]

_BULLET = re.compile(r"^(?:[-*•·‣>#]+\s*|\(?\d{1,2}\s*[.):\]](?:\s+|$))")
# a line's label: 'Query 2:', 'Korean (ko):', 'Translation:' (a language, or such a word)
_NAMES = "|".join(re.escape(n) for n in (*LANGUAGE_NAMES, *LANGUAGE_NAMES.values()))
_LABEL = re.compile(rf"^(?:{_NAMES}|query|rewrite|rewording|translation)\s*\d*"
                    rf"(?:\s*\([^)]{{0,40}}\))?\s*[:：]\s*", re.IGNORECASE)
_QUOTES = "\"'`“”„‘’«»「」『』"


@dataclass(frozen=True)
class Expansion:
    """The queries to search, the question first, and why there are no others (or None)."""

    queries: list[str]
    note: str | None = None


class Expander:
    """One `queryExpansion` block's LLM, its settings and its pause after a failure."""

    def __init__(self, config: dict) -> None:
        self.chat = chat.client_for(config, "queryExpansion")
        self.count: int = config.get("count") or DEFAULT_COUNT
        self.timeout: float = float(config.get("timeout") or DEFAULT_TIMEOUT)
        self.languages: tuple[str, ...] | None = (
            _languages(config["languages"]) if config.get("languages") else None)
        self._lock = threading.Lock()
        self._paused_until = 0.0  # time.monotonic() before which the endpoint is not asked
        self._failure = ""  # why it was paused

    def expand(self, query: str, languages: Sequence[str] = ()) -> Expansion:
        """The question and up to `count` rewrites; `languages` are those the KB holds (see
        languages_held), unless the block names its own. Never raises."""
        question = " ".join(query.split())
        if not question:
            return Expansion([query])
        if len(question) > MAX_EXPAND_CHARS:
            return Expansion([query], f"query expansion skipped: the question is over "
                                      f"{MAX_EXPAND_CHARS} characters")
        held = self.languages if self.languages is not None else _languages(languages)
        key = (PROMPT_HASH, self.chat.provider, self.chat.http.base_url, self.chat.model,
               self.count, held, question)
        rewrites = _cache.get(key)
        if rewrites is None:
            rewrites, note = self._ask(question, held)
            if note:
                return Expansion([query], note)
            _cache.put(key, rewrites)
        return Expansion([query, *rewrites])

    def _ask(self, question: str, held: tuple[str, ...]) -> tuple[list[str], str | None]:
        """(rewrites, None), or ([], the note saying why there are none)."""
        with self._lock:
            wait = self._paused_until - time.monotonic()
            if wait > 0:
                return [], (f"query expansion skipped for {wait:.0f} s more: {self._failure}; "
                            "searched with the question alone")
        user = USER_TEMPLATE.format(languages=_named(held), count=self.count, query=question)
        try:
            answer = self.chat.ask(SYSTEM_PROMPT, user, self.count * TOKENS_PER_REWRITE,
                                   timeout=self.timeout)
            rewrites = parse_rewrites(answer, question, self.count)
        except Exception as err:  # noqa: BLE001 - any failure of the LLM must not fail a search
            if isinstance(err, embedders.EmbedderUnreachable):
                self._pause(str(err))
            reason = f"{type(err).__name__}: {err}"[:NOTE_ERROR_CHARS]
            return [], f"query expansion failed ({reason}); searched with the question alone"
        if not rewrites:
            return [], ("query expansion failed (the model's answer held no rewrite); searched "
                        "with the question alone")
        return rewrites, None

    def _pause(self, reason: str) -> None:
        with self._lock:
            self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
            self._failure = reason[:NOTE_ERROR_CHARS]


def parse_rewrites(answer: str, question: str, count: int) -> list[str]:
    """The answer's queries, one a line: bullets, numbering, a label naming a language or
    'query', markdown and quotes stripped; lines ending in ':' (a preamble), longer than
    MAX_REWRITE_CHARS, repeated or equal to the question dropped; at most `count`."""
    seen = {_folded(question)}
    out: list[str] = []
    for line in chat.strip_thinking(answer).splitlines()[:MAX_ANSWER_LINES]:
        text = _BULLET.sub("", line.replace("**", "").replace("```", "").strip())
        text = _LABEL.sub("", text).strip().strip(_QUOTES).strip()
        text = " ".join(text.split())
        if not text or text.endswith((":", "：")) or len(text) > MAX_REWRITE_CHARS:
            continue
        if _folded(text) not in seen:
            seen.add(_folded(text))
            out.append(text)
        if len(out) == count:
            break
    return out


def languages_held(samples: str) -> list[str]:
    """The languages a KB holds, from fulltext.script_samples(conn): Korean for Hangul, Chinese
    for Han, and English always (the index does not tell Latin-script languages apart; a
    block's `languages` says otherwise)."""
    words = samples.split()
    return [lang for word, lang in SCRIPT_LANGUAGES.items() if word in words] + ["en"]


def expander_for(config: dict | None) -> Expander | None:
    """The Expander for a `queryExpansion` block (None with no block or provider `none`); the
    same block gets the same Expander, so its HTTP client and its pause outlive a KB reload."""
    config = config or {}
    if (config.get("provider") or "none") == "none":
        return None
    key = json.dumps(config, sort_keys=True)
    with _expanders_lock:
        if key in _expanders:
            _expanders.move_to_end(key)
            return _expanders[key]
    expander = Expander(config)
    with _expanders_lock:
        _expanders[key] = expander
        while len(_expanders) > EXPANDERS:
            _expanders.popitem(last=False)
    return expander


class _Lru:
    """A bounded, thread-safe map that forgets the least recently used entry first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple, list[str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> list[str] | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: tuple, value: list[str]) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_cache = _Lru(CACHE_ENTRIES)
_expanders: OrderedDict[str, Expander] = OrderedDict()
_expanders_lock = threading.Lock()


def _languages(values: Sequence[str]) -> tuple[str, ...]:
    """Distinct entries, sorted (so the cache key and the prompt do not depend on order)."""
    return tuple(sorted({v.strip() for v in values if v.strip()}))


def _named(languages: tuple[str, ...]) -> str:
    """'English (en), Korean (ko)' for the prompt; 'the question's own' when none is known."""
    if not languages:
        return "the question's own"
    return ", ".join(f"{LANGUAGE_NAMES[v.lower()]} ({v})" if v.lower() in LANGUAGE_NAMES else v
                     for v in languages)


def _folded(text: str) -> str:
    """A line as compared for repeats: case and end punctuation do not make a new query."""
    return text.casefold().rstrip("?？。.!！ ")
