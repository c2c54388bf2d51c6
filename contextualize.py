"""contextualize.py: a short LLM-written context for each chunk, searched and embedded with it.

Job: for every chunk an LLM is given the document's title (its source name), the text around
the chunk on its page (bounded) and the chunk, and returns a short context and keywords in
the document's language and English. The context goes into the chunk's BM25 tokens and its
embedded text, never into hits or read_range (those stay the raw lines). It is stored in
fulltext.sqlite3 (chunks.llm_*) with the model and this prompt's hash, so a changed model or
prompt shows the KB as stale and `ingest.sync(kb, "contextualization")` redoes exactly those.

Providers, per KB in config.json's `contextualizer` block: chat.py's (`anthropic`, `openai`
for any OpenAI-compatible server, `ollama`), or `none` (the default): no contexts.

HTTP, keys and errors are chat.py's (embedders.py's HttpEmbedder underneath): keys only from
the environment by preset, never stored or logged; 429/5xx back off (Retry-After) and retry,
bounded. A refused key (401/403) or a provider still unreachable after its retries stops
contextualizing for the run (the reason is kept in the index's meta for get_index_info); the
chunks are embedded without a context and get one on a later run. A chunk whose call fails
otherwise is marked failed and retried on later runs, up to contexts.MAX_CONTEXT_ATTEMPTS.

Layer: pipeline stage (chunks -> contextualized chunks), above storage and embedders.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import fulltext
from index import contexts
from providers import chat, embedders

# -----------------------------------------------------------------------------
PROVIDERS = (*chat.PROVIDERS, "none")  # contextualizer.provider values
MAX_OUTPUT_TOKENS = 300  # the answer's bound in tokens (a context is 2 sentences + keywords)
WINDOW_CHARS = 3000  # characters of the page around a chunk sent with it (half each side)
WINDOW_LINES = 60  # lines read on each side of a chunk to fill that window, at most
DEFAULT_MAX_CHARS = 600  # maxChars: longest context stored (longer answers are cut)
MAX_CHARS_RANGE = (100, 4000)  # bounds on maxChars
DEFAULT_BATCH = 16  # batchSize: chunks per SQLite transaction
MAX_BATCH = 256
DEFAULT_CONCURRENCY = {"anthropic": 4, "openai": 4, "ollama": 1}  # calls in flight at once
MAX_CONCURRENCY = 16
ERROR_CHARS = 300  # characters of a failure kept in chunks.llm_error
# -----------------------------------------------------------------------------

# field -> (JSON type, what it should look like); kb.py checks config.json against this
CONFIG_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    **chat.CONFIG_FIELDS,
    "provider": (str, f"one of {', '.join(PROVIDERS)}"),
    "batchSize": (int, f"a whole number 1-{MAX_BATCH} of chunks per transaction"),
    "concurrency": (int, f"a whole number 1-{MAX_CONCURRENCY} of calls at once"),
    "maxChars": (int, f"a whole number {MAX_CHARS_RANGE[0]}-{MAX_CHARS_RANGE[1]}"),
}

SYSTEM_PROMPT = """You help a search engine index one passage of a longer document.
Write exactly two lines and nothing else:
CONTEXT: one or two short sentences that situate the passage in the document (which
document, which part or topic, what the passage is about), written in the document's
language; if that language is not English, add one English sentence.
KEYWORDS: 5 to 12 search keywords or short phrases that a person looking for this passage
might type (names, topics, synonyms, terms implied but not written), in the document's
language and in English, separated by commas."""

USER_TEMPLATE = """Document title: {title}

The passage's surroundings on its page (may be cut):
<document>
{window}
</document>

The passage to situate:
<passage>
{chunk}
</passage>"""


def signature_of(config: dict | None) -> tuple[str, str] | None:
    """(model, prompt hash) that a KB's contexts must carry to be current; None for `none`.
    The hash covers the prompt and every bound that shapes an answer."""
    config = config or {}
    if (config.get("provider") or "none") == "none":
        return None
    max_chars = config.get("maxChars") or DEFAULT_MAX_CHARS
    shape = f"{SYSTEM_PROMPT}\0{USER_TEMPLATE}\0{WINDOW_CHARS}\0{MAX_OUTPUT_TOKENS}\0{max_chars}"
    return config.get("model") or "", hashlib.sha256(shape.encode()).hexdigest()[:16]


def state(conn: sqlite3.Connection, config: dict | None) -> dict:
    """A KB's contextualization for get_index_info: provider, model, counts, what to do."""
    signature = signature_of(config)
    counts = fulltext.contextualization_state(conn, signature)
    info = {"provider": (config or {}).get("provider") or "none",
            "model": signature[0] if signature else None, **counts}
    if counts["stale"]:
        info["action"] = ("run start_reindex with scope 'contextualization' to redo the stale "
                          "contexts (no file is read again)")
    return info


