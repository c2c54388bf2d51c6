"""bench/code_eval.py on one real file (the standard library's textwrap.py, which nobody here
wrote): the set removes the queries' docstrings and keeps every line number, and a known
ranking scores as it should."""

import ast
import shutil
import textwrap
from pathlib import Path

import pytest

import fulltext
from bench import code_eval
from ranking.hits import Hit

REAL = Path(textwrap.__file__)
TEXT = REAL.read_text(encoding="utf-8")


def real_set() -> code_eval.CodeSet:
    return code_eval.build_set({"textwrap.py": TEXT}, {"python": (5, 5)})


def test_set_blanks_query_docstrings_and_keeps_line_numbers():
    built = real_set()
    indexed = built.files["textwrap.py"]
    original, copy = TEXT.split("\n"), indexed.split("\n")
    assert len(copy) == len(original)
    found = {d.qid: d for d in code_eval.definitions("textwrap.py", TEXT)}
    assert len(built.searches) == 5
    blanked: set[int] = set()
    for query in built.searches:
        definition = found[query.qid]
        assert (query.first, query.last) == (definition.first, definition.last)
        assert query.text == definition.sentence
        assert len(query.text.split()) >= code_eval.MIN_QUERY_WORDS
        first, last = definition.doc
        assert all(not line for line in copy[first - 1:last])
        assert query.text.split()[0] in "\n".join(original[first - 1:last])  # it was there
        blanked |= set(range(first, last + 1))
    assert any(original[n - 1] for n in blanked)
    assert all(copy[n - 1] == original[n - 1] for n in range(1, len(original) + 1)
               if n not in blanked)
    ast.parse(indexed)  # still Python: code followed every blanked docstring
    again = {d.qid: d for d in code_eval.definitions("textwrap.py", indexed)}
    assert all((again[q.qid].first, again[q.qid].last) == (q.first, q.last)
               for q in built.searches)
    assert all(again[q.qid].doc is None for q in built.searches)


def test_identifiers_answer_the_definition_line():
    built = real_set()
    assert len(built.identifiers) == 5
    for query in built.identifiers:
        line = TEXT.split("\n")[query.first - 1]
        assert query.first == query.last
        assert line.lstrip().startswith(("def ", "async def ", "class "))
        assert f" {query.text}" in line


def test_the_set_is_fixed():
    assert real_set() == real_set()
    more = code_eval.build_set({"textwrap.py": TEXT}, {"python": (6, 6)})
    assert {q.qid for q in real_set().searches} <= {q.qid for q in more.searches}


def test_first_sentence_goes_on_past_abbreviations():
    doc = "Preference folder, e.g. ``~/Library``.  Then more.\n\nSecond paragraph."
    assert code_eval.first_sentence(doc) == "Preference folder, e.g. ``~/Library``."
    assert code_eval.first_sentence("No stop\n    at all\n\nnext") == "No stop at all"


def hit(source: str, first: int, last: int) -> Hit:
    return Hit("c", source, 1, first, last, "", 1.0)


def test_a_known_ranking_scores_right():
    query = code_eval.Query("q", "words", "textwrap.py", 100, 120)
    source = "pysrc/textwrap.py.txt"
    ranking = [hit("pysrc/other.py.txt", 100, 120), hit(source, 60, 99), hit(source, 121, 140),
               hit(source, 115, 160), hit(source, 100, 120)]
    assert code_eval.scores(ranking, query, source) == (0.0, 1.0, 1 / 4, (21 + 40 + 20 + 46
                                                                         + 21) / 5)
    assert code_eval.scores(ranking[:3], query, source)[:3] == (0.0, 0.0, 0.0)
    late = [hit(source, 1, 2)] * 5 + [hit(source, 90, 100)]
    assert code_eval.scores(late, query, source) == (0.0, 0.0, 1 / 6, 2.0)
    past_cutoff = [hit(source, 1, 2)] * code_eval.MRR_CUTOFF + [hit(source, 100, 100)]
    assert code_eval.scores(past_cutoff, query, source)[:3] == (0.0, 0.0, 0.0)
    assert code_eval.scores([hit(source, 120, 200)], query, source) == (1.0, 1.0, 1.0, 81.0)
    assert code_eval.scores([], query, source) == (0.0, 0.0, 0.0, 0.0)


def test_min_lines_widens_a_short_hit_about_its_centre_only():
    source = "pysrc/textwrap.py.txt"
    query = code_eval.Query("q", "words", "textwrap.py", 100, 120)
    near = hit(source, 125, 129)  # 5 lines, 4 past the answer: a miss as it is
    assert code_eval.scores([near], query, source)[0] == 0.0
    wide = code_eval.widened(near, 20)
    assert (wide.line_start, wide.line_end) == (118, 137)
    assert code_eval.scores([wide], query, source) == (1.0, 1.0, 1.0, 20.0)
    top = code_eval.widened(hit(source, 2, 3), 20)
    assert (top.line_start, top.line_end) == (1, 20)
    long = hit(source, 10, 60)
    assert code_eval.widened(long, 20) is long


