"""Tokenizer for the BM25 leg: text -> lowercased search tokens for Korean, Chinese and the rest.

fulltext.py stores a chunk's `" ".join(chunk_tokens(text, parser))` in an FTS5 column
(tokenizer unicode61, tokenchars 'L* N* Co M*'), and search.py runs queries through
`query_tokens`, the same rules, so index and query always agree. No I/O, no argv;
`tokens_many` and `chunk_tokens_many` are the same things for bulk indexing.

Text is NFKC-normalized (full-width Ａ１ -> a1), split on Han/kana runs, and every token
casefolded (after the split: camelCase is seen in its case):
- Han and kana runs -> jieba search mode, no HMM: a compound plus its dictionary parts
  (人工智能 -> 人工 智能 人工智能). Kana has no jieba dictionary: one token per character.
- Text between them that holds Hangul -> Kiwi reads all of it (context: "API를" is 를 the
  particle), and its content morphemes (KIWI_KEEP) become the Hangul tokens; verbs and
  adjectives as stems (배포하는 -> 배포, 빠르게 -> 빠르). Latin and digits come from the regex.
- All other text -> runs of letters, digits and combining marks. Punctuation splits words,
  so "3.5" -> "3" "5", just as FTS5's unicode61 would split them; a word mixing letters and
  digits also gives its parts (FY2022 -> fy2022 fy 2022).
- Identifiers give the whole and their words: a camelCase word its parts (parseHttpResponse,
  ParseHTTPResponse -> parsehttpresponse parse http response; not iPhone: a part of one
  letter; not RNAs: a plural), words joined by _ (or 3+ by -) also the joined whole
  (parse_http_response, parse-http-response -> parsehttpresponse parse http response; but
  e-mail -> e mail). So a question in words finds the code, and any spelling of the
  identifier finds the others, its rare whole token weighing most.
- English words (ASCII letters) lose their inflection (Snowball's stem, PyStemmer, with back
  the derivational ending it cut) in the chunks of every source but code, each stem behind
  STEM_MARK (`prose_tokens`: connects, connected -> ~connect; connections -> ~connection,
  financial is no financing); identifier wholes (geturl, parsehttpresponse: their parts are
  words), numbers, other scripts and code chunks (`tokens`: stemming code cost the code bench)
  stay as written. A query holds each English word as written and as its stem (`query_tokens`:
  connected ~connect), so it meets a code chunk's words and a prose chunk's stems; the mark
  keeps the two apart, so a word counts once in either (a prose chunk holds no word as written
  that a stem stands for, a code chunk no stem).
Every token holds only Unicode letters, digits and marks (a stem also STEM_MARK, a private-use
character FTS5 keeps), so FTS5 never re-splits it.
Kiwi and jieba each load on first need (the first Hangul, the first Han), once per process;
nothing is ever written to stdout.

BM25Okapi nDCG@10, title + text, whole documents (rules revision 1): autorag-ko 0.936 (114 queries),
cmrc2018-dev 0.988 (3,219 queries), scifact 0.658 train / 0.652 test. CPU time per token on
those corpora: Korean ~18k tokens/s (Kiwi is the cost), Chinese ~185k, English ~450k.

Layer: ground (no project imports): tokens for the lexical leg, the chunker and the index.
"""

import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from functools import cache, lru_cache
from itertools import accumulate, pairwise
from typing import Literal

# -----------------------------------------------------------------------------
# Kiwi tags kept (prefix match, so VV also keeps VV-I/VV-R). Dropped: particles J*, endings E*,
# affixes X[PS]*, dependent nouns NNB (것 수 등 년), pronouns NP and adverbs MAG (왜 잘 더).
# autorag-ko nDCG@10: 0.936 as here, 0.935 keeping NNB/NP/MAG, 0.934 nouns only (all noise-level;
# these drop question words from queries).
KIWI_KEEP = ("NNG", "NNP", "NR", "VV", "VA", "XR")
KIWI_CHUNK = 4000  # max chars per Kiwi call; longer Korean text is cut at whitespace
CAMEL_MIN_PART = 2  # a camelCase word is split only when every part is this long (not iPhone)
JOINED_MAX_WORDS = 8  # words joined by _ or - that also give the whole (parse_http -> parsehttp)
HYPHEN_MIN_WORDS = 3  # ... by hyphens, at least this many: two are prose (e-mail, 10-K, IL-6)
WORD_CACHE = 1 << 14  # distinct words whose tokens are kept: words repeat (Zipf), 1.4x faster
WORD_CACHE_CHARS = 64  # ... each at most this long (~13 MB at worst; a base64 blob is not kept)
# -----------------------------------------------------------------------------

