"""How well a source's file name answers to the question: the document-aware part of ranking.

Questions name their document far more often than its pages do ("Adobe's FY2022 operating
margin" is about ADOBE_2022_10K.pdf), and among look-alike filings the chunk that matches the
question's other words best is often in the wrong one. Each candidate source gets a title
score in 0-1 (the idf-weighted words it shares with the question, idf over the candidates'
titles, over the best such match), which search.py blends into every chunk of that source.

A title counts only when the question names it: at least one shared word that is not a number
and that the question writes capitalized (a name: "Adobe", "3M", "Best Buy"). Topic words
that happen to be in file names ("plan", "bank", "2024") then move nothing: on the Korean set,
whose file names are topics, an ungated title score cost 0.01-0.03 nDCG@10 and won nothing;
scripts without case (Hangul, Han) never trigger it. Adjacent question words also match a
title word written as one ("Best Buy" -> BESTBUY). Measured on every set: docs/quality.md.

Layer: ranking (pure, given a tokenizer), below search.py.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from itertools import pairwise

import chunking

# ---------------------------------------------------------------------------
TITLE_WEIGHT = 0.3  # share of the title score in a chunk's final score (search.titleWeight)
TITLE_CACHE = 16384  # sources whose title tokens are kept between queries (~10 MB; at
# 4,096 a query touching 55 sources missed every time once 100 questions met 5,500 of them)
# ---------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=TITLE_CACHE)
def title_tokens(source: str, tokenize: Callable[[str], list[str]]) -> frozenset[str]:
    """The source's file-name words as BM25 tokens (a Korean title costs a Kiwi call)."""
    return frozenset(tokenize(chunking.title_words(source)))


def _capitalized(query: str) -> list[str]:
    """The question's words written with a capital first letter, lower-cased."""
    return [word.lower() for word in _WORD.findall(query) if word[0].isupper()]


def _named(word: str, capitalized: list[str]) -> bool:
    """True when the question writes `word` (or the first of the words joined into it)
    capitalized: the shared word is a name, not a topic."""
    stem = word[:max(2, len(word) // 2)]
    return any(cap.startswith(stem) for cap in capitalized)


def title_scores(query: str, query_tokens: list[str], sources: Iterable[str],
                 tokenize: Callable[[str], list[str]]) -> dict[str, float]:
    """Per source, 0-1: how strongly its file name matches the question (1 = the best
    match among these sources; 0 = the question does not name it)."""
    capitalized = _capitalized(query)
    if not capitalized:  # no name in the question: no title counts (and none is tokenized)
        return {}
    sources = list(dict.fromkeys(sources))
    wanted = set(query_tokens) | {a + b for a, b in pairwise(query_tokens)}
    titles = {source: title_tokens(source, tokenize) for source in sources}
    df = Counter(word for words in titles.values() for word in words & wanted)
    raw: dict[str, float] = {}
    for source, words in titles.items():
        shared = words & wanted
        if not any(not word.isdigit() and _named(word, capitalized) for word in shared):
            continue
        raw[source] = sum(math.log(1 + (len(sources) - df[word] + 0.5) / (df[word] + 0.5))
                          for word in shared)
    best = max(raw.values(), default=0.0)
    return {source: score / best for source, score in raw.items()} if best > 0 else {}
