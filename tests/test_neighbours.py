"""Code locality (neighbours.py): a definition beside the one that matches joins the answer.

Real pipeline on files written here: ingest.py reads the .py files with the code reader and
cuts them on the syntax tree (codechunks.py), BM25 only (no model to load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fulltext
import ingest
import kb as kbmod
import search
from ranking import neighbours
from ranking.request import SearchRequest, SearchSettings

STYLE = '''"""Terminal styles."""


def clear_meta_and_links(style):
    """Drop what it points to.

    Get a copy of this style with link and meta information removed.
    """
    fresh = Style.__new__(Style)
    fresh._ansi = style._ansi
    fresh._color = style._color
    fresh._bgcolor = style._bgcolor
    fresh._attributes = style._attributes
    fresh._link = None
    fresh._meta = None
{CLEAR_SLOTS}    return fresh


def duplicate(item):
    if item._null:
        return NULL_STYLE
    twin = type(item).__new__(type(item))
    twin._ansi = item._ansi
    twin._color = item._color
    twin._bgcolor = item._bgcolor
    twin._attributes = item._attributes
    twin._href = item._href
    twin._data = item._data
{COPY_SLOTS}    return twin
'''.format(  # each definition big enough to be a chunk of its own (codechunks.ALONE_CHARS)
    CLEAR_SLOTS="".join(f"    fresh._slot_{i} = style._slot_{i}\n" for i in range(10, 30)),
    COPY_SLOTS="".join(f"    twin._slot_{i} = item._slot_{i}\n" for i in range(10, 32)))
OTHER = '''def render_{n}(console, options):
    """Render the style {n} with information about the console and its options."""
    lines = console.render_lines(options.style_{n}, options)
    width = max(len(line) for line in lines)
    padded = [line.ljust(width) for line in lines]
    return "\\n".join(padded) + console.style_end
'''
DISTRACTORS = 10


def _searcher(tmp_path: Path, suffix: str) -> search.Searcher:
    folder = tmp_path / f"repo{suffix.replace('.', '_')}"
    folder.mkdir()
    (folder / f"style{suffix}").write_text(STYLE, encoding="utf-8")
    for n in range(DISTRACTORS):
        (folder / f"render_{n}{suffix}").write_text(OTHER.format(n=n), encoding="utf-8")
    base = tmp_path / f"base{suffix.replace('.', '_')}"
    kb = kbmod.open_or_create(base, "repo")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    (kb.folder / "config.json").write_text(
        json.dumps({**config, "embedding": {"provider": "none"}}), encoding="utf-8")
    assert ingest.ingest(kbmod.load(base, "repo"), [folder]).indexed == DISTRACTORS + 1
    return search.Searcher(fulltext.connect(kb.fulltext_path, readonly=True))


QUERY = "a copy of the style without its link and meta information"
COPY_LINE = STYLE.split("\n").index("def duplicate(item):") + 1
CLEAR_LINE = STYLE.split("\n").index("def clear_meta_and_links(style):") + 1


@pytest.fixture()
def code(tmp_path: Path):
    searcher = _searcher(tmp_path, ".py")
    yield searcher
    searcher.conn.close()


def test_a_definition_beside_the_match_joins_its_hit(code):
    first = code.search(SearchRequest(QUERY, 3, "auto"))[0]
    assert first.source.endswith("style.py")
    assert first.line_start <= CLEAR_LINE and COPY_LINE <= first.line_end  # one hit, both
    assert first.best_lines[0] <= CLEAR_LINE <= first.best_lines[1]  # the match ranks it
    assert first.text == "\n".join(STYLE.split("\n")[first.line_start - 1:first.line_end])


def test_without_the_lift_the_neighbour_is_outranked(code):
    # the page's evidence (units.py: the file's chunks around it) lifts it too: both off
    found = code.search(SearchRequest(QUERY, 3, "auto"),
                        SearchSettings(neighbour_weight=0.0, unit_weight=0.0))
    assert not any(h.source.endswith("style.py") and h.line_start <= COPY_LINE <= h.line_end
                   for h in found)


def test_a_neighbour_no_leg_supports_is_not_lifted(code):
    # "removed" is only in clear_meta_and_links (past the docstring's first paragraph, which
    # duplicate()'s context holds): duplicate() matches nothing, so it stays out
    found = code.search(SearchRequest("removed", 5, "auto"))
    assert [(h.source.rsplit("/", 1)[-1], h.line_end < COPY_LINE) for h in found] == \
        [("style.py", True)]


def test_documents_are_ranked_alone(tmp_path: Path):
    docs = _searcher(tmp_path, ".md")
    try:
        ask = SearchRequest(QUERY, 5, "auto")
        assert [(h.source, h.line_start, h.line_end) for h in docs.search(ask)] \
            == [(h.source, h.line_start, h.line_end)
                for h in docs.search(ask, SearchSettings(neighbour_weight=0.0))]
    finally:
        docs.conn.close()


def test_the_kb_setting_turns_it_off_and_is_bounded(tmp_path: Path):
    kb = kbmod.open_or_create(tmp_path, "repo")
    assert kbmod.search_settings(kb).neighbour_weight == neighbours.WEIGHT > 0
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    for weight, fine in ((0, True), (2, False)):
        (kb.folder / "config.json").write_text(
            json.dumps({**config, "search": {"neighbourWeight": weight}}), encoding="utf-8")
        if fine:
            assert kbmod.search_settings(kbmod.load(tmp_path, "repo")).neighbour_weight == 0
        else:
            with pytest.raises(kbmod.ConfigError, match="search.neighbourWeight"):
                kbmod.load(tmp_path, "repo")
