"""Which natural languages a source's text is written in, for search's `language` filter.

Counted by script over a bounded sample of the source's lines, because the languages linecite
is built for are told apart by their scripts: Hangul is Korean, Kana is Japanese (whose Han
characters come with it), Han without Kana is Chinese, unless it is under half the Hangul
beside it (Hanja in Korean text). Latin letters are English when English function words are
common among them, else `latin` (a French or German file is not English), which is left out
beside another language (there it is code, names and terms). Shares are counted in syllables,
near enough: a Hangul, Han or Kana character is one, a Latin word LATIN_WORD_UNITS. A language
counts when it holds at least MIN_SHARE of them, so a Korean report naming a few English
terms, or an English paper quoting one Korean title, is not also `en` or `ko`. Codes are ISO
639-1 (`ko`, `zh`, `ja`, `en`), as the filter takes them, with the names agents send
(`korean`, `한국어`, `中文`...) mapped onto them in NAMES. A search's question is too short to
count shares: every script in it names its languages (query_languages).

Layer: text: pure functions, below fulltext.py (which records the result per source).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from index.segment import HANGUL

# ---------------------------------------------------------------------------
SAMPLE_CHARS = 200_000  # characters read per source: enough for its languages, bounded
MIN_SHARE = 0.2  # share of the sample's syllables a language needs to count
LATIN_WORD_UNITS = 2  # syllables of an average Latin-script word (English: ~1.5, French ~2)
HANJA_SHARE = 0.5  # Han under this share of the Hangul beside it is Hanja, read as Korean
ENGLISH_SHARE = 0.08  # share of Latin words that are English function words in English text
# ---------------------------------------------------------------------------
KANA = "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
SCRIPTS = {"hangul": re.compile(f"[{HANGUL}]"), "kana": re.compile(f"[{KANA}]"),
           "han": re.compile(f"[{HAN}]"), "latin": re.compile(r"[A-Za-z\u00c0-\u024f]+")}
LATIN_WORD = re.compile(r"[A-Za-z]+")
ENGLISH_WORDS = frozenset("the of and to in is that for it with as was on are be by this "
                          "from or at an which not have has".split())
NAMES = {  # what an agent may write -> the code recorded
    "ko": "ko", "kor": "ko", "korean": "ko", "한국어": "ko", "한국말": "ko",
    "zh": "zh", "zho": "zh", "chi": "zh", "chinese": "zh", "中文": "zh", "汉语": "zh",
    "中文简体": "zh", "zh-cn": "zh", "zh-hans": "zh", "zh-tw": "zh", "zh-hant": "zh",
    "ja": "ja", "jpn": "ja", "japanese": "ja", "日本語": "ja",
    "en": "en", "eng": "en", "english": "en", "latin": "latin",
}


def detect(lines: Iterable[str]) -> str:
    """The source's languages as codes joined by commas, the largest first ("ko,en"); empty
    when the text has no letters (a scan not OCR'd, numbers only)."""
    sample = _sample(lines)
    counts = {script: len(rx.findall(sample)) for script, rx in SCRIPTS.items()}
    counts["latin"] *= LATIN_WORD_UNITS
    units = sum(counts.values())
    if not units:
        return ""
    japanese = counts["kana"] >= MIN_SHARE * (counts["kana"] + counts["han"]) > 0
    hanja = not japanese and counts["han"] < HANJA_SHARE * counts["hangul"]
    shares = {"ko": counts["hangul"] + (counts["han"] if hanja else 0),
              "ja": counts["kana"] + counts["han"] if japanese else 0,
              "zh": 0 if japanese or hanja else counts["han"],
              _latin_code(sample): counts["latin"]}
    kept = [(code, n) for code, n in shares.items() if n >= MIN_SHARE * units]
    if len(kept) > 1:  # Latin words beside Korean or Chinese that are not English: code, names
        kept = [(code, n) for code, n in kept if code != "latin"]
    return ",".join(code for code, _ in sorted(kept, key=lambda pair: -pair[1]))


def _sample(lines: Iterable[str]) -> str:
    """The first SAMPLE_CHARS characters of the lines."""
    taken: list[str] = []
    size = 0
    for line in lines:
        taken.append(line[:SAMPLE_CHARS - size])
        size += len(taken[-1])
        if size >= SAMPLE_CHARS:
            break
    return "\n".join(taken)


def _latin_code(sample: str) -> str:
    """`en` when English function words are common among the sample's Latin words."""
    words = LATIN_WORD.findall(sample.lower())
    english = sum(word in ENGLISH_WORDS for word in words)
    return "en" if words and english >= ENGLISH_SHARE * len(words) else "latin"


def query_languages(query: str) -> frozenset[str]:
    """The languages a question may be in, by every script it holds, however few letters:
    a short question mixes scripts on purpose ("x86 어셈블리", "GPT-4 토큰") and each word
    is searched as written. Latin letters are both `en` and `latin` (three words hold too few
    function words to tell them apart); empty when the question has no letters."""
    found = {script for script, rx in SCRIPTS.items() if rx.search(query)}
    codes = {"ko"} if "hangul" in found else set()
    if "kana" in found:
        codes.add("ja")
    elif "han" in found:
        codes.add("zh")
    if "latin" in found:
        codes.update(("en", "latin"))
    return frozenset(codes)


def code_of(word: str) -> str | None:
    """The language code an agent's word names (`Korean`, `ko`, `한국어`), or None."""
    return NAMES.get(word.strip().lower())
