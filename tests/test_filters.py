"""Search filters (path, types, dates, language) through Library.search on real files, the real
pipeline, SQLite and Chroma, with an OpenAI-format embeddings server on 127.0.0.1: each filter,
in every mode, finds what the same search finds in a KB holding only the matching files,
although 60 other files outrank every match (a filter applied after the top k would find
nothing); a filter that matches nothing says what the KB holds; bad filters are refused."""

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import text_pdf
from test_embedders import KEYS, MODELS, Provider

import kb as kbmod
from common.limits import UserError
from ingest import ingest
from library import Library
from ranking import filters
from ranking.request import SearchRequest

QUERY = "payment terms invoice"
T2023 = datetime(2023, 6, 1, tzinfo=timezone.utc).timestamp()
T2024 = datetime(2024, 6, 1, tzinfo=timezone.utc).timestamp()


def mail(date: str, subject: str) -> str:
    return (f"From: kim@example.com\nTo: team@example.com\nDate: {date}\nSubject: {subject}\n"
            f"Content-Type: text/plain; charset=utf-8\n\nThe {subject} names the payment day.\n")


def corpus(folder: Path) -> dict[str, float]:
    """The mixed corpus under `folder` (name -> mtime): prose, markdown, a PDF, code, mail,
    and 60 notes that say the query's words far more often than any of the others."""
    files = {
        "contracts/2024/lease.txt": ("The lease sets the payment terms monthly.", T2024),
        "contracts/2024/supply.md": ("# Supply\nInvoice within 30 days of delivery.", T2024),
        "contracts/2023/old.txt": ("The old contract paid every invoice late.", T2023),
        "code/billing.py": ("def invoice_total(lines):\n    # payment terms apply\n"
                            "    return sum(lines)\n", T2024),
        "code/report.ts": ("// invoice report for payment review\nexport const x = 1;\n", T2023),
        "mail/march.eml": (mail("Fri, 01 Mar 2024 09:00:00 +0000", "invoice reminder"), T2023),
        "mail/jan.eml": (mail("Mon, 02 Jan 2023 09:00:00 +0000", "invoice query"), T2024),
        "korean/지급.txt": ("지급 조건 안내\n모든 송장(invoice)은 받은 날로부터 삼십일 안에 "
                           "지급합니다. 늦게 지급하면 이자가 붙습니다.", T2023),
    }
    files.update({f"notes/n{i:02d}.txt": ("payment terms invoice payment terms invoice "
                                          f"payment terms invoice note {i}", T2023)
                  for i in range(60)})
    for name, (text, mtime) in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (mtime, mtime))
    pdf = folder / "contracts/2024/terms.pdf"
    text_pdf([["Terms: each invoice is due in 30 days.", "Late payment costs 2 percent."]]
             ).output(str(pdf))
    os.utime(pdf, (T2024, T2024))
    return {name: mtime for name, (_, mtime) in files.items()} | {"contracts/2024/terms.pdf":
                                                                  T2024}