HANGUL = "\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff"
HAN_KANA = "\u3005\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff" + (
    "\U00020000-\U0003ffff"
)
HAN_RE = re.compile(f"[{HAN_KANA}]+")
HANGUL_RE = re.compile(f"[{HANGUL}]+")
ALNUM_PARTS_RE = re.compile(r"\d+|\D+")  # digit runs and the runs between them
# soft hyphen, zero-width space, word joiner, BOM; lone surrogates (Kiwi would drop a neighbour)
INVISIBLE_RE = re.compile("[\u00ad\u200b\u2060\ufeff\ud800-\udfff]")

# Bump when a change to this file or to chunking.bm25_text changes any chunk's tokens: indexes
# made before are re-tokenized by the next ingest run (see signature()). 2: title words,
# 3: letter and digit parts of mixed words, 4: identifiers (camelCase parts, _ and - joined),
# 5: English words stemmed (Snowball) in the chunks of every source but code, 6: inflections
# only (a Snowball stem keeps the derivational ending it cut: financing / financial).
RULES_REVISION = 6

# What the tokens are for: "surface" as written (code chunks), "prose" with English words
# stemmed (every other chunk), "query" both (a question meets either kind of chunk).
Form = Literal["surface", "prose", "query"]
CODE_PARSER = "code:"  # sources.parser of source code starts with this (codechunks.py)
# put before every stem: a private-use character, which no word of a text holds (it is no
# letter) and FTS5 keeps in a token (tokenchars 'Co'), so a stem never meets a word as written
STEM_MARK = "\ue000"

