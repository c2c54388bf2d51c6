"""Search across knowledge bases: which KBs a call names, and their hits as one ranking.

`kb_id` may be a list of ids or "*" (every KB, at most MAX_SEARCH_KBS). Each KB is searched
on its own, as a one-KB search is (its own legs, embedder, fusion and settings: a KB with
`embedding: none` answers from BM25, one with another embedder from its own vectors), so
every leg is normalised over that KB's own candidates. The KBs' rankings are then made
comparable: each KB's scores over its best (a KB holding many documents does not crowd out
one holding few), times the strength of that best evidence (ranking/evidence.py: the share
of the query's words it holds, weighted by their rarity in that KB, or how close it is by
meaning), so a KB where no word occurs and nothing is close never shows a strong score (its
best hit scored 1 before, issue 47); then merged, ties going to the better rank within its
KB. When every KB's hits are weak, one `note` says so. A KB that cannot answer (damaged,
broken config, nothing indexed, no source passing the filters) is named in
`knowledge_bases` with why, and the others answer.

Layer: surface: below library.py's search (which hands it a one-KB search), above nothing of
the query engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import kb as kbmod
from common import limits
from common.commands import command
from common.limits import UserError, shown

# ---------------------------------------------------------------------------
EVERY_KB = "*"  # kb_id meaning every knowledge base
MAX_SEARCH_KBS = 10  # knowledge bases one search call may take
NOTHING_CLOSE = ("No knowledge base searched holds a word of the query or a passage close in "
                 "meaning: every hit is weak (each KB's `note` in knowledge_bases says what it "
                 "holds); try other words, the documents' language (queries=[...]), or "
                 "list_sources")
# ---------------------------------------------------------------------------


def chosen(kb_id: str | Sequence[str], known: list[str]) -> list[str]:
    """The KB ids a call names (a list, or "*"), checked: known, no repeats, at most
    MAX_SEARCH_KBS."""
    if not known:
        raise UserError("there is no knowledge base yet; create one by indexing files: "
                        f"`{command('ingest', 'FILE_OR_FOLDER', '[--kb ID]')}`, or call "
                        "ingest_file")
    if kb_id == EVERY_KB:
        if len(known) > MAX_SEARCH_KBS:
            raise UserError(f'kb_id "*" would search {len(known)} knowledge bases; one search '
                            f"takes at most {MAX_SEARCH_KBS}: pass a list of kb_ids "
                            f"(list_knowledge_bases names them)")
        return list(known)
    ids = list(kb_id)
    if not ids:
        raise UserError('kb_id is an empty list; pass kb_ids, "*" for every knowledge base, '
                        "or leave it out")
    if len(ids) > MAX_SEARCH_KBS:
        raise UserError(f"kb_id lists {len(ids)} knowledge bases; one search takes at most "
                        f"{MAX_SEARCH_KBS}")
    for one in ids:
        limits.check_text(one, "kb_id", limits.MAX_KB_ID_CHARS)
    unknown = [one for one in ids if one not in known]
    if unknown:
        raise UserError(f"unknown kb_id {', '.join(map(shown, unknown))}; known knowledge "
                        f"bases: {', '.join(known)} (see list_knowledge_bases)")
    return list(dict.fromkeys(ids))


def search_all(kbs: list[str], top_k: int, search_one: Callable[[str], dict],
               status: Callable[[Exception], str]) -> dict:
    """Every KB's search (`search_one(kb_id)`, a one-KB answer) as one answer: the hits
    merged by score over each KB's best, what each KB said, and the KBs that could not
    answer with why (`status(error)` names the kind); an error only when none could."""
    answers, report = [], []
    for kb_id in kbs:
        try:
            answer = search_one(kb_id)
        except (UserError, kbmod.ConfigError) as err:
            report.append({"kb_id": kb_id, "status": status(err), "error": str(err)})
            continue
        answers.append(answer)
        entry = {"kb_id": kb_id, "status": "degraded" if answer.get("degraded") else "ok",
                 "hits": len(answer["hits"])}
        entry.update({k: answer[k] for k in ("evidence", "degraded", "warning", "note",
                                             "expansion", "queries") if k in answer})
        report.append(entry)
    if not answers:
        raise UserError("no knowledge base could answer: " + "; ".join(
            f"{r['kb_id']}: {r['error']}" for r in report))
    result = {"kb_id": kbs, "search_mode": answers[0]["search_mode"],
              "hits": merged([a["hits"] for a in answers], top_k,
                             [a.get("evidence", 1.0) for a in answers]),
              "knowledge_bases": report}
    if all("note" in a for a in answers):
        result["note"] = NOTHING_CLOSE
    failed = [r["kb_id"] for r in report if r["status"] not in ("ok", "degraded")]
    if failed:
        result["failed"] = (f"{', '.join(failed)} did not answer (see knowledge_bases); "
                            "these hits come from the others")
    return result


def merged(rankings: list[list[dict]], top_k: int,
           strengths: list[float] | None = None) -> list[dict]:
    """The KBs' hits in one list: each score over its KB's best times that KB's strength of
    evidence (1 when not given; the KB's own score kept as `kb_score`), best first, ties by
    the rank within its KB, then by the order the KBs were named."""
    pooled = []
    for order, hits in enumerate(rankings):
        best = max((h["score"] for h in hits), default=0.0) or 1.0
        scale = 1.0 if strengths is None else strengths[order]
        for rank, hit in enumerate(hits):
            score = round(hit["score"] / best * scale, 6)
            pooled.append((-score, rank, order, {**hit, "score": score,
                                                  "kb_score": hit["score"]}))
    pooled.sort(key=lambda item: item[:3])
    return [item[3] for item in pooled[:top_k]]