def make_library(base: Path, folder: Path, server: Provider) -> Library:
    kb = kbmod.open_or_create(base, "docs")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["embedding"] = {"provider": "openai", "model": MODELS["openai"], "baseUrl": server.url,
                           "apiKeyPreset": "OpenAI"}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    summary = ingest(kbmod.load(base, "docs"), [folder])
    assert not summary.failed, summary
    return Library(base)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The mixed KB and its corpus folder, and a maker of one-filter KBs."""
    server = Provider("openai")
    os.environ[KEYS["openai"][0]] = KEYS["openai"][1]
    root = tmp_path_factory.mktemp("filters")
    folder = root / "mixed" / "docs"
    names = corpus(folder)
    libraries = {"mixed": make_library(root / "base-mixed", folder, server)}

    def only(label: str, kept: list[str]) -> Library:
        """A KB over copies of just these files, named as in the mixed KB (docs/...)."""
        if label not in libraries:
            copy = root / f"only-{label}" / "docs"
            for name in kept:
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(folder / name, copy / name)
            libraries[label] = make_library(root / f"base-{label}", copy, server)
        return libraries[label]

    yield libraries["mixed"], only, names
    for library in libraries.values():
        library.close()
    server.close()


CASES = {  # label -> (filter arguments, the corpus files that pass them)
    "glob": ({"path": "contracts/2024/**"}, ["contracts/2024/lease.txt",
                                             "contracts/2024/supply.md",
                                             "contracts/2024/terms.pdf"]),
    "prefix": ({"path": "contracts/"}, ["contracts/2024/lease.txt", "contracts/2024/supply.md",
                                        "contracts/2024/terms.pdf", "contracts/2023/old.txt"]),
    "pdf": ({"types": ["pdf"]}, ["contracts/2024/terms.pdf"]),
    "code": ({"types": ["code"]}, ["code/billing.py", "code/report.ts"]),
    "mail+md": ({"types": ["mail", "md"]}, ["mail/march.eml", "mail/jan.eml",
                                           "contracts/2024/supply.md"]),
    # the mails by their Date: (march is 2024, its file 2023; jan the other way round)
    "2024": ({"modified_after": "2024-01-01T00:00:00+00:00"},
             ["contracts/2024/lease.txt", "contracts/2024/supply.md", "contracts/2024/terms.pdf",
              "code/billing.py", "mail/march.eml"]),
    "before-2024": ({"modified_before": "2024-01-01T00:00:00Z", "types": ["mail", "code"]},
                    ["code/report.ts", "mail/jan.eml"]),
    "python": ({"language": ["python"]}, ["code/billing.py"]),
    "korean": ({"language": ["한국어"]}, ["korean/지급.txt"]),  # the language it is written in
}


def places(result: dict) -> list[tuple]:
    return [(h["source"], h["page"], h["line_start"], h["line_end"]) for h in result["hits"]]


def scored(result: dict) -> dict[tuple, float]:
    return {place: round(hit["score"], 5) for place, hit in zip(places(result), result["hits"],
                                                                 strict=True)}


@pytest.mark.parametrize("label", list(CASES))
def test_each_filter_in_every_mode_equals_a_kb_of_only_the_matching_files(world, label):
    mixed, only, _ = world
    arguments, kept = CASES[label]
    narrow = filters.parse(**arguments)
    alone = only(label, kept)
    wanted = {f"docs/{name}" for name in kept}
    for mode in ("auto", "bm25", "vector", "exact"):
        query = "invoice" if mode == "exact" else QUERY
        got = mixed.search(SearchRequest.checked(query, 50, mode, "docs", filters=narrow))
        expected = alone.search(SearchRequest.checked(query, 50, mode, "docs"))
        assert {h["source"] for h in got["hits"]} <= wanted, (label, mode)
        assert set(places(got)) == set(places(expected)), (label, mode)
        assert got["hits"], (label, mode)
        if mode == "vector":  # cosines do not depend on the corpus: the same scores
            assert scored(got) == scored(expected), label
        # the whole KB's top hits are all notes: filtering them afterwards would find nothing
        whole = mixed.search(SearchRequest.checked(query, 10, mode, "docs"))
        if mode != "exact":
            assert not wanted & {h["source"] for h in whole["hits"]}, (label, mode)


def test_a_filter_matching_nothing_says_what_the_kb_holds(world):
    mixed, _, _ = world
    with pytest.raises(filters.NoMatch) as caught:
        mixed.search(SearchRequest.checked(QUERY, 5, "auto", "docs",
                                           filters=filters.parse(types=["docx"])))
    message = str(caught.value)
    assert "no source in 'docs' passes the filters (types ['docx'])" in message
    for held in ("pdf (1)", "code (2)", "mail (2)", "txt (63)", "python (1)", "typescript (1)",
                 "ko (1)", "2023-06-01", "2024-06-01"):
        assert held in message, held
    with pytest.raises(filters.NoMatch, match="passes the filters"):
        mixed.search(SearchRequest.checked(QUERY, 5, "bm25", "docs", "docs/notes/n01.txt",
                                           filters=filters.parse(types=["pdf"])))


def test_a_filter_and_a_source_together_take_what_both_allow(world):
    mixed, _, _ = world
    got = mixed.search(SearchRequest.checked(
        QUERY, 10, "bm25", "docs", "docs/contracts/**",
        filters=filters.parse(modified_before="2024-01-01")))
    assert {h["source"] for h in got["hits"]} == {"docs/contracts/2023/old.txt"}


@pytest.mark.parametrize("arguments, error", [
    ({"modified_after": "March 2024"}, "modified_after 'March 2024' is not a date"),
    ({"modified_after": "2024-05-01", "modified_before": "2024-01-01"}, "is not after"),
    ({"types": ["pdf"] * 21}, "types holds 21 words; send at most 20"),
    ({"types": ["x" * 33]}, "types is 33 characters long; the limit is 32"),
    ({"path": "  "}, "path is empty"),
    ({"path": "a" * 1001}, "path is 1,001 characters long"),
    ({"language": ["py\x00"]}, "language"),
])
def test_bad_filters_are_refused_before_any_work(arguments, error):
    with pytest.raises(UserError, match=error):
        filters.parse(**arguments)


def test_a_filter_selecting_more_sources_than_the_bound_is_refused(world, monkeypatch):
    mixed, _, _ = world
    monkeypatch.setattr(filters, "MAX_FILTER_SOURCES", 5)
    with pytest.raises(UserError, match="select 60 sources in 'docs', more than the 5"):
        mixed.search(SearchRequest.checked(QUERY, 5, "bm25", "docs",
                                           filters=filters.parse(path="notes/")))
