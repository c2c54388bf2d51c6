"""What the status tools say of a KB (list_knowledge_bases, get_index_info, check_changes,
a search over several KBs): its status word, the health of its index (counts, states, problem
files, warnings), a store folder gone missing, and dry-run lists cut to size.

Layer: service: below library.py's tools, above the storage modules and the queue.
"""

from __future__ import annotations

from pathlib import Path

import chroma_store
import contextualize
import fulltext
import kb as kbmod
import queue_runner
from common import limits
from index import segment
from index.store_errors import KBDamaged
from ranking import filters
from service.kb_cache import OpenKB
from service.source_names import UnknownSource


def provider(kb: kbmod.KnowledgeBase) -> str:
    """The KB's embedding provider (`builtin` when its config names none)."""
    return (kb.embedding or {}).get("provider", "builtin")


def kb_status(base: Path, kb_id: str, counts: dict) -> str:
    """empty, indexing (a live run holds the KB), incomplete (chunks wait for vectors and
    nothing runs: the next run finishes them) or ready."""
    if not counts.get("sources"):
        return "empty"
    if queue_runner.live_status(base, kb_id)["status"] == "running":
        return "indexing"
    return "incomplete" if counts.get("pending") else "ready"


def search_status(err: Exception) -> str:
    """How a KB that did not answer a search over several is named: damaged, no_match (no
    source passes the filters, or `source` is not there) or error."""
    if isinstance(err, KBDamaged):
        return "damaged"
    return "no_match" if isinstance(err, (filters.NoMatch, UnknownSource)) else "error"


def missing_store_folder(entry: OpenKB) -> str | None:
    """The cheap check (no Chroma opened): an embedded KB with embedded chunks and no
    `chroma/` folder, as a cleanup tool leaves it."""
    kb = entry.kb
    if provider(kb) == "none" or kb.chroma_url is not None or (kb.folder / "chroma").is_dir():
        return None
    if not fulltext.counts(entry.searches.conn)["embedded"]:
        return None
    return chroma_store.missing_message(kb.id, kb.folder / "chroma", "is missing")


def index_health(entry: OpenKB) -> dict:
    """What get_index_info says of an index: counts, states, problem files, warnings (call
    inside KBCache.searching)."""
    conn = entry.searches.conn
    counts = fulltext.counts(conn)
    problems = fulltext.problem_sources(conn, limits.MAX_LIST_ROWS)
    info = {"counts": counts, "sources_by_state": fulltext.state_counts(conn),
            "problem_files": problems}
    warnings = [entry.config_note] if entry.config_note else []
    problem = entry.vector_note or missing_store_folder(entry)
    if problem:
        info["vector_store"] = "degraded"  # keyword search serves; vector search waits for the fix
        warnings.append(problem)
    contexts = contextualize.state(conn, entry.kb.contextualizer)
    if contexts["provider"] != "none" or contexts["contextualized"] or contexts["stale"]:
        info["contextualization"] = contexts
        if contexts.get("action"):
            warnings.append(f"contexts made by another model or prompt: {contexts['action']}")
        if contexts.get("stopped"):
            warnings.append(f"contextualizing stopped: {contexts['stopped']}")
    made_by = fulltext.get_meta(conn, fulltext.SEGMENTER_KEY)
    if counts["chunks"] and made_by != segment.signature():
        warnings.append("this index's BM25 tokens come from another version of the segmenters "
                        "(Kiwi, jieba, the stemmer), so keyword search can miss words; "
                        "start_reindex(kb_id) re-tokenizes it without extracting or embedding "
                        "again")
    if warnings:
        info["warnings"] = warnings
    return info


def capped_lists(plan: dict) -> dict:
    """A dry run's file lists cut to MAX_LIST_ROWS each, with the full counts beside them."""
    out = {}
    for key, value in plan.items():
        if isinstance(value, list) and len(value) > limits.MAX_LIST_ROWS:
            out[f"{key}_total"] = len(value)
            value = value[:limits.MAX_LIST_ROWS]
        out[key] = value
    return out
