"""Source code: files recognised by extension and shebang, one page numbered as the file,
chunks on the syntax tree with symbol paths, fallback to blank lines, and ingest + search.

Real files: the Python standard library and its venv's Activate.ps1 and C headers (on every
machine with Python); one file per language from the tests/examplefiles of the Pygments sdist
on PyPI (pinned by requirements-samples.txt, fetched by .ci/run into .ci/samples, or at
LINECITE_PYGMENTS_SDIST), read out of the archive. A test that needs an absent one skips,
saying how to get it from PyPI. (GitHub Linguist's samples, read from a copy of its repository
on one machine, were dropped: a skip named that machine's folder, and no registry carries
them; the Pygments files cover every language.)
The short snippets below were written for these tests.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import tarfile
from pathlib import Path, PurePosixPath

import pytest

import codechunks
import extract
import fulltext
import ingest
import kb as kbmod
import library
import search
from formats import languages
from index import segment
from ranking.request import SearchRequest

pytest.importorskip("tree_sitter_language_pack")

PYGMENTS = "pygments-2.21.0"  # the sdist requirements-samples.txt pins
PYGMENTS_SDIST = Path(os.environ.get("LINECITE_PYGMENTS_SDIST") or
                      Path(__file__).resolve().parent.parent / ".ci" / "samples" /
                      f"{PYGMENTS}.tar.gz")

# language -> (file name, text, symbols its chunks must name): nested classes and methods
SNIPPETS: dict[str, tuple[str, str, set[str]]] = {
    "python": ("shapes.py", '''import math


class Shape:
    """A shape."""

    class Meta:
        def describe(self):
            return "meta"

    @property
    def area(self):
        return 0.0


def unit_circle():
    return math.pi
''', {"class shapes.Shape", "class shapes.Shape.Meta", "method shapes.Shape.Meta.describe",
      "method shapes.Shape.area", "function shapes.unit_circle"}),
    "javascript": ("cart.js", '''export class Cart {
  constructor() { this.items = []; }
  add(item) { this.items.push(item); }
}

const total = (cart) => cart.items.length;
''', {"class cart.Cart", "method cart.Cart.add", "function cart.total"}),
    "typescript": ("user.ts", '''export interface User { name: string }

export class UserStore {
  private users: User[] = [];
  find(name: string): User | undefined { return this.users.find(u => u.name === name); }
}

namespace Util { export function clamp(x: number): number { return x; } }
''', {"interface user.User", "class user.UserStore", "method user.UserStore.find",
      "namespace user.Util", "function user.Util.clamp"}),
    "tsx": ("button.tsx", '''export function Button(props: { label: string }) {
  return <button>{props.label}</button>;
}
''', {"function button.Button"}),
    "java": ("Outer.java", '''package demo;

public class Outer {
    static class Inner {
        int value() { return 1; }
    }
    public Outer() {}
}
''', {"class Outer", "class Outer.Inner", "method Outer.Inner.value",
      "constructor Outer.Outer"}),
    "csharp": ("Store.cs", '''namespace Shop.Core
{
    public class Store
    {
        public class Item { public int Price() { return 1; } }
        public void Open() { }
    }
}
''', {"namespace Shop.Core", "class Shop.Core.Store", "class Shop.Core.Store.Item",
      "method Shop.Core.Store.Item.Price", "method Shop.Core.Store.Open"}),
    "go": ("server.go", '''package server

type Server struct {
	port int
}

func (s *Server) Start() error {
	return nil
}

func New() *Server { return &Server{} }
''', {"struct server.Server", "method server.Server.Start", "function server.New"}),
    "rust": ("lib.rs", '''pub struct Point { x: i32 }

impl Point {
    pub fn norm(&self) -> i32 { self.x }
}

mod inner {
    pub fn helper() {}
}
''', {"struct lib.Point", "impl lib.Point", "method lib.Point.norm", "module lib.inner",
      "function lib.inner.helper"}),
    "c": ("list.c", '''#include <stdlib.h>

struct node { int value; struct node *next; };

static int length(const struct node *head) {
    int n = 0;
    return n;
}
''', {"struct list.node", "function list.length"}),
    "cpp": ("matrix.cpp", '''namespace linalg {
class Matrix {
 public:
  int rows() const { return 1; }
};
}

int Matrix::cols() const { return 2; }
''', {"namespace linalg", "class linalg.Matrix", "method linalg.Matrix.rows",
      "function Matrix.cols"}),
    "kotlin": ("Repo.kt", '''class Repo {
    fun load(id: Int): String = id.toString()
}

object Registry {
    fun all(): List<Repo> = emptyList()
}
''', {"class Repo", "method Repo.load", "object Registry", "method Registry.all"}),
    "swift": ("Shapes.swift", '''struct Circle {
    func area() -> Double { return 3.14 }
}

class Box {
    init() {}
}
''', {"struct Circle", "method Circle.area", "class Box", "constructor Box.init"}),
    "php": ("Mailer.php", '''<?php
namespace App;

class Mailer {
    public function send($to) { return true; }
}

function helper() { return 1; }
''', {"namespace App", "class Mailer", "method Mailer.send", "function helper"}),
    "ruby": ("account.rb", '''module Bank
  class Account
    def deposit(amount)
      @balance += amount
    end
  end
end
''', {"module Bank", "class Bank.Account", "method Bank.Account.deposit"}),
    "scala": ("Main.scala", '''object Main {
  class Greeter {
    def greet(name: String): String = "hi " + name
  }
}
''', {"object Main", "class Main.Greeter", "method Main.Greeter.greet"}),
    "bash": ("deploy.sh", '''#!/bin/sh
build() {
  make all
}
''', {"function deploy.build"}),
    "powershell": ("tools.ps1", '''function Get-Thing {
    param($Name)
    Write-Output $Name
}

class Widget {
    [string] Show() { return "w" }
}
''', {"function tools.Get-Thing", "class tools.Widget", "method tools.Widget.Show"}),
    "sql": ("schema.sql", '''CREATE TABLE users (id INT PRIMARY KEY, name TEXT);

CREATE VIEW adults AS SELECT * FROM users;
''', {"table schema.users", "view schema.adults"}),
    "lua": ("util.lua", '''local M = {}

function M.add(a, b)
  return a + b
end

local function private() end

return M
''', {"function util.M.add", "function util.private"}),
    "r": ("stats.R", '''mean2 <- function(x) {
  sum(x) / length(x)
}
''', {"function stats.mean2"}),
    "dart": ("point.dart", '''class Point {
  int x = 0;
  int twice() {
    return x * 2;
  }
}

void main() {
  print(Point().twice());
}
''', {"class point.Point", "method point.Point.twice", "function point.main"}),
}


def chunks_of(path: Path) -> tuple[extract.Extracted, list[fulltext.Chunk]]:
    doc = extract.extract(path)
    return doc, codechunks.chunk_code(path.name, doc, segment.tokens)


def named(chunks: list[fulltext.Chunk]) -> set[str]:
    return {f"{s['kind']} {s['symbol']}" for c in chunks for s in codechunks.symbols(c.context)}


def assert_lines_are_the_files(path: Path, doc, chunks) -> None:
    """Line N of every chunk is line N of the file (as git and editors count: \\n only),
    and every non-blank line of the file is in a chunk."""
    raw = path.read_bytes().decode("utf-8-sig", "replace").replace("\r\n", "\n").split("\n")
    lines = doc.pages[0]
    covered: set[int] = set()
    for c in chunks:
        span = lines[c.line_start - 1:c.line_end]
        assert c.text == "\n".join(span) or (c.line_start == c.line_end and c.text in span[0])
        for n in range(c.line_start, c.line_end + 1):
            assert raw[n - 1].rstrip().replace("\t", " ") == lines[n - 1] or "\x00" < min(
                raw[n - 1] or " ") < " "  # a control character is dropped, as everywhere
        covered.update(range(c.line_start, c.line_end + 1))
    assert {n for n, line in enumerate(lines, 1) if line.strip()} <= covered


@pytest.mark.parametrize("language", sorted(SNIPPETS))
def test_each_language_chunks_on_its_tree_with_symbol_paths(tmp_path, language):
    name, text, expected = SNIPPETS[language]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert doc.parser == f"code:{language}+tree-sitter" and doc.warnings == []
    assert expected <= named(chunks), named(chunks)
    assert {s["language"] for c in chunks for s in codechunks.symbols(c.context)} == {language}
    assert_lines_are_the_files(path, doc, chunks)


def test_a_long_function_is_split_at_statements_and_each_part_names_it(tmp_path):
    body = "".join(f"    value_{i} = compute_something_long({i}, 'argument number {i}')\n"
                   for i in range(160))
    path = tmp_path / "big.py"
    path.write_text("import os\n\n\n# Loads it all.\n@cached\ndef load_everything():\n"
                    f'    """Load."""\n{body}    return value_1\n\n\ndef tiny():\n    pass\n',
                    encoding="utf-8")
    doc, chunks = chunks_of(path)
    parts = [c for c in chunks if "big.load_everything" in c.context]
    assert len(parts) >= 5 and all(len(c.text) <= codechunks.MAX_CHARS for c in parts)
    assert parts[0].line_start <= 4 < 6 < parts[0].line_end  # with its comment and decorator
    assert [c.line_start for c in parts[1:]] == [c.line_end + 1 for c in parts[:-1]]
    assert codechunks.symbols(parts[1].context) == [
        {"language": "python", "kind": "function", "symbol": "big.load_everything"}]
    assert "function big.tiny" in named(chunks)
    assert_lines_are_the_files(path, doc, chunks)


def test_small_neighbours_are_packed_and_a_big_definition_stands_alone(tmp_path):
    small = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
    big = "def big():\n" + "".join(f"    x{i} = {i} * 1000000  # a comment\n" for i in range(30))
    path = tmp_path / "mod.py"
    path.write_text(small + big, encoding="utf-8")
    _, chunks = chunks_of(path)
    assert len(chunks) == 2
    assert named(chunks[:1]) == {f"function mod.f{i}" for i in range(6)}
    assert codechunks.symbols(chunks[1].context)[0]["symbol"] == "mod.big"


SUMMARY = "Items a customer holds before paying."


def _methods(open_body: str, close_body: str, indent: str) -> str:
    """Eight methods of about 560 characters: a class of them is split, three to a chunk."""
    return "".join(f"{indent}{open_body.replace('{i}', str(i))}\n" + "".join(
        f"{indent}    this.value_{i}_{j} = compute({i}, {j}, 'a longer argument');\n"
        for j in range(10)) + (f"{indent}{close_body}\n" if close_body else "") + "\n"
        for i in range(8))


@pytest.mark.parametrize(("name", "text"), [
    ("basket.py", f'class Basket:\n    """{SUMMARY}\n\n    More than its first paragraph.\n'
                  '    """\n\n' + _methods("def method_{i}(this):", "", "    ")),
    ("basket.js", f"/**\n * {SUMMARY}\n *\n * More than its first paragraph.\n * @class\n */\n"
                  "export class Basket {\n" + _methods("method_{i}() {", "}", "  ") + "}\n"),
])
def test_a_split_class_gives_its_summary_to_the_chunks_of_its_methods(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert_lines_are_the_files(path, doc, chunks)
    methods = [c for c in chunks if "method_" in c.text and SUMMARY not in c.text]
    assert len(methods) >= 2
    for chunk in methods:  # after a blank line, apart from the symbol lines hits show
        assert chunk.context.endswith(f"\n\n{SUMMARY}")
        named_lines = chunk.context.split("\n\n")[0].split("\n")
        assert [f"{s['language']} {s['kind']} {s['symbol']}"
                for s in codechunks.symbols(chunk.context)] == named_lines
    written = next(c for c in chunks if SUMMARY in c.text)
    assert SUMMARY not in written.context  # the chunk that holds it needs no copy


READS, WRITES = "Reads the ledger from disk.", "Writes the ledger back."


def _ledger(head: str, doc: str, close: str, indent: str = "") -> str:
    """A definition of about 1,100 characters (alone in its chunk) with `doc` above it."""
    body = "".join(f"{indent}    total_{j} = compute_entry({j}, 'a longer argument here');\n"
                   for j in range(18))
    return f"{doc}{indent}{head}\n{body}{close}\n\n"


@pytest.mark.parametrize(("name", "text"), [
    ("ledger.py", _ledger("def read_ledger(path):", "", "").replace(
        "):\n", f'):\n    """{READS}"""\n', 1) + _ledger("def balance(path):", "", "")
     + _ledger("def write_ledger(path):", "", "").replace("):\n", f'):\n    """{WRITES}"""\n', 1)),
    ("ledger.js", _ledger("function readLedger(path) {", f"/** {READS} */\n", "}")
     + _ledger("function balance(path) {", "", "}")
     + _ledger("function writeLedger(path) {", f"// {WRITES}\n", "}")),
])
def test_a_chunk_carries_the_summaries_of_the_definitions_beside_it(tmp_path, name, text):
    # like a chunk overlap: the words that say what the code around it does (a question
    # asked in them finds this chunk too, and two neighbours that both match join one hit)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert_lines_are_the_files(path, doc, chunks)
    assert len(chunks) == 3 and doc.parser.endswith("+tree-sitter")
    first, middle, last = chunks
    assert middle.context.split("\n\n")[1:] == [f"{READS}\n{WRITES}"]
    assert [s["symbol"] for s in codechunks.symbols(middle.context)] == [f"{path.stem}.balance"]
    assert READS not in first.context and WRITES not in last.context  # its own is in its text
    assert "\n\n" not in first.context + last.context  # the middle one has none to give


def test_line_numbers_survive_separators_editors_do_not_break_on(tmp_path):
    # Regression guard: clean_lines turns U+2028 into a line break, which would renumber
    # every later line of a JavaScript file holding one in a string
    path = tmp_path / "odd.js"
    path.write_bytes("// one\nconst s = 'a\u2028b\u2029c\x0bd\x0ce\x85f';\r\nfunction three() {}\n"
                     .encode("utf-8"))
    doc, chunks = chunks_of(path)
    assert doc.pages[0][2] == "function three() {}" and len(doc.pages) == 1
    assert "function odd.three" in named(chunks)


@pytest.mark.parametrize(("first_line", "language"), [
    ("#!/usr/bin/env python3", "python"), ("#!/usr/bin/python3.12 -u", "python"),
    ("#!/bin/bash", "bash"), ("#!/usr/bin/env -S node --no-warnings", "javascript"),
    ("#!/usr/bin/env ruby", "ruby"), ("#!/usr/bin/env pwsh", "powershell"),
    ("#!/usr/bin/env -S uv run --script", "python"),
    ("#!/usr/bin/env perl", None), ("# just a comment", None)])
def test_a_file_without_extension_is_code_by_its_shebang(tmp_path, first_line, language):
    path = tmp_path / "tool"
    path.write_text(f"{first_line}\necho hi\n", encoding="utf-8")
    assert languages.language_of(path) == language
    assert extract.supported(path) is (language is not None)
    if language is None:
        with pytest.raises(extract.ExtractError) as err:
            extract.extract(path)
        assert err.value.reason == "unsupported-format"
    else:
        assert extract.extract(path).parser == f"code:{language}"


def test_shebang_scripts_are_collected_from_a_folder_and_others_are_skipped(tmp_path):
    kb = make_kb(tmp_path, {"manage": "#!/usr/bin/env python3\nprint(1)\n",
                            "LICENSE": "MIT License\n"})
    summary = ingest.sync(kb)
    assert summary.indexed == 1
    assert any(s.get("extension") == "(none)" and s["files"] == 1 for s in summary.skipped)


def test_syntax_errors_and_a_missing_package_fall_back_to_blank_lines(tmp_path, monkeypatch):
    path = tmp_path / "broken.py"
    path.write_text("def (((:\n  ]]] ]]]\n\n" * 10 + "x = {{{{\n", encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert doc.parser == "code:python+lines" and "syntax errors" in doc.warnings[0]
    assert chunks and named(chunks) == {"file broken"}
    assert_lines_are_the_files(path, doc, chunks)
    good = tmp_path / "good.py"
    good.write_text("def a():\n    pass\n\n\ndef b():\n    pass\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "tree_sitter_language_pack", None)  # import fails
    doc, chunks = chunks_of(good)
    assert doc.parser == "code:python+lines"
    assert "tree-sitter-language-pack is not installed" in doc.warnings[0]
    assert [(c.line_start, c.line_end) for c in chunks] == [(1, 6)]


def test_a_cpp_header_named_h_is_read_with_the_cpp_grammar(tmp_path):
    path = tmp_path / "widget.h"
    path.write_text("#pragma once\nnamespace ui {\nclass Widget {\n public:\n  virtual ~Widget();"
                    "\n  template <typename T> T get() const { return T(); }\n};\n}\n",
                    encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert doc.parser == "code:cpp+tree-sitter" and doc.language == "cpp"
    assert {"class ui.Widget", "method ui.Widget.get"} <= named(chunks)


def test_a_c_file_the_c_grammar_reads_stays_c(tmp_path):
    # C23's `struct [[deprecated]] S` is one error row to the C grammar and none to C++'s:
    # a .c file is still C (its hits say so), only a .h is whichever grammar reads it better
    text = ("struct [[deprecated]] OldConfig {\n    int flags;\n};\n\n"
            "static int add(int a, int b) {\n    return a + b;\n}\n")
    for name, parser in (("config.c", "code:c+tree-sitter"), ("config.h", "code:cpp+tree-sitter")):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        doc, chunks = chunks_of(path)
        assert doc.parser == parser, name
        assert_lines_are_the_files(path, doc, chunks)
    assert "function config.add" in named(chunks_of(tmp_path / "config.c")[1])


# ----------------------------------------------------------------------------- real files

def _stdlib(*parts: str) -> Path:
    path = Path(sysconfig.get_paths()["stdlib"], *parts)
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    return path


def assert_real_file_chunks(path: Path, symbol: str | None) -> str:
    """A real file's chunks keep its lines, each within MAX_CHARS, and name `symbol` (a file
    the grammar parses; None where it names nothing checkable). Returns the file's parser, for
    callers that know which one it must be."""
    doc, chunks = chunks_of(path)
    assert_lines_are_the_files(path, doc, chunks)
    assert all(len(c.text) <= codechunks.MAX_CHARS for c in chunks)
    if symbol is not None:
        assert doc.parser.endswith("+tree-sitter")
        assert symbol in named(chunks), sorted(named(chunks))
    return doc.parser


# json/decoder.py regression: a docstring opened in place (its escapes were its only
# children) lost the lines between them, 29 lines in no chunk
@pytest.mark.parametrize("parts", [("json", "decoder.py"), ("argparse.py",),
                                   ("venv", "scripts", "common", "Activate.ps1")])
def test_standard_library_files_keep_their_lines_and_symbols(parts):
    path = _stdlib(*parts)
    doc, chunks = chunks_of(path)
    assert doc.parser.endswith("+tree-sitter")
    assert_lines_are_the_files(path, doc, chunks)
    expected = {"decoder.py": "method decoder.JSONDecoder.raw_decode",
                "argparse.py": "method argparse.ArgumentParser.parse_known_args",
                "Activate.ps1": "function Activate.global:deactivate"}[path.name]
    assert expected in named(chunks)
    hit = next(c for c in chunks if expected.split()[1] in c.context.split())
    definition = expected.split(".")[-1].split(":")[-1]
    assert definition in hit.text


def test_a_c_header_of_python_itself():
    header = Path(sysconfig.get_paths()["include"], "object.h")
    if not header.is_file():
        pytest.skip("Python's C headers are not installed here")
    doc, chunks = chunks_of(header)
    assert doc.parser == "code:c+tree-sitter"
    assert_lines_are_the_files(header, doc, chunks)
    assert "struct object._object" in named(chunks)


PYGMENTS_SAMPLES: dict[str, tuple[str, str | None, str | None]] = {
    # language -> (path under tests/examplefiles/, the grammar that parses it or None where
    # syntax errors send it to blank lines, a symbol its chunks must name or None)
    "python": ("python/linecontinuation.py", "python", "function linecontinuation.spam"),
    "javascript": ("js/general.js", "javascript", "method general.A.constructor"),
    "typescript": ("ts/typescript_example.ts", "typescript",
                   "method typescript_example.Snake.move"),
    "tsx": ("tsx/sample.tsx", "tsx", "function sample.Foo"),
    "java": ("java/test.java", "java", "method PlatformManagerImpl.performRecoverableFileDelete"),
    "csharp": ("csharp/test.cs", "csharp", "method Diva.Core.OpenerTask.ExecuteStep"),
    "go": ("go/generics.go", "go", "function generics.PtrOf"),
    "rust": ("rust/eval.rs", "rust", "method eval.Val.as_usize"),
    # Ruby's array.c: its #ifdef'd K&R function heads defeat the C grammar, C++'s reads it
    "c": ("c/example.c", "cpp", "function rb_ary_new"),
    "cpp": ("cpp/namespace.cpp", "cpp", "method std.exprimental.inner.QualifiedName.local_name"),
    "kotlin": ("kotlin/example.kt", "kotlin", "method Countries.get"),
    "swift": ("swift/test.swift", "swift", "method GameViewController.viewDidLoad"),
    "php": ("php/test.php", "php", "method Zip.load_file"),
    "ruby": ("rb/example.rb", "ruby", "method BBCode.Parser.Attribute.parse"),
    "scala": ("scala/declarations.scala", "scala", "function foldRight"),
    "bash": ("bash/example.sh", "bash", None),  # no functions in it
    "powershell": ("powershell/test.ps1", "powershell", "function test.Invoke-SqlCmd2"),
    "sql": ("tsql/tsql_example.sql", None, None),  # T-SQL: the grammar errs on 39% of it
    "lua": ("lua/example.lua", "lua", "function example.private.OnLoad"),
    "r": ("splus/test.R", "r", "function test.foo"),
    "dart": ("dart/test.dart", "dart", "method test.Greeter.compareTo"),
}


@pytest.fixture(scope="module")
def pygments_samples() -> dict[str, bytes]:
    """The PYGMENTS_SAMPLES files' bytes, read in one pass over the sdist (a member is found
    by reading the gzip stream up to it, so one pass per file would read it 21 times)."""
    if not PYGMENTS_SDIST.is_file():
        pytest.skip(f"needs the {PYGMENTS} sdist at {PYGMENTS_SDIST} (or LINECITE_PYGMENTS_SDIST):"
                    " pip download --no-deps --no-binary :all: --require-hashes "
                    "-r requirements-samples.txt -d .ci/samples")
    wanted = {f"{PYGMENTS}/tests/examplefiles/{sample}": sample
              for sample, _, _ in PYGMENTS_SAMPLES.values()}
    found = {}
    with tarfile.open(PYGMENTS_SDIST, "r:gz") as sdist:
        for member in sdist:
            if member.name in wanted and member.isfile():
                found[wanted[member.name]] = sdist.extractfile(member).read()
    return found


def test_pygments_samples_cover_every_language():
    assert set(PYGMENTS_SAMPLES) == set(languages.LANGUAGES.values())
    for language, (sample, _, _) in PYGMENTS_SAMPLES.items():
        assert languages.language_of(Path(sample)) == language


@pytest.mark.parametrize("language", sorted(PYGMENTS_SAMPLES))
def test_real_files_of_every_language_from_pygments(tmp_path, pygments_samples, language):
    sample, grammar, symbol = PYGMENTS_SAMPLES[language]
    path = tmp_path / PurePosixPath(sample).name
    path.write_bytes(pygments_samples[sample])
    parser = assert_real_file_chunks(path, symbol)
    assert parser == (f"code:{grammar}+tree-sitter" if grammar else f"code:{language}+lines")


# ----------------------------------------------------------------------------- end to end

def make_kb(tmp_path: Path, files: dict[str, str]) -> kbmod.KnowledgeBase:
    """KB `code` syncing tmp_path/repo, BM25 only."""
    folder = tmp_path / "repo" if files else tmp_path
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path / "base", "code")
    config = {"id": "code", "sourcePaths": [str(folder)], "embedding": {"provider": "none"}}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "code")


def test_ingest_and_search_a_folder_of_code_returns_the_function_and_its_lines(tmp_path):
    filler = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
    kb = make_kb(tmp_path, {
        "src/shapes.py": SNIPPETS["python"][1] + "\n\n" + filler + "def rotate_polygon(points, "
                         "angle):\n    # turn every vertex about the origin, by the angle in "
                         "radians, counter-clockwise as in mathematics\n"
                         "    cos, sin = math.cos(angle), math.sin(angle)\n"
                         "    return [(x * cos - y * sin, x * sin + y * cos) for x, y in points]"
                         "\n",
        "web/cart.js": SNIPPETS["javascript"][1], "server.go": SNIPPETS["go"][1]})
    summary = ingest.sync(kb)
    assert summary.indexed == 3 and summary.failed == []
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        parsers = dict(conn.execute("SELECT name, parser FROM sources"))
        hit = search.Searcher(conn).search(SearchRequest("rotate polygon vertex", 3, "bm25"))[0]
        row = conn.execute("SELECT context FROM chunks WHERE chunk_id = ?",
                           (hit.chunk_id,)).fetchone()
        lines = [s.text for s in fulltext.read_lines(conn, hit.source, 1, hit.line_start,
                                                     hit.line_end)]
    finally:
        conn.close()
    assert parsers == {"repo/src/shapes.py": "code:python+tree-sitter",
                       "repo/web/cart.js": "code:javascript+tree-sitter",
                       "repo/server.go": "code:go+tree-sitter"}
    source_lines = (tmp_path / "repo" / "src" / "shapes.py").read_text(encoding="utf-8").split("\n")
    start = source_lines.index("def rotate_polygon(points, angle):") + 1
    # a small function packs with the helpers above it (codechunks.ALONE_CHARS) ...
    assert (hit.source, hit.page, hit.line_end) == ("repo/src/shapes.py", 1, start + 3)
    assert hit.line_start < start and lines == source_lines[hit.line_start - 1:start + 3]
    assert codechunks.hit_fields(parsers[hit.source], row["context"])["symbol"] != \
        "shapes.rotate_polygon"  # ... and is not its chunk's first symbol,
    shown = hit.to_json()  # but the hit names the one the query's words are in
    assert (shown["language"], shown["kind"], shown["symbol"]) == \
        ("python", "function", "shapes.rotate_polygon")
    listed = library.Library(tmp_path / "base").list_sources("code")["sources"]
    assert {s["name"]: s.get("language") for s in listed} == {
        "repo/src/shapes.py": "python", "repo/web/cart.js": "javascript",
        "repo/server.go": "go"}


def _chunk_spans(kb: kbmod.KnowledgeBase) -> list[tuple]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return conn.execute("SELECT s.name, c.line_start, c.line_end, c.chunk_id FROM chunks c"
                            " JOIN sources s ON s.id = c.source_id ORDER BY 1, 2").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("run", ["sync", "ingest FOLDER"])
def test_code_cut_by_an_older_chunker_is_cut_again_once(tmp_path, monkeypatch, run):
    # the sync did; issue 49: only the sync recorded and expired codechunks.VERSION, so
    # `ingest FOLDER` kept code an older chunker cut (and left no version, for the next sync
    # to cut it all again)
    files = {"shapes.py": SNIPPETS["python"][1] + "".join(
        f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(40)),
        "notes.md": "# Notes\n\nNothing to cut again.\n"}

    def index(kb: kbmod.KnowledgeBase, root: Path):
        return ingest.sync(kb) if run == "sync" else ingest.ingest(kb, [root / "repo"])

    kb = make_kb(tmp_path, files)
    monkeypatch.setattr(codechunks, "VERSION", "old")
    monkeypatch.setattr(codechunks, "TARGET_CHARS", 200)  # what an earlier release did
    assert index(kb, tmp_path).indexed == 2
    old = _chunk_spans(kb)
    monkeypatch.undo()
    again = index(kb, tmp_path)  # no file changed
    assert (again.indexed, again.unchanged, again.failed) == (1, 1, [])  # the code, not notes
    fresh = make_kb(tmp_path / "fresh", files)
    assert index(fresh, tmp_path / "fresh").indexed == 2
    assert _chunk_spans(kb) == _chunk_spans(fresh) != old
    synced = ingest.sync(kb)  # once: the sync after it reads nothing again
    assert (synced.indexed, synced.unchanged) == (0, 2)


def test_hit_fields_are_only_for_code_sources():
    assert codechunks.hit_fields("text:utf-8", "2 Methods") == {}
    assert codechunks.hit_fields("code:go+lines", "go file main\ngo function main.run") == {
        "language": "go", "kind": "file", "symbol": "main"}
    assert codechunks.hit_fields("code:sql+tree-sitter", "") == {"language": "sql"}


def test_a_mailed_script_without_extension_is_indexed_by_its_shebang(tmp_path, monkeypatch):
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"] = "the deploy script"
    message.set_content("Attached.")
    message.add_attachment(b"#!/bin/sh\nmake deploy\n", maintype="application",
                           subtype="octet-stream", filename="deploy")
    message.add_attachment(b"just notes\n", maintype="application",
                           subtype="octet-stream", filename="NOTES")
    path = tmp_path / "mail.eml"
    path.write_bytes(message.as_bytes())
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "NOTES").write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path / "elsewhere")  # a file of that name here must not count
    assert [a.name for a in extract.extract(path).attachments] == ["deploy"]


def test_deep_nesting_is_split_by_lines_past_the_depth_bound(tmp_path):
    depth = 5000  # far past MAX_DEPTH: the splitter stops descending, chunks stay bounded
    path = tmp_path / "nest.js"
    path.write_text("x = " + "[\n" * depth + "1" + "\n]" * depth + ";\n", encoding="utf-8")
    doc, chunks = chunks_of(path)
    assert_lines_are_the_files(path, doc, chunks)
    assert max(len(c.text) for c in chunks) <= codechunks.MAX_CHARS
