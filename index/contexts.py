"""The contextualizer's contexts in fulltext.sqlite3's chunks (the llm_* columns): which
chunks still need one, saving them with their BM25 tokens and embedding state in one
transaction, and keeping them when a source is replaced, so a chunk whose text comes back
needs no second LLM call. A chunk's llm_state is NULL until tried, then DONE, FAILED
(retried on later runs up to MAX_CONTEXT_ATTEMPTS), or CARRIED: kept from the same text of
the source's previous version, its BM25 tokens not yet rebuilt. contextualize.py asks the
LLM; fulltext.py keeps the contexts across replace_source and reports how far they are.

Layer: storage: the contexts in fulltext.sqlite3, below contextualize.py and fulltext.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

# what a chunk is embedded and BM25-indexed with besides its text: the sheet's header row
# and the contextualizer's context (hits and read_range show neither)
INDEXED_CONTEXT = ("CASE WHEN c.llm_context = '' THEN c.context WHEN c.context = ''"
                   " THEN c.llm_context ELSE c.context || char(10) || c.llm_context END")


MAX_CONTEXT_ATTEMPTS = 3  # runs that try a chunk's context before it is given up
CONTEXT_STOP_KEY = "contextualizer_stop"  # meta key: why the last run stopped contextualizing
DONE = "done"  # llm_state: contextualized, its context in the BM25 tokens
FAILED = "failed"  # llm_state: tried and failed; retried up to MAX_CONTEXT_ATTEMPTS runs
CARRIED = "carried"  # llm_state: kept from the previous version, BM25 tokens not yet rebuilt
LLM_COLUMNS = ("llm_context", "llm_state", "llm_model", "llm_prompt", "llm_attempts",
               "llm_error")


@dataclass(frozen=True)
class ContextUpdate:
    """A chunk's new context fields; `tokens` (its full BM25 tokens) when they change, and
    `reembed` when its vector must be made again from the new context."""

    rowid: int
    context: str
    state: str
    model: str | None
    prompt: str | None
    attempts: int
    error: str | None = None
    tokens: str | None = None
    reembed: bool = False


def kept_contexts(conn: sqlite3.Connection, source_id: int) -> dict[str, tuple]:
    """text -> context fields of a source's chunks that have been tried, before the source is
    replaced: a chunk whose text comes back keeps its context (no second LLM call)."""
    rows = conn.execute(f"SELECT text, {', '.join(LLM_COLUMNS)} FROM chunks"
                        " WHERE source_id = ? AND llm_state IS NOT NULL", (source_id,))
    return {row[0]: tuple(row[1:]) for row in rows}


def restore_contexts(conn: sqlite3.Connection, source_id: int, kept: dict[str, tuple]) -> None:
    """Give the new chunks with a kept text their old context; a context that was in the BM25
    tokens becomes `carried` until the indexer rebuilds those tokens (it owns the segmenter)."""
    if not kept:
        return
    rows = conn.execute("SELECT id, text FROM chunks WHERE source_id = ?", (source_id,))
    updates = []
    for rowid, text in rows.fetchall():
        if text in kept:
            context, state, *rest = kept[text]
            state = CARRIED if context and state in (DONE, CARRIED) else state
            updates.append((context, state, *rest, rowid))
    conn.executemany(f"UPDATE chunks SET {' = ?, '.join(LLM_COLUMNS)} = ? WHERE id = ?",
                     updates)


def chunks_to_contextualize(conn: sqlite3.Connection, after: int, limit: int,
                            signature: tuple[str, str] | None, redo: bool,
                            retry: bool) -> list[sqlite3.Row]:
    """Up to `limit` chunks past rowid `after` that need a context, by rowid: `carried` ones
    always; with a contextualizer (`signature` = (model, prompt hash)) the never tried ones,
    failed ones with tries left when `retry`, and with `redo` every one whose context is not
    done by this signature; with none and `redo`, every one that holds a context (to clear)."""
    wanted = ["c.llm_state = 'carried'"]
    params: list = []
    if signature is not None:
        wanted.append("c.llm_state IS NULL")
        if retry:
            wanted.append("(c.llm_state = 'failed' AND c.llm_attempts < ?)")
            params.append(MAX_CONTEXT_ATTEMPTS)
        if redo:
            wanted.append("NOT (c.llm_state IS 'done' AND c.llm_model IS ? AND c.llm_prompt IS ?)")
            params += list(signature)
    elif redo:
        wanted.append("c.llm_context != '' OR c.llm_state IS NOT NULL")
    return conn.execute(
        "SELECT c.id, c.chunk_id, s.name AS source, s.parser, c.page, c.line_start,"
        f" c.line_end, c.text, c.context, {', '.join('c.' + col for col in LLM_COLUMNS)}"
        " FROM chunks c JOIN sources s ON s.id = c.source_id"
        f" WHERE c.id > ? AND ({' OR '.join(wanted)}) ORDER BY c.id LIMIT ?",
        [after, *params, limit]).fetchall()


def save_contexts(conn: sqlite3.Connection, updates: Sequence[ContextUpdate]) -> None:
    """Write contexts, their BM25 tokens and the embedding state in one transaction, so a
    crash leaves each chunk either as it was or with a context it will be embedded with. The
    FTS5 external-content index gets the old tokens' 'delete' before the new ones go in."""
    with conn:
        for u in updates:
            conn.execute("UPDATE chunks SET llm_context = ?, llm_state = ?, llm_model = ?,"
                         " llm_prompt = ?, llm_attempts = ?, llm_error = ? WHERE id = ?",
                         (u.context, u.state, u.model, u.prompt, u.attempts, u.error, u.rowid))
            if u.tokens is not None:
                conn.execute("INSERT INTO chunks_fts(chunks_fts, rowid, tokens)"
                             " SELECT 'delete', id, tokens FROM chunks WHERE id = ?", (u.rowid,))
                conn.execute("UPDATE chunks SET tokens = ? WHERE id = ?", (u.tokens, u.rowid))
                conn.execute("INSERT INTO chunks_fts(rowid, tokens) VALUES (?, ?)",
                             (u.rowid, u.tokens))
            if u.reembed:
                conn.execute("UPDATE chunks SET embed_state = 'pending', embed_error = NULL"
                             " WHERE id = ?", (u.rowid,))
                conn.execute("UPDATE sources SET state = 'pending' WHERE state IN"
                             " ('ready', 'degraded') AND id = (SELECT source_id FROM chunks"
                             " WHERE id = ?)", (u.rowid,))
        from index import bm25_segments  # numpy: imported on the first write, not with this module
        bm25_segments.flush(conn)
