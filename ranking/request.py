"""One search as asked (SearchRequest) and how a KB ranks (SearchSettings): the two values a
search is carried down with, from the `search` tool (server.py) and the web page's search
(surface/webui.py) through library.py to search.py's Searcher. A new option of the tool is a
field here and the code that uses it; no layer in between names it.

A request is checked once, where a caller's arguments come in (`SearchRequest.checked`, with
the messages the agent reads); what library.py derives from it for one KB (the names `source`
stands for, the expanded phrasings, the hits to rank) is `dataclasses.replace` of a checked one.

Layer: ranking: below library.py, search.py and the surfaces, above common/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from common import limits
from common.limits import UserError, check_text
from index.query_sql import Sources
from ranking import neighbours, titles, units
from ranking.filters import Filters
from ranking.fusion import DEFAULT_FUSION, Fusion

Mode = Literal["auto", "bm25", "vector", "exact"]


@dataclass(frozen=True)
class SearchRequest:
    """What one search asks: the question and its other phrasings, how many hits, which legs
    (`mode`), which KBs and sources, and the agent's overrides of the KB's settings."""

    query: str  # the question
    top_k: int = 10  # hits to return
    mode: Mode = "auto"
    kb_id: str | tuple[str, ...] | None = None  # one KB, several, "*" (every KB) or the only
    # a source's name or a path glob as asked; for search.py, the indexed name(s) it stands for
    source: Sources = None
    _: KW_ONLY
    queries: tuple[str, ...] = ()  # other phrasings of the question, searched and fused too
    filters: Filters | None = None  # path, types, dates, language (ranking/filters.py)
    diversity: float | None = None  # MMR's lambda; None: the KB's setting
    expand: bool = True  # let the KB's query expansion add rewrites
    case_sensitive: bool = False  # exact mode: match the query's case too

    @classmethod
    def checked(cls, query: str, top_k: int = 10, mode: Mode = "auto",
                kb_id: str | Sequence[str] | None = None, source: str | None = None, *,
                queries: Sequence[str] | None = None, filters: Filters | None = None,
                diversity: float | None = None, expand: bool = True,
                case_sensitive: bool = False) -> SearchRequest:
        """A request from a caller's arguments, each checked against the stated bounds before
        any work: an empty `query` takes the first of `queries`, and repeated phrasings are
        searched once."""
        asked = _phrasings(query, queries)
        limits.check_name(source, "source")
        return cls(asked[0], top_k, mode, kb_id if kb_id is None or isinstance(kb_id, str)
                   else tuple(kb_id), source, queries=tuple(asked[1:]), filters=filters,
                   diversity=diversity, expand=expand, case_sensitive=case_sensitive)

    @property
    def phrasings(self) -> list[str]:
        """The question first, then its other phrasings."""
        return [self.query, *self.queries]


def _phrasings(query: str, queries: Sequence[str] | None) -> list[str]:
    """The question and its other phrasings, checked, without repeats."""
    asked = [q for q in [query, *(queries or [])] if q.strip()] if queries else [query]
    if queries is not None and len(queries) > limits.MAX_QUERIES:
        raise UserError(f"queries holds {len(queries)} phrasings; send at most "
                        f"{limits.MAX_QUERIES}")
    for n, text in enumerate(asked):
        check_text(text, "query" if n == 0 else "queries", limits.MAX_QUERY_CHARS,
                   allow_newlines=True)
    if not asked or not asked[0].strip():
        raise UserError("query is empty; pass the words, name or number to look for")
    return list(dict.fromkeys(asked))


@dataclass(frozen=True)
class SearchSettings:
    """How a KB ranks (its `search` block, kb.search_settings); the defaults are a KB's
    without one. `vector_weight` None: fusion.py's default for the method."""

    fusion: Fusion = DEFAULT_FUSION
    vector_weight: float | None = None  # the vector leg's share in the fusion
    cross_lingual: float = 0.0  # foreign chunks' share of their vector-alone score (fusion.py)
    title_weight: float = titles.TITLE_WEIGHT  # the file-name match's share in `auto`
    diversity: float = 0.0  # MMR's lambda (0 = only search.py's per-source rule)
    unit_weight: float = units.WEIGHT  # the BM25 of a chunk's page added to its own (0 = off)
    neighbour_weight: float = neighbours.WEIGHT  # a code neighbour's share in `auto` (0 = off)
    definitions_first: bool = True  # `auto`: code defining a one-name query first (off: False)


DEFAULT_SETTINGS = SearchSettings()  # a KB without a `search` block