# --- the LLM ----------------------------------------------------------------------------


class Contextualizer:
    """One KB's LLM: `context(title, window, chunk)` returns the context to store."""

    def __init__(self, config: dict) -> None:
        self.chat = chat.client_for(config, "contextualizer")
        self.provider: str = self.chat.provider
        self.model: str = self.chat.model
        self.max_chars: int = config.get("maxChars") or DEFAULT_MAX_CHARS
        self.batch_size: int = config.get("batchSize") or DEFAULT_BATCH
        self.concurrency: int = config.get("concurrency") or DEFAULT_CONCURRENCY[self.provider]
        self.signature = signature_of(config)

    def context(self, title: str, window: str, chunk: str) -> str:
        user = USER_TEMPLATE.format(title=title, window=window, chunk=chunk)
        return parse_answer(self.chat.ask(SYSTEM_PROMPT, user, MAX_OUTPUT_TOKENS), self.max_chars)


def contextualizer_for(config: dict | None) -> Contextualizer | None:
    """The Contextualizer for a KB's `contextualizer` block; None for `none` or no block."""
    config = config or {}
    if (config.get("provider") or "none") == "none":
        return None
    return Contextualizer(config)


_LABEL = re.compile(r"^[\s>*#_-]*(context|keywords)\s*[*_]*\s*[:：]\s*[*_]*\s*", re.IGNORECASE)


