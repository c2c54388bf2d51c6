"""segment.py: whole token lists, the match properties BM25 relies on, laziness, silence."""

import json
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from index import segment
from index.segment import tokens, tokens_many

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("배포를 시작합니다", ["배포", "시작"]),
        ("빠르게 들어봤다", ["빠르", "듣"]),  # verb/adjective stems, irregular 들어 -> 듣
        ("我们研究人工智能技术", ["我们", "研究", "人工", "智能", "人工智能", "技术"]),
        ("Version 3.5 of e-mail_server", ["version", "3", "5", "of", "emailserver", "e", "mail",
                                         "server"]),  # joined by - and _: + the whole
        ("Ａ１ café ÉCOLE Straße", ["a1", "a", "1", "café", "école", "strasse"]),  # NFKC + casefold
        ("1,000억원을 3.5% 인상", ["1", "000", "억", "3", "5", "인상"]),
        (
            "2024년 배포 계획 人工智能 deployment",
            ["2024", "배포", "계획", "人工", "智能", "人工智能", "deployment"],
        ),
        ("東京タワー", ["東", "京", "タ", "ワ", "ー"]),  # kana: one token per character
        ("FY2022 sales, 10-K", ["fy2022", "fy", "2022", "sales", "10", "k"]),  # mixed: + parts
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # combining marks stay inside the word
        ("infor\xadmation zero\u200bwidth", ["information", "zerowidth"]),
    ],
)
def test_whole_token_lists(text, expected):
    assert tokens(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API를 호출한다", ["api", "호출"]),
        ("‘배포’를 시작", ["배포", "시작"]),
        ("GPT-4o를 쓴다", ["gpt", "4o", "4", "o", "쓰"]),
    ],
)
def test_particle_after_latin_or_quote_is_dropped(text, expected):
    # Regression: Kiwi once saw "를" alone and returned the noun "르" as a token.
    assert tokens(text) == expected


def test_multiword_proper_noun_splits_like_its_query():
    # Regression: Kiwi's multi-word dictionary kept "포터와" (particle inside) as one NNP.
    assert tokens("해리 포터와 마법사의 돌") == ["해리", "포터", "마법사", "돌"]
    assert tokens("해리 포터") == ["해리", "포터"]


@pytest.mark.parametrize(
    "text", ["배포를", "배포하는", "서비스 배포 일정", "배포했다", "배포된", "재배포", "서비스배포"]
)
def test_two_syllable_noun_matches_its_inflected_forms(text):
    assert tokens("배포") == ["배포"]
    assert "배포" in tokens(text)


def test_chinese_unknown_words_split_without_hmm_guessing():
    # jieba's HMM would glue 杭研 here but may not in a short query; cmrc2018 nDCG@10 0.988
    # without HMM vs 0.981 with it.
    assert tokens("他来到了网易杭研大厦") == ["他", "来到", "了", "网易", "杭", "研", "大厦"]


def test_unspaced_chinese_compound_matches():
    doc = tokens("我们研究人工智能技术")
    assert set(tokens("人工智能")) <= set(doc)
    assert set(tokens("智能")) <= set(doc)  # search mode also indexes the parts


@pytest.mark.parametrize(
    "text", ["", "   \n\t", "😀👍🏽❤️", "\x00\x01\x1b\x7f", "\u0301\u0301", "\ud800\udfff", "!?.,;"]
)
def test_nothing_to_index_gives_empty_list(text):
    assert tokens(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x00배포\x07를\x1f 😀 일정", ["배포", "일정"]),
        ("\ud800배포 일정", ["배포", "일정"]),  # a lone surrogate once cost Kiwi the "배"
        ("안녕😀 hello🎉world", ["안녕", "hello", "world"]),
    ],
)
def test_control_chars_emoji_and_surrogates_only_separate(text, expected):
    assert tokens(text) == expected


def test_tokens_survive_fts5_unicode61_unchanged():
    text = ("Version 3.5 e-mail_server café हिन्दी 배포를 人工智能 #태그 a@b.com ①② ｶﾀｶﾅ"
            " parse_http_response getURLForID Straße_Größe")
    toks = tokens(text)
    assert all(unicodedata.category(ch)[0] in "LNM" for tok in toks for ch in tok), (
        "only letters, digits and marks"
    )
    con = sqlite3.connect(":memory:")
    con.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, "
        "tokenize=\"unicode61 remove_diacritics 0 categories 'L* N* Co M*'\")"
    )
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    con.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (" ".join(toks),))
    assert [term for (term,) in con.execute("SELECT term FROM v ORDER BY offset")] == toks


def test_long_korean_text_is_cut_between_words():
    text = "서비스 배포 일정을 확인합니다\n" * 400  # 6,400 chars, above KIWI_CHUNK
    assert len(text) > segment.KIWI_CHUNK
    assert tokens(text) == ["서비스", "배포", "일정", "확인"] * 400


def test_megabyte_without_korean_is_fine():
    text = ("hello world 3.5 我们 😀\x00 " * 40_000)[:1_000_000] + "a" * 100_000
    toks = tokens(text)
    assert toks[:6] == ["hello", "world", "3", "5", "我们", "hello"]
    assert toks[-1] == "a" * 100_000