_lock = threading.Lock()
_kiwi = None  # kiwipiepy.Kiwi, set by _kiwi_model()
_jieba = None  # jieba.Tokenizer, set by _jieba_tokenizer()
# endings of an English word that inflect it (the first that fits is taken), and the endings
# that look like one but are the word's own (process, status, analysis)
INFLECTIONS = (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ing", ""), ("e", ""))
NOT_INFLECTIONS = ("ss", "us", "is")
_stemmers = threading.local()  # PyStemmer's Stemmer is not thread-safe: one per thread


@cache
def _marks() -> str:
    """Every combining mark, escaped for a character class. Built on first use (~50 ms):
    Python's \\w lacks the marks that FTS5 keeps (हिन्दी is one word)."""
    codes = (*range(0x20000), *range(0xE0100, 0xE01F0))  # every mark lives in these planes
    return re.escape("".join(c for c in map(chr, codes) if unicodedata.category(c)[0] == "M"))


def _word(exclude: str) -> str:
    """A run of letters, digits and combining marks, minus the `exclude` ranges (no lone marks)."""
    return rf"[^\W_{exclude}](?:[^\W_{exclude}]|[{_marks()}])*"


@cache
def _word_re(exclude: str = "") -> re.Pattern[str]:
    """One word (see _word); compiled once per `exclude`."""
    return re.compile(_word(exclude))


@cache
def _compound_re(exclude: str = "") -> re.Pattern[str]:
    """Words joined by underscores or single hyphens: parse_http_response, e-mail, 10-K."""
    return re.compile(rf"{_word(exclude)}(?:(?:_+|-){_word(exclude)})*")


def _kiwi_model():
    """Kiwi, loaded on the first Hangul text (~320 MB resident: an English-only corpus never
    pays for it)."""
    global _kiwi
    if _kiwi is not None:  # called per Korean batch: no lock once loaded
        return _kiwi
    with _lock:
        if _kiwi is None:
            from kiwipiepy import Kiwi

            # Its multi-word dictionary yields one NNP "해리 포터와 마법사의 돌" with the
            # particles inside, which a query "해리 포터" would never match. Model: the bundled one.
            kiwi = Kiwi(load_multi_dict=False)
            kiwi.tokenize("")  # Kiwi finishes loading on its first call
            _kiwi = kiwi
    return _kiwi


def _jieba_tokenizer():
    """jieba, loaded on the first Han or kana text (~80 MB), its 'Building prefix dict' log
    silenced: it goes to stderr, but the noise helps nobody."""
    global _jieba
    if _jieba is not None:  # called per Han run: no lock once loaded
        return _jieba
    with _lock:
        if _jieba is None:
            import logging

            import jieba

            jieba.setLogLevel(logging.WARNING)
            tok = jieba.Tokenizer()  # our own instance: jieba.add_word elsewhere cannot change it
            tok.initialize()
            _jieba = tok
    return _jieba


def _stem(word: str) -> str:
    """A casefolded word without its inflection: the Snowball English stem with back the
    derivational ending Snowball also cut (operations -> operation, operated -> operat,
    financial stays apart from financing -> financ). Snowball's whole stem joins forms a
    filing keeps apart: FinanceBench lost 0.01 more nDCG@10 with it, SciFact gained 0.005
    more (docs/quality.md). PyStemmer imports in ~1 ms; each thread makes its own Stemmer
    on its first word."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        try:
            import Stemmer
        except ImportError as err:  # an install from before it was required
            raise ImportError("PyStemmer is missing: install the requirements again (pip "
                              "install -r requirements.txt -c constraints.txt)") from err
        stemmer = _stemmers.english = Stemmer.Stemmer("english", 0)  # no cache: ours is
    stem = stemmer.stemWord(word)
    if not word.startswith(stem):  # study -> studi: Snowball's own stem
        return stem
    rest = _uninflected(word[len(stem):])
    return stem if rest == stem[-1] else stem + rest  # running -> run, not runn


def _uninflected(ending: str) -> str:
    """What Snowball cut from a word, less its inflection (ations -> ation, ating -> at)."""
    for suffix, put in INFLECTIONS:
        if ending.endswith(suffix) and not ending.endswith(NOT_INFLECTIONS):
            return ending[:len(ending) - len(suffix)] + put
    return ending


@cache
def signature() -> str:
    """What decides the tokens: these rules and the segmenters' and stemmer's versions. An
    index whose tokens came from another signature would silently miss words a query now
    splits differently (a kiwipiepy upgrade changes morphemes), so ingest re-tokenizes it."""
    from importlib.metadata import version

    return (f"segment rules {RULES_REVISION}; kiwipiepy {version('kiwipiepy')}; "
            f"jieba {version('jieba')}; pystemmer {version('pystemmer')}")


def _normalize(text: str) -> str:
    """NFKC folds full-width forms and composes jamo. Invisible characters go first: PDFs put
    soft hyphens and zero-width spaces inside words. Case stays until the words are found
    (parseHttp has a part boundary only in its case); each token is casefolded (ß -> ss)."""
    return unicodedata.normalize("NFKC", INVISIBLE_RE.sub("", text))


def _chunks(text: str) -> Iterator[str]:
    """Cut long Korean text at whitespace: Kiwi slows down badly on megabyte inputs. By index,
    so a megabyte is not copied once per piece (that was quadratic)."""
    start = 0
    while len(text) - start > KIWI_CHUNK:
        end = start + KIWI_CHUNK
        cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
        cut = cut if cut > start else end
        yield text[start:cut]
        start = cut
    yield text[start:]


def _pieces(text: str) -> Iterator[tuple[str, str]]:
    """(kind, piece) in text order: 'zh' for Han/kana runs (jieba), 'ko' for the text between
    them when it holds Hangul (Kiwi), 'word' for the rest (regex only)."""
    pos = 0
    for m in (*HAN_RE.finditer(text), None):
        between = text[pos : m.start() if m else len(text)]
        if HANGUL_RE.search(between):
            yield from (("ko", chunk) for chunk in _chunks(between))
        elif between:
            yield "word", between
        if m:
            yield "zh", m.group()
            pos = m.end()


def _with_parts(words: list[str]) -> list[str]:
    """A word mixing letters and digits, followed by its letter and digit runs (fy2022 ->
    fy2022 fy 2022), as jieba's search mode adds a compound's parts: a question's "FY2022"
    then finds a filing's "fiscal 2022", and "2022" finds "FY2022". Evaluated (nDCG@10 of
    BM25): SciFact test 0.630 -> 0.646, FinanceBench pages 0.206 -> 0.238, ko and zh unchanged."""
    out = []
    for word in words:
        out.append(word)
        if word.isalpha() or word.isdigit():
            continue  # most words: nothing to split, and no regex run
        parts = ALNUM_PARTS_RE.findall(word)
        if len(parts) > 1:
            out += parts
    return out


def _camel_parts(word: str) -> list[str]:
    """A word's camelCase parts: a cut before a capital that follows a lowercase letter or a
    digit (parseHttp, utf8Decode), and before the last capital of a run that a lowercase letter
    follows (HTTPServer -> HTTP Server), unless that is a plural's s (RNAs, SNPs). [word] when
    there is no cut, or a part would be shorter than CAMEL_MIN_PART (iPhone, mRNA, IgG)."""
    rest = word[1:]
    if rest == rest.lower() or word.isupper():  # most words: no capital after the first letter
        return [word]
    cuts = [0]
    for i in range(1, len(word)):
        if word[i].isupper() and (word[i - 1].islower() or word[i - 1].isdigit() or (
                word[i - 1].isupper() and word[i + 1 : i + 2].islower()
                and not _plural_s(word, i + 1))):
            cuts.append(i)
    parts = [word[a:b] for a, b in zip(cuts, [*cuts[1:], len(word)], strict=True)]
    return parts if all(len(part) >= CAMEL_MIN_PART for part in parts) else [word]


def _plural_s(word: str, at: int) -> bool:
    """Whether word[at] is a lone s after capitals: a plural (RNAs, PDFsToText), not a word."""
    return word[at] == "s" and not word[at + 1 : at + 2].islower()


def _word_tokens(word: str) -> list[str]:
    """A word (case kept) and its letter and digit parts (FY2022 -> fy2022 fy 2022), then
    those of its camelCase parts it lacks: utf8Decode -> utf8decode utf 8 decode utf8. Only
    added, never instead: QuickTime6 keeps quicktime, which the query "QuickTime" gives."""
    out = _with_parts([word.casefold()])
    parts = _camel_parts(word)
    if len(parts) > 1:
        seen = set(out)
        out += [tok for tok in _with_parts([part.casefold() for part in parts]) if tok not in seen]
    return out


def _stems(token: str, form: Form) -> list[str]:
    """One token of English prose in `form`: a word of ASCII letters becomes its stem behind
    STEM_MARK for prose, and both for a query; any other token (a number, another script)
    stays as it is."""
    if form == "surface" or not (token.isascii() and token.isalpha()):
        return [token]
    stem = STEM_MARK + _stem(token)
    return [stem] if form == "prose" else [token, stem]


def _formed(toks: list[str], form: Form) -> list[str]:
    """A word's tokens (_word_tokens) in `form`. The first is the word whole; when its parts
    follow (FY2022, getURL) it is an identifier and stays as written, its parts are words."""
    keep = 1 if len(toks) > 1 else 0
    return [*toks[:keep], *(t for tok in toks[keep:] for t in _stems(tok, form))]


def _compound_tokens(compound: str, form: Form) -> tuple[str, ...]:
    """Words joined by _ or - (parse_http_response, e-mail): the words joined into one token,
    then each word's tokens. So parse_http_response, parse-http-response and
    parseHttpResponse share parsehttpresponse. Joined only with a letter ("1-2" is no 12), at
    most JOINED_MAX_WORDS words and, by hyphens alone, HYPHEN_MIN_WORDS: joining two
    (e-mail -> email, 10-K -> 10k) cost FinanceBench BM25 nDCG@10 0.300 -> 0.275 (dev).
    The joined whole stays as written; the words are in `form` (_formed)."""
    if "_" not in compound and "-" not in compound:
        return tuple(_formed(_word_tokens(compound), form))
    words = _word_re().findall(compound)
    joined = "".join(words)
    fewest = 2 if "_" in compound else HYPHEN_MIN_WORDS
    out = [joined.casefold()] if (fewest <= len(words) <= JOINED_MAX_WORDS
                                  and not joined.isnumeric()) else []
    return (*out, *(tok for word in words for tok in _formed(_word_tokens(word), form)))


_remembered = lru_cache(maxsize=WORD_CACHE)(_compound_tokens)


def _tokens_of(compound: str, form: Form) -> tuple[str, ...]:
    """_compound_tokens, remembered for the short words nearly all text is made of."""
    return _remembered(compound, form) if len(compound) <= WORD_CACHE_CHARS else (
        _compound_tokens(compound, form))


def _words(text: str, form: Form) -> list[str]:
    """The tokens of every word and identifier of `text`, in order."""
    return [tok for compound in _compound_re().findall(text) for tok in _tokens_of(compound, form)]


def _placed_words(text: str, exclude: str, form: Form) -> list[tuple[int, str]]:
    """(start, token) of every word and identifier of `text` outside the `exclude` ranges."""
    return [(m.start(), tok) for m in _compound_re(exclude).finditer(text)
            for tok in _tokens_of(m.group(), form)]


def _zh(run: str) -> list[str]:
    """Search mode without HMM: HMM guesses unknown words from context, so a short query and a
    long passage split the same string differently (cmrc 0.982 with HMM, 0.988 without)."""
    pieces = _jieba_tokenizer().cut_for_search(run, HMM=False)
    return [w for piece in pieces for w in _word_re().findall(piece)]


def _ko(piece: str, morphs: list, form: Form) -> list[str]:
    """Kiwi morphemes for the Hangul, regex words for the Latin and digits, merged by position.
    Kiwi reads the whole piece, casefolded: handed "를" cut off from "API를", it returns the
    noun 르. The words come from the piece as written (camelCase needs its case), their starts
    moved to where they fall in the casefolded text Kiwi's positions count in."""
    kept = [m for m in morphs if m.tag.startswith(KIWI_KEEP)]
    found = [(m.start, w) for m in kept for w in HANGUL_RE.findall(m.form)]
    words = _placed_words(piece, HANGUL, form)
    if len(piece.casefold()) != len(piece):  # ß -> ss: the folded text is longer
        at = list(accumulate((len(ch.casefold()) for ch in piece), initial=0))
        words = [(at[start], tok) for start, tok in words]
    return [w for _, w in sorted(found + words, key=lambda pair: pair[0])]