def parse_answer(answer: str, max_chars: int) -> str:
    """The context and keyword lines of an answer, labels dropped, cut to `max_chars` at a
    word boundary. Tolerates markdown, a reasoning model's <think> block and a missing label
    (then the whole answer is the context); an empty answer is an error (retried later)."""
    text = chat.strip_thinking(answer or "").replace("```", "")
    labelled: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = _LABEL.match(line)
        if match:
            current = match.group(1).lower()
            line = line[match.end():]
        if current and line.strip():
            labelled.setdefault(current, []).append(line.strip())
    parts = [" ".join(labelled[k]) for k in ("context", "keywords") if k in labelled]
    if not parts:
        parts = [" ".join(text.split())]
    out = "\n".join(" ".join(p.replace("*", "").split()) for p in parts).strip()
    if not out:
        raise embedders.EmbedderError("the model returned an empty context")
    if len(out) > max_chars:
        cut = out.rfind(" ", 0, max_chars)
        out = out[:cut if cut > max_chars // 2 else max_chars].rstrip(" ,;")
    return out


# --- the indexer's step ------------------------------------------------------------------


@dataclass
class _Job:
    row: sqlite3.Row
    window: str


def page_window(conn: sqlite3.Connection, row: sqlite3.Row) -> str:
    """The chunk with up to WINDOW_CHARS // 2 characters of its page on each side: bounded
    however long the page or its lines are (lines are read cut to that width)."""
    half = WINDOW_CHARS // 2
    before = fulltext.read_lines(conn, row["source"], row["page"],
                                 max(1, row["line_start"] - WINDOW_LINES), row["line_start"] - 1,
                                 width=half)
    after = fulltext.read_lines(conn, row["source"], row["page"], row["line_end"] + 1,
                                row["line_end"] + WINDOW_LINES, width=half)
    above = "\n".join(_fill(reversed(before), half)[::-1])
    below = "\n".join(_fill(after, half))
    return "\n".join(part for part in (above, row["text"], below) if part)


def _fill(lines, budget: int) -> list[str]:
    """Line texts taken in order while they fit in `budget` characters."""
    out: list[str] = []
    for piece in lines:
        budget -= len(piece.text) + 1
        if budget < 0:
            break
        out.append(piece.text)
    return out


class Step:
    """The contextualize step of one indexing run (pipeline.indexer's Indexer owns one). It
    runs before every embedding pass, so a chunk is embedded once, with its context; it
    remembers for the run whether the provider stopped (a refused key) and whether failed
    chunks were retried."""

    def __init__(self, config: dict | None,
                 tokenize: Callable[[str, str | None], list[str]]) -> None:
        self.llm = contextualizer_for(config)
        self.signature = signature_of(config)
        self.tokenize = tokenize
        self.stopped: str | None = None  # why this run stopped calling the LLM
        self.retried = False  # failed chunks get one more try per run, in its first pass
        self.done = self.failed = 0

    def run(self, conn: sqlite3.Connection, redo: bool = False) -> int:
        """Give every chunk that needs one its context (with `redo`, also the stale ones;
        with no contextualizer, `redo` clears old contexts); returns chunks changed."""
        import chunking

        retry, self.retried = not self.retried, True
        after, changed = 0, 0
        batch = self.llm.batch_size if self.llm else DEFAULT_BATCH
        while rows := contexts.chunks_to_contextualize(conn, after, batch, self.signature,
                                                       redo and not self.stopped,
                                                       retry and not self.stopped):
            after = rows[-1]["id"]
            updates = [u for u in self._updates(conn, rows, redo, chunking.bm25_text) if u]
            contexts.save_contexts(conn, updates)
            changed += len(updates)
        return changed

    def _updates(self, conn, rows, redo: bool, bm25_text) -> list[contexts.ContextUpdate | None]:
        """One update per row: tokens rebuilt for carried contexts, contexts cleared when no
        contextualizer is configured, the LLM asked for the rest (concurrently)."""
        out: list[contexts.ContextUpdate | None] = []
        jobs: list[_Job] = []
        for row in rows:
            current = (row["llm_model"], row["llm_prompt"]) == self.signature
            if self.llm is None and redo:
                out.append(self._update(row, "", None, None, 0, bm25_text, reembed=bool(
                    row["llm_context"])))
            elif row["llm_state"] == contexts.CARRIED and (current or not redo or self.stopped):
                out.append(self._update(row, row["llm_context"], contexts.DONE, None,
                                        row["llm_attempts"], bm25_text, keep_signature=True))
            elif self.llm is not None and not self.stopped:
                jobs.append(_Job(row, page_window(conn, row)))
        if jobs:
            with ThreadPoolExecutor(max_workers=min(self.llm.concurrency, len(jobs))) as pool:
                answers = list(pool.map(self._ask, jobs))
            for job, (context, error) in zip(jobs, answers, strict=True):
                out.append(self._answered(job.row, context, error, bm25_text))
        return out

    def _ask(self, job: _Job) -> tuple[str | None, Exception | None]:
        """(context, None) or (None, the error); never raises, so one call cannot lose the
        others' answers."""
        try:
            return self.llm.context(job.row["source"], job.window, job.row["text"]), None
        except Exception as err:  # an LLM provider can fail in any way; sorted out below
            return None, err

    def _answered(self, row, context: str | None, error: Exception | None,
                  bm25_text) -> contexts.ContextUpdate | None:
        if context is not None:
            self.done += 1
            return self._update(row, context, contexts.DONE, None, 0, bm25_text, reembed=True)
        if isinstance(error, embedders.EmbedderAuthError):
            self._stop(str(error))
            return None  # not the chunk's fault: it is tried again once the key is set
        self.failed += 1
        if isinstance(error, embedders.EmbedderUnreachable):
            self._stop(str(error))
        message = f"{type(error).__name__}: {error}"[:ERROR_CHARS]
        return contexts.ContextUpdate(row["id"], row["llm_context"], contexts.FAILED,
                                      *self.signature, row["llm_attempts"] + 1, message)

    def _update(self, row, context: str, state: str | None, error: str | None, attempts: int,
                bm25_text, reembed: bool = False,
                keep_signature: bool = False) -> contexts.ContextUpdate:
        """The update that sets `context` and rebuilds the chunk's BM25 tokens with it."""
        extra = "\n".join(part for part in (row["context"], context) if part)
        tokens = " ".join(self.tokenize(bm25_text(row["source"], extra, row["text"]),
                                        row["parser"]))
        model, prompt = ((row["llm_model"], row["llm_prompt"]) if keep_signature
                         else self.signature or (None, None))
        return contexts.ContextUpdate(row["id"], context, state, model if state else None,
                                      prompt if state else None, attempts, error, tokens,
                                      reembed)

    def _stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
            print(f"linecite: contextualizing stopped for this run: {reason}", file=sys.stderr)

    def finish(self, conn: sqlite3.Connection) -> str | None:
        """Record why this run stopped contextualizing (or that it did not); the warning for
        the run's summary, or None."""
        if self.llm is None:
            return None
        fulltext.set_meta(conn, contexts.CONTEXT_STOP_KEY, self.stopped or "")
        if not self.stopped:
            return None
        return (f"contextualizing stopped: {self.stopped}; the chunks are indexed without a "
                "context and get one on the next run")