@pytest.mark.slow
def test_megabyte_of_korean_is_fine():
    toks = tokens("서비스 배포 일정을 확인합니다. API를 " * 30_000)
    assert toks[:5] == ["서비스", "배포", "일정", "확인", "api"]
    assert len(toks) == 150_000


def test_tokens_many_equals_tokens_one_by_one():
    texts = ["배포를 시작", "", "plain English", "人工智能", "API를 호출 人工智能 배포"]
    assert tokens_many(texts) == [tokens(t) for t in texts]
    assert tokens_many(iter(texts[:2])) == [["배포", "시작"], []]  # any iterable


def test_each_segmenter_loads_only_when_its_script_first_appears():
    code = """if True:
        import sys
        from index import segment
        loaded = lambda: sorted({'kiwipiepy', 'jieba'} & set(sys.modules))
        print(loaded())
        segment.tokens('Revenue grew 3.5% in FY2022')
        print(loaded())
        segment.tokens('배포 일정')
        print(loaded())
        segment.tokens('人工智能')
        print(loaded())
    """
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    # English alone never pays for Kiwi (~320 MB) or jieba (~80 MB)
    assert out.stdout.splitlines() == ["[]", "[]", "['kiwipiepy']", "['jieba', 'kiwipiepy']"]


def test_first_use_from_threads_loads_once_and_writes_nothing_to_stdout(tmp_path):
    result = tmp_path / "result.json"
    code = """if True:
        import json, sys, kiwipiepy
        from index import segment
        from concurrent.futures import ThreadPoolExecutor
        loads = []
        class CountingKiwi(kiwipiepy.Kiwi):
            def __init__(self, *args, **kwargs):
                loads.append(1)
                super().__init__(*args, **kwargs)
        kiwipiepy.Kiwi = CountingKiwi
        with ThreadPoolExecutor(4) as ex:
            got = list(ex.map(segment.tokens, ["배포를 人工智能"] * 4))
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            json.dump({"loads": len(loads), "tokens": got}, f, ensure_ascii=False)
    """
    out = subprocess.run(
        [sys.executable, "-c", code, str(result)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    )
    assert out.stdout == ""
    assert "prefix dict" not in out.stderr  # jieba's loading chatter is silenced
    assert json.loads(result.read_text(encoding="utf-8")) == {
        "loads": 1,
        "tokens": [["배포", "人工", "智能", "人工智能"]] * 4,
    }


# ---------------------------------------------------------------------------
# identifiers (issue 27): the whole identifier, then its words


@pytest.mark.parametrize(
    "text", ["parseHttpResponse", "parse_http_response", "ParseHTTPResponse",
             "parse-http-response", "PARSE_HTTP_RESPONSE", "__parse_http_response__"]
)
def test_identifier_forms_give_the_whole_and_its_words(text):
    # every spelling shares the whole token, so any of them finds the others; the words let
    # a question in words find the code
    assert tokens(text) == ["parsehttpresponse", "parse", "http", "response"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HTTPServer", ["httpserver", "http", "server"]),  # an acronym ends before a word
        ("getURLForID", ["geturlforid", "get", "url", "for", "id"]),
        ("XMLHttpRequest", ["xmlhttprequest", "xml", "http", "request"]),
        ("IOError", ["ioerror", "io", "error"]),
        ("utf8Decode", ["utf8decode", "utf", "8", "decode", "utf8"]),  # digit parts, then camel
        ("base64", ["base64", "base", "64"]),
        ("Int32Array", ["int32array", "int", "32", "array", "int32"]),
        ("QuickTime6", ["quicktime6", "quicktime", "6", "quick", "time6", "time"]),
        ("os.path.join", ["os", "path", "join"]),  # a dot separates, as before
        ("x_1 max-age", ["x1", "x", "1", "max", "age"]),  # two words by - are prose too
        ("iPhone mRNA IgG McDonald", ["iphone", "mrna", "igg", "mcdonald", "mc", "donald"]),
        ("RNAs SNPs PDFsToText", ["rnas", "snps", "pdfstotext", "pdfs", "to", "text"]),  # plural
        ("COVID-19 e-mail state-of-the-art", ["covid", "19", "e", "mail", "stateoftheart",
                                               "state", "of", "the", "art"]),
        ("pages 1-2 on 2024-01-05", ["pages", "1", "2", "on", "2024", "01", "05"]),  # numbers
        ("a-b-c-d-e-f-g-h-i", list("abcdefghi")),  # over JOINED_MAX_WORDS: words only
        ("Straße_Größe", ["strassegrösse", "strasse", "grösse"]),  # casefolded after the cut
    ],
)
def test_identifier_parts(text, expected):
    assert tokens(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API를 parseHttpResponse로 호출한다",
         ["api", "parsehttpresponse", "parse", "http", "response", "호출"]),
        ("Straße의 get_user_id를 호출", ["strasse", "getuserid", "get", "user", "id", "호출"]),
        ("人工智能 parseHttpResponse 技术",
         ["人工", "智能", "人工智能", "parsehttpresponse", "parse", "http", "response", "技术"]),
    ],
)
def test_identifiers_beside_korean_and_chinese(text, expected):
    # Korean and Chinese are segmented as before; the identifier beside them gets its words,
    # in text order even where casefolding lengthens the text before it (ß -> ss)
    assert tokens(text) == expected