def tokens(text: str) -> list[str]:
    """Search tokens of `text` as written, in text order: what code chunks are indexed with."""
    return tokens_many([text])[0]


def word_forms(tokens: Sequence[str]) -> dict[str, str]:
    """In query tokens (query_tokens), each English word's other form: the word and its stem
    (STEM_MARK), each mapped to the other."""
    forms: dict[str, str] = {}
    for word, stem in pairwise(tokens):
        if stem.startswith(STEM_MARK) and not word.startswith(STEM_MARK) and word not in forms:
            forms[word], forms[stem] = stem, word
    return forms


def prose_tokens(text: str) -> list[str]:
    """tokens() with English words stemmed: what every other chunk is indexed with."""
    return tokens_many([text], "prose")[0]


def query_tokens(text: str) -> list[str]:
    """tokens() with each English word followed by its stem (connections ~connect): a
    question's words meet code chunks and identifier wholes, its stems prose chunks."""
    return tokens_many([text], "query")[0]


def chunk_form(parser: str | None) -> Form:
    """The form of a chunk's tokens by its source's parser: code keeps its words as written
    (stemming code cost the code bench, docs/quality.md), everything else is prose."""
    return "surface" if parser and parser.startswith(CODE_PARSER) else "prose"


def chunk_tokens(text: str, parser: str | None) -> list[str]:
    """The tokens of a chunk of a source read by `parser` (chunk_form)."""
    return _tokens_many([text], [chunk_form(parser)])[0]