def test_windows_cover_the_file_by_its_line_numbers():
    lines = TEXT.split("\n")
    lines[40:80] = [""] * 40  # a blank window is left out
    chunks = code_eval.window_chunks("pysrc/textwrap.py.txt", lines)
    assert [c.line_start for c in chunks[:2]] == [1, 81]
    assert all(c.line_end - c.line_start == code_eval.WINDOW_LINES - 1 for c in chunks[:-1])
    assert chunks[-1].line_end == len(lines)
    assert all(c.text == "\n".join(lines[c.line_start - 1:c.line_end]) for c in chunks)
    assert all(c.tokens for c in chunks)


def npm_file() -> Path:
    """A real JavaScript file: npm's own copy of path-scurry, where Node.js is installed."""
    npm = shutil.which("npm")
    root = Path(npm).resolve().parents[1] if npm else Path()  # npm/bin/npm-cli.js
    path = root / "node_modules" / "path-scurry" / "dist" / "commonjs" / "index.js"
    if not path.is_file():
        pytest.skip(f"no npm with path-scurry here ({path}); the JavaScript rule needs one")
    return path


def test_js_definitions_span_the_function_below_its_jsdoc():
    text = npm_file().read_text(encoding="utf-8")
    lines = text.split("\n")
    found = code_eval.js_definitions("js/p/index.js", text)
    assert len([d for d in found if d.sentence]) >= 10
    for d in found:
        first, last = d.doc
        assert lines[first - 1].strip().startswith("/**") and lines[last - 1].strip() == "*/"
        assert d.first == last + 1 and d.name in lines[d.first - 1]
        indent = lines[d.first - 1][:len(lines[d.first - 1]) - len(lines[d.first - 1].lstrip())]
        assert lines[d.last - 1].startswith(indent + "}")
    built = code_eval.build_set({"js/p/index.js": text}, {"javascript": (5, 5)})
    copy = built.files["js/p/index.js"].split("\n")
    assert len(built.searches) == 5 and len(copy) == len(lines)
    assert all(q.text not in built.files["js/p/index.js"] for q in built.searches)


def test_window_sizes_are_bounded():
    assert code_eval.window_size("windows") == code_eval.WINDOW_LINES
    assert code_eval.window_size("windows-20") == 20
    for bad in ("windows-2", "windows-900", "lines"):
        with pytest.raises(ValueError, match="windows-N"):
            code_eval.window_size(bad)
    lines = [f"x = {n}" for n in range(1, 46)]
    assert [(c.line_start, c.line_end) for c in code_eval.window_chunks("s", lines, 20)] == [
        (1, 20), (21, 40), (41, 45)]


def test_a_name_defined_twice_anywhere_is_no_identifier_query():
    # the JavaScript identifier set once held names defined a second time without a JSDoc,
    # or in a Python file of the set: no search can tell which definition was meant
    js = ("/**\n * Read the whole stream.\n */\nfunction readAll(stream) {\n  return stream;\n}\n"
          "/**\n * Write the whole buffer.\n */\nfunction writeAll(buffer) {\n  return buffer;\n}"
          "\n/**\n * Parse the header lines.\n */\nfunction parseHead(text) {\n  return text;\n}"
          "\n\nfunction readAll(other) {\n  return other;\n}\n")
    js += ("class Pool {\n  async parseHead(entry = this.cwd, { types } = {\n  }) {\n"
           "    return entry;\n  }\n}\nconst writeAll = (b) => !!b;\n")  # heads _JS_FUNCTION
    # does not match: parameters over two lines, an arrow function
    py = "def writeAll(buffer):\n    return buffer\n"
    alone = code_eval.build_set({"js/p/a.js": js}, {"javascript": (5, 5)})
    assert {q.text for q in alone.identifiers} == set()
    solo = js.replace("parseHead(entry", "parseTail(entry").replace("const writeAll", "const w")
    assert {q.text for q in code_eval.build_set({"js/p/a.js": solo},
                                                {"javascript": (5, 5)}).identifiers} == \
        {"writeAll", "parseHead"}  # readAll is still defined twice
    both = code_eval.build_set({"js/p/a.js": solo, "w.py": py},
                               {"javascript": (5, 5), "python": (5, 5)})
    assert {q.text for q in both.identifiers} == {"parseHead"}


def test_a_rebuilt_kb_holds_only_the_sets_files(tmp_path):
    # ingest adds and replaces: a file an earlier run indexed (another --js package) stayed in
    # the KB, and its definitions competed with the set's for the identifier queries
    none = {"provider": "none"}
    extra = {"textwrap.py": TEXT, "js/p/extra.py": "def shorten_all(texts):\n    return texts\n"}
    before = code_eval.build(code_eval.build_set(extra, {"python": (5, 5)}), "default", tmp_path,
                             none)
    after = code_eval.build(real_set(), "default", tmp_path, none)
    assert after.folder == before.folder
    conn = fulltext.connect(after.fulltext_path, readonly=True)
    try:
        names = [name for (name,) in conn.execute("SELECT name FROM sources")]
    finally:
        conn.close()
    assert names == list(code_eval.source_names({"textwrap.py": TEXT}).values())