def chunk_tokens_many(texts: Sequence[str], parsers: Sequence[str | None]) -> list[list[str]]:
    """chunk_tokens() for many chunks, their Korean pieces in one Kiwi batch."""
    return _tokens_many(texts, [chunk_form(parser) for parser in parsers])


def tokens_many(texts: Iterable[str], form: Form = "surface") -> list[list[str]]:
    """tokens(), prose_tokens() or query_tokens() for many texts; their Korean pieces go to
    Kiwi as one batch, which lets its worker threads share them (measured no faster than a
    loop on a busy 2-core machine)."""
    texts = list(texts)
    return _tokens_many(texts, [form] * len(texts))


def _tokens_many(texts: Sequence[str], forms: Sequence[Form]) -> list[list[str]]:
    """The tokens of each text in its form (Hangul and Han are the same in every form)."""
    plans = [list(_pieces(_normalize(text))) for text in texts]
    ko = [piece.casefold() for plan in plans for kind, piece in plan if kind == "ko"]
    # match_options=0: no URL/hashtag/emoji matching, which would swallow "#배포" whole
    analysed = iter(_kiwi_model().tokenize(ko, match_options=0)) if ko else iter(())
    out = []
    for plan, form in zip(plans, forms, strict=True):
        toks: list[str] = []
        for kind, piece in plan:
            if kind == "ko":
                toks += _ko(piece, next(analysed), form)
            elif kind == "zh":
                toks += _zh(piece)
            else:
                toks += _words(piece, form)
        out.append(toks)
    return out
