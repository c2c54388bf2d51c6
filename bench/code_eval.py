"""Code search quality: queries from docstrings of real code, answers as the lines to cite.

    python -m bench code                      # dev half, built-in embedder
    python -m bench code --split test         # test half, to report
    python -m bench code --embedding '{...}'  # the KBs' embedding block, as evaluate.py takes
    python -m bench code --js NPM/node_modules/glob --js ...   # also JavaScript packages
    python -m bench code --chunkers default,windows-20         # windows of another size
    python -m bench code --sets identifiers --chunkers default  # only names as queries
    python -m bench code --min-lines 65      # every hit scored as if 65 lines: one hit size

The set is built from code nobody here wrote: the .py files of PACKAGES, installed in the venv
that runs the bench, every file under each package folder in path order (no tests, vendored
copies or caches; at most MAX_FILE_BYTES, UTF-8, no form feed). Python's `ast` finds the
top-level functions, classes and the methods of top-level classes, with their line spans
(first decorator to last line) and docstrings.

- Code search (CodeSearchNet's construction): the query is the first sentence of a function's
  or method's docstring, the answer that function's lines. A function qualifies when its
  docstring stands on lines of its own, its first sentence has MIN_QUERY_WORDS words or more
  (at most MAX_QUERY_CHARS), no other function shares that sentence, and code follows the
  docstring; MAX_QUERIES of them are chosen by the SHA-256 of `<file>:<qualified name>`. The
  chosen docstrings are replaced by blank lines in the indexed copy, so the query's words are
  not in the index and every other line keeps its number (the copy still parses).
- Identifiers: the query is a function's, method's or class's name (defined once in the set,
  every language together, a JavaScript function counted with or without its JSDoc;
  MIN_NAME_CHARS or longer), the answer its `def`/`class` line; MAX_IDENTIFIERS of them.

With --js, a package folder's .js files join the set (functions and methods right below a
JSDoc comment, by the rule in js_definitions; the JSDoc is blanked), each language with its
own LIMITS and its own tables. Both sets are split dev/test by evaluate.in_dev_half of the
query id. A hit is right when it is in the answer's file and its lines overlap the answer's;
per method the table gives hit@k (a right hit among the first k), MRR@10 and lines@5 (the mean
size of the first five hits: a longer hit overlaps more functions). Two KBs of the same
copies: `default` goes through ingest.py's own pipeline (the code reader when formats/ has one
for the suffix; else the copy is named `<name>.txt` and read as text), `windows` cuts each
file into fixed WINDOW_LINES-line windows (`windows-N`: N lines), tokenized and searched the
same way. Built KBs are cached like evaluate.py's.

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import importlib.metadata
import inspect
import json
import re
import shutil
import sys
import sysconfig
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

import chroma_store
import chunking
import extract
import fulltext
import ingest
import kb as kbmod
import search
from bench import evaluate
from index import segment
from pipeline.indexer import Indexer
from ranking import hits

# -----------------------------------------------------------------------------
SITE = Path(sysconfig.get_paths()["purelib"])  # the running venv's pure-Python packages
PACKAGES = ("attr", "click", "dateutil", "h11", "httpx", "jsonschema", "markdown_it",
            "packaging", "platformdirs", "requests", "rich", "tenacity")  # pure Python, pinned
# in constraints.txt (linecite's own dependencies and theirs), with docstrings
SKIP_PARTS = ("tests", "test", "_vendor", "vendor", "__pycache__")  # folders left out
MAX_FILE_BYTES = 200_000  # a larger .py file is left out (generated tables, not code to find)
MAX_FILES = 2000  # of all packages together; more is an error, not a silent cut
LIMITS = {"python": (400, 300), "javascript": (200, 150)}  # (code-search, identifier) queries
# of each language, dev and test together
MIN_QUERY_WORDS = 4  # a shorter first sentence ("Return the value.") says too little
MAX_QUERY_CHARS = 300  # a longer first sentence is a paragraph without a full stop
MIN_NAME_CHARS = 4  # shorter names (`get`, `run`) are words, not identifiers
WINDOW_LINES = 40  # the baseline's fixed windows; `windows-N` (--chunkers) takes N lines...
WINDOW_RANGE = (5, 200)  # ... within these bounds
CUTOFFS = (1, 5)  # hit@k reported
MRR_CUTOFF = 10  # MRR@10; also the hits asked of search() per query
COPY_FOLDER = "pysrc"  # the copies' folder, so source names are `pysrc/<package>/<file>`
CHUNKERS = ("windows", "default")
SETS = ("code search", "identifiers")  # the query sets, as --sets names them
_JS_FUNCTION = re.compile(  # a named function or a class's method on a line of its own
    r"(?P<indent>\s*)(?:export\s+)?(?:(?:static|async|get|set)\s+)*"
    r"(?:function\s*\*?\s*(?P<function>[A-Za-z_$][\w$]*)|#?(?P<method>[A-Za-z_$][\w$]*))"
    r"\s*\([^)]*\)\s*\{\s*$")
_JS_DECLARED = re.compile(  # a line that may define a name: looser than _JS_FUNCTION (a head
    # whose parameters go on, a generator, an arrow function), for counting definitions only
    r"\s*(?:export\s+)?(?:(?:static|async|get|set|const|let|var)\s+)*\*?\s*"
    r"(?:function\s*\*?\s*)?#?(?P<name>[A-Za-z_$][\w$]*)\s*"
    r"(?:\(|=\s*(?:async\s+)?(?:function\b|\([^)]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>))")
_JS_KEYWORDS = frozenset(("if", "for", "while", "switch", "catch", "function", "return"))
_FULL_STOP = re.compile(r"(?<=\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)\s")  # "e.g. x" goes on
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Definition:
    """One function, method or class of a file, with the lines an editor shows for it."""

    path: str  # posix path under site-packages, e.g. "click/core.py"
    qualname: str  # "Command.invoke"
    kind: str  # "function", "method" or "class"
    first: int  # first line: its first decorator, else its def/class line
    head: int  # its def/class line
    last: int
    doc: tuple[int, int] | None  # the docstring's lines, when it stands on lines of its own
    sentence: str  # the docstring's first sentence ("" without one)
    code_after_doc: bool  # a statement follows the docstring

    @property
    def qid(self) -> str:
        return f"{self.path}:{self.qualname}"

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Query:
    """A query and its answer: the lines `first`-`last` of file `path`."""

    qid: str
    text: str
    path: str
    first: int
    last: int


@dataclass
class CodeSet:
    """The files as indexed (the queries' docstrings blanked) and the two query sets."""

    files: dict[str, str]  # path -> indexed text
    searches: list[Query]
    identifiers: list[Query]
    definitions: int  # functions, methods and classes found in the files


# ----------------------------------------------------------------------------- the set


def package_files(site: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """path -> text of every qualifying .py file of the packages, in path order."""
    files: dict[str, str] = {}
    for package in packages:
        root = site / package
        if not root.is_dir():
            raise SystemExit(f"package {package!r} is not installed in {site}: install "
                             "requirements-dev.txt into this venv, or run the bench from it")
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(site)
            if set(rel.parts[:-1]) & set(SKIP_PARTS) or path.stat().st_size > MAX_FILE_BYTES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            if text.strip() and "\f" not in text:  # a form feed would start a text page
                files[rel.as_posix()] = text
    return files


def js_files(root: Path) -> dict[str, str]:
    """`js/<folder>/<path>` -> text of every qualifying .js file under `root` (--js), in path
    order: nested node_modules, tests, minified files and `esm` builds (the twins of the
    CommonJS ones, whose comments would make every query ambiguous) left out."""
    if not root.is_dir():
        raise SystemExit(f"--js {root}: no such folder; give a folder of JavaScript packages")
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*.js")):
        rel = path.relative_to(root)
        if set(rel.parts[:-1]) & {*SKIP_PARTS, "node_modules", "esm"} \
                or path.name.endswith(".min.js") \
                or path.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if text.strip() and "\f" not in text:
            files[f"js/{root.name}/{rel.as_posix()}"] = text
    return files


def language(path: str) -> str:
    return "javascript" if path.endswith(".js") else "python"


def first_sentence(doc: str) -> str:
    """The docstring's first paragraph up to its first full stop, on one line."""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return _FULL_STOP.split(" ".join(paragraph.split()), 1)[0]


def _docstring(node: ast.AST, lines: list[str]) -> tuple[tuple[int, int] | None, str]:
    """The docstring's lines (only when no code shares them) and its first sentence."""
    body = getattr(node, "body", [])
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        return None, ""
    expr = body[0]
    alone = (not lines[expr.lineno - 1][:expr.col_offset].strip()
             and not lines[expr.end_lineno - 1][expr.end_col_offset:].strip())
    return ((expr.lineno, expr.end_lineno) if alone else None), first_sentence(expr.value.value)


def _definition(path: str, node: ast.AST, qualname: str, kind: str,
                lines: list[str]) -> Definition:
    doc, sentence = _docstring(node, lines)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return Definition(path, qualname, kind, first, node.lineno, node.end_lineno, doc, sentence,
                      len(node.body) > 1)


def definitions(path: str, text: str) -> list[Definition]:
    """Top-level functions and classes and the methods of top-level classes, in line order."""
    lines = text.split("\n")
    found: list[Definition] = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.parse(text, filename=path).body:
        if isinstance(node, functions):
            found.append(_definition(path, node, node.name, "function", lines))
        elif isinstance(node, ast.ClassDef):
            found.append(_definition(path, node, node.name, "class", lines))
            found += [_definition(path, item, f"{node.name}.{item.name}", "method", lines)
                      for item in node.body if isinstance(item, functions)]
    return found


def js_definitions(path: str, text: str) -> list[Definition]:
    """The functions and methods of a JavaScript file that follow a JSDoc comment, by a
    stated rule for formatted code: the `/** ... */` block ends on the line before the
    function's, and the function ends at the first later line that is its indentation and `}`.
    """
    lines = text.split("\n")
    found: list[Definition] = []
    opened = 0
    for n, line in enumerate(lines, 1):
        if line.strip().startswith("/**"):
            opened = n
        elif opened and line.strip() == "*/" and n < len(lines):
            head = _JS_FUNCTION.fullmatch(lines[n])
            name = head and (head["function"] or head["method"])
            end = head and _js_end(lines, n + 1, head["indent"])
            if name and name not in _JS_KEYWORDS and end:
                doc = "\n".join(re.sub(r"^\s*/?\*+/?\s?", "", text)
                                 for text in lines[opened - 1:n])
                sentence = first_sentence(doc.split("\n@", 1)[0].split("\n\n@", 1)[0])
                found.append(Definition(path, name, "method" if head["method"] else "function",
                                        n + 1, n + 1, end, (opened, n), sentence, True))
            opened = 0
    return found


def _js_end(lines: list[str], head: int, indent: str) -> int | None:
    """The line of the function's closing brace, None when the rule finds none."""
    closing = re.compile(re.escape(indent) + r"\}[;,)]*\s*")
    return next((n for n in range(head + 1, len(lines) + 1) if closing.fullmatch(lines[n - 1])),
                None)


def _by_hash(items: list[Definition], limit: int) -> list[Definition]:
    """A fixed sample: the `limit` items of smallest SHA-256 of their query id."""
    return sorted(items, key=lambda d: hashlib.sha256(d.qid.encode()).hexdigest())[:limit]


def search_queries(found: list[Definition], limit: int) -> list[Definition]:
    """The functions whose docstring makes a query (see the module docstring)."""
    usable = [d for d in found if d.kind != "class" and d.doc and d.code_after_doc
              and len(d.sentence.split()) >= MIN_QUERY_WORDS
              and len(d.sentence) <= MAX_QUERY_CHARS and not d.name.startswith("test")]
    shared: dict[str, int] = {}
    for d in usable:
        shared[d.sentence.lower()] = shared.get(d.sentence.lower(), 0) + 1
    return _by_hash([d for d in usable if shared[d.sentence.lower()] == 1], limit)


def declared_names(files: dict[str, str]) -> Counter[str]:
    """How often each name is defined in the whole set, every language together: Python's
    definitions by `ast`, and every JavaScript line that may declare a function or method
    (_JS_DECLARED: with a JSDoc or without, its parameters on one line or more, `*gen()`,
    `const f = () =>`). A call on a line of its own counts too: a name left out of the set
    costs a query, a name defined twice asks what no search can tell."""
    names: Counter[str] = Counter()
    for path, text in files.items():
        if language(path) == "javascript":
            heads = (_JS_DECLARED.match(line) for line in text.split("\n"))
            names.update(h["name"] for h in heads if h and h["name"] not in _JS_KEYWORDS)
        else:
            names.update(d.name for d in definitions(path, text))
    return names


def identifier_queries(found: list[Definition], limit: int,
                       declared: Counter[str]) -> list[Definition]:
    """The definitions whose name nothing else in the set defines (`declared`)."""
    return _by_hash([d for d in found if declared[d.name] == 1 and len(d.name) >= MIN_NAME_CHARS
                     and not d.name.startswith("__")], limit)


def blank_lines(text: str, spans: list[tuple[int, int]]) -> str:
    """The text with the lines of each span (1-based, inclusive) emptied; numbers stay."""
    lines = text.split("\n")
    for first, last in spans:
        lines[first - 1:last] = [""] * (last - first + 1)
    return "\n".join(lines)


def build_set(files: dict[str, str],
              limits: dict[str, tuple[int, int]] = LIMITS) -> CodeSet:
    """The queries of the files, and the files with those queries' docstrings blanked; each
    language's queries are chosen among its own definitions, up to its `limits`."""
    if len(files) > MAX_FILES:
        raise SystemExit(f"{len(files)} files: over MAX_FILES ({MAX_FILES}); name fewer")
    found: dict[str, list[Definition]] = {lang: [] for lang in limits}
    for path, text in files.items():
        lang = language(path)
        found[lang] += (js_definitions if lang == "javascript" else definitions)(path, text)
    chosen = [d for lang, group in found.items() for d in search_queries(group, limits[lang][0])]
    declared = declared_names(files)
    named = [d for lang, group in found.items()
             for d in identifier_queries(group, limits[lang][1], declared)]
    blanked: dict[str, list[tuple[int, int]]] = {}
    for d in chosen:
        blanked.setdefault(d.path, []).append(d.doc)
    indexed = {path: blank_lines(text, blanked.get(path, [])) for path, text in files.items()}
    searches = [Query(d.qid, d.sentence, d.path, d.first, d.last) for d in chosen]
    identifiers = [Query(d.qid, d.name, d.path, d.head, d.head) for d in named]
    return CodeSet(indexed, searches, identifiers, sum(map(len, found.values())))


def versions(packages: tuple[str, ...]) -> str:
    """`name version` of each package's distribution: the figures hold for these versions."""
    dists = importlib.metadata.packages_distributions()
    return ", ".join(f"{dist} {importlib.metadata.version(dist)}"
                     for package in packages for dist in dists.get(package, [package])[:1])


# ----------------------------------------------------------------------------- scoring


def right(hit: hits.Hit, query: Query, source: str) -> bool:
    """The hit is in the answer's source and its lines overlap the answer's."""
    return hit.source == source and hit.line_start <= query.last and hit.line_end >= query.first


def scores(found: list[hits.Hit], query: Query, source: str) -> tuple[float, ...]:
    """hit@k for each of CUTOFFS, the reciprocal rank of the first right hit (0 past
    MRR_CUTOFF), and the mean lines of the first max(CUTOFFS) hits: a longer hit overlaps
    more functions, so hit@k needs its size beside it to compare chunkers fairly."""
    rank = next((n for n, hit in enumerate(found[:MRR_CUTOFF], 1) if right(hit, query, source)),
                None)
    hit_at = tuple(float(rank is not None and rank <= k) for k in CUTOFFS)
    top = found[:max(CUTOFFS)]
    lines = sum(h.line_end - h.line_start + 1 for h in top) / len(top) if top else 0.0
    return (*hit_at, 1.0 / rank if rank else 0.0, lines)


def score_names() -> tuple[str, ...]:
    return (*(f"hit@{k}" for k in CUTOFFS), f"MRR@{MRR_CUTOFF}", f"lines@{max(CUTOFFS)}")


def widened(hit: hits.Hit, lines: int) -> hits.Hit:
    """The hit as if it held at least `lines` lines, centred on its own (from line 1 at the
    least): --min-lines, to compare chunkers at one hit size, since any overlap counts."""
    size = hit.line_end - hit.line_start + 1
    if size >= lines:
        return hit
    first = max(1, hit.line_start - (lines - size) // 2)
    return dataclasses.replace(hit, line_start=first, line_end=first + lines - 1)


def measure(searcher: search.Searcher, queries: list[Query], sources: dict[str, str],
            methods: dict[str, dict], min_lines: int = 0) -> dict[str, list[tuple[float, ...]]]:
    """Per method, the scores of every query, in query order (each hit widened to
    `min_lines`)."""
    table: dict[str, list[tuple[float, ...]]] = {name: [] for name in methods}
    start = time.perf_counter()
    for n, query in enumerate(queries, 1):
        for name, method in methods.items():
            found = [widened(hit, min_lines)
                     for hit in evaluate.searched(searcher, query.text, MRR_CUTOFF, method)]
            table[name].append(scores(found, query, sources[query.path]))
        if n % 100 == 0 or n == len(queries):
            print(f"  {n}/{len(queries)} queries, {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
    return table


# ----------------------------------------------------------------------------- the KBs


def copy_name(path: str) -> str:
    """The copy's file name: its own while formats/ has a reader for it, else `<name>.txt`,
    so the text reader reads it and its lines stay the file's lines."""
    return path if extract.supported(Path(path)) else f"{path}.txt"


def source_names(files: dict[str, str]) -> dict[str, str]:
    """path -> the source name ingest gives its copy (folders.discover's `<folder>/<path>`)."""
    return {path: f"{COPY_FOLDER}/{copy_name(path)}" for path in files}


def fingerprint(code_set: CodeSet) -> str:
    """Changes with the indexed texts, or with any module of the product (the readers, the
    chunkers, the tokenizer among them): a rebuild re-embeds only the chunks that changed."""
    digest = hashlib.sha256()
    for path, text in sorted(code_set.files.items()):
        digest.update(f"{path}\x00{text}\x00".encode())
    product = Path(extract.__file__).parent
    for module in sorted([*product.glob("*.py"), *product.glob("formats/*.py")]):
        digest.update(module.read_bytes())
    return digest.hexdigest()


def write_copies(code_set: CodeSet, folder: Path) -> Path:
    """The indexed copies under `folder/COPY_FOLDER`, replacing whatever was there."""
    root = folder / COPY_FOLDER
    if root.exists():
        shutil.rmtree(root)
    for path, text in code_set.files.items():
        target = root / PurePosixPath(copy_name(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="\n")
    return root


def window_chunks(source: str, lines: list[str],
                  size: int = WINDOW_LINES) -> list[fulltext.Chunk]:
    """The baseline: fixed `size`-line windows of one page, blank windows left out."""
    chunks = []
    for start in range(1, len(lines) + 1, size):
        text = "\n".join(lines[start - 1:start - 1 + size])
        if text.strip():
            tokens = " ".join(segment.tokens(chunking.bm25_text(source, "", text)))
            end = min(start + size - 1, len(lines))
            chunks.append(fulltext.Chunk(chunking.chunk_id(source, 1, start, text), 1, start,
                                         end, text, tokens))
    return chunks


def index_windows(kb: kbmod.KnowledgeBase, root: Path, names: dict[str, str],
                  size: int) -> None:
    """Every copy as windows, read by the same reader as the default KB's."""
    indexer = Indexer(kb, progress=True)
    try:
        for path, name in names.items():
            copy = root / PurePosixPath(copy_name(path))
            pages = extract.extract(copy).pages[:1]  # code is one page; a copy has no \f
            data = copy.read_bytes()
            src = fulltext.SourceFile(name, str(copy), hashlib.sha256(data).hexdigest(),
                                      len(data), 0.0)
            fulltext.replace_source(indexer.conn, src, "windows", pages,
                                    window_chunks(name, pages[0], size))
        indexer.reconcile()
    finally:
        indexer.close()


def drop_strays(kb: kbmod.KnowledgeBase, names: set[str]) -> list[str]:
    """Delete the KB's sources that are not among `names`: an earlier run's --js package, whose
    definitions would compete with the set's (ingest adds and replaces, never removes). The
    next reconcile drops their vectors."""
    conn = fulltext.connect(kb.fulltext_path)
    try:
        strays = [name for (name,) in conn.execute("SELECT name FROM sources ORDER BY name")
                  if name not in names]
        for name in strays:
            fulltext.delete_source(conn, name)
    finally:
        conn.close()
    return strays


def window_size(chunker: str) -> int:
    """`windows` -> WINDOW_LINES, `windows-N` -> N (within WINDOW_RANGE); ValueError else."""
    size = int(chunker.removeprefix("windows-")) if chunker.startswith("windows-") else (
        WINDOW_LINES if chunker == "windows" else 0)
    if not WINDOW_RANGE[0] <= size <= WINDOW_RANGE[1]:
        raise ValueError(f"{chunker!r} is no chunker: use default, windows or windows-N "
                         f"with N from {WINDOW_RANGE[0]} to {WINDOW_RANGE[1]}")
    return size


def build(code_set: CodeSet, chunker: str, cache: Path,
          embedding: dict | None) -> kbmod.KnowledgeBase:
    """The KB of one chunker, (re)built when its marker is missing or stale. The KB is named
    by how the copies are read, so the `.py.txt` copies never linger beside `.py` ones."""
    reading = "reader" if extract.supported(Path("x.py")) else "text"
    js = "-js" if any(language(path) == "javascript" for path in code_set.files) else ""
    kb = evaluate.eval_kb(f"code-{chunker}-{reading}{js}", cache, embedding)
    marker = kb.folder / "code-eval-build.json"
    want = fingerprint(code_set)
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8"))["fingerprint"] == want:
        return kb
    start = time.perf_counter()
    if strays := drop_strays(kb, set(source_names(code_set.files).values())):
        print(f"code-{chunker}: {len(strays)} sources the set no longer has dropped "
              f"({strays[0]}, ...)", file=sys.stderr)
    root = write_copies(code_set, kb.folder / "copies")
    print(f"code-{chunker}: indexing {len(code_set.files)} files into {kb.folder}",
          file=sys.stderr)
    if chunker != "default":
        index_windows(kb, root, source_names(code_set.files), window_size(chunker))
    else:
        summary = ingest.ingest(kb, [root], force=True, progress=True)
        if summary.indexed != len(code_set.files):
            raise SystemExit(f"code-{chunker}: ingest left out copies the windows KB has "
                             f"(failed {summary.failed[:3]}, skipped {summary.skipped[:3]}); "
                             "the two KBs must index the same files: change the set's rule")
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        counts = fulltext.counts(conn)
    finally:
        conn.close()
    record = {"fingerprint": want, "counts": counts,
              "seconds": round(time.perf_counter() - start, 1)}
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"code-{chunker}: built: {counts}", file=sys.stderr)
    return kb


# ----------------------------------------------------------------------------- main


def run(kb: kbmod.KnowledgeBase, code_set: CodeSet, split: str,
        wanted: tuple[str, ...] = SETS, min_lines: int = 0) -> list[str]:
    """The tables of one KB: code search and identifiers (those of `wanted`), per language.
    Identifiers also get `auto` without its definitions-first rule (search.py), code search
    `auto` without its neighbours (neighbours.py), to show what each rule does."""
    sources = source_names(code_set.files)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
    out = []
    try:
        searcher = search.Searcher(conn, evaluate.CachedEmbeddings(store))
        own = evaluate.methods(kb, ["vector", "default"])
        auto = next(kwargs for name, kwargs in own.items() if name.startswith("default"))
        named = {**own, "no definitions first": {**auto, "definitions_first": False},
                 "exact": {"mode": "exact"}}
        located = {**own, "no neighbours": {**auto, "neighbour_weight": 0.0}}
        sets = (("code search", code_set.searches, located),
                ("identifiers", code_set.identifiers, named))
        for lang in LIMITS:
            for title, queries, methods in (s for s in sets if s[0] in wanted):
                chosen = [q for q in queries if language(q.path) == lang and (
                    split == "all" or evaluate.in_dev_half(q.qid) == (split == "dev"))]
                if chosen:
                    print(f"{kb.id} {title} ({lang}): {len(chosen)} queries", file=sys.stderr)
                    table = measure(searcher, chosen, sources, methods, min_lines)
                    out += [f"{title} ({lang}), {kb.id} ({split}: {len(chosen)} queries; KB "
                            f"{fulltext.counts(conn)})", evaluate.table(table, score_names()),
                            ""]
    finally:
        store.close()
        conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="hit@k and MRR@10 of linecite's search on "
                                     "code: docstring queries and identifier queries over "
                                     f"{', '.join(PACKAGES)} as installed in {SITE}")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="dev",
                        help="dev to tune on, test to report (default: %(default)s)")
    parser.add_argument("--embedding", type=json.loads, default=None,
                        help="the KBs' embedding block as JSON, as evaluate.py takes it "
                             "(default: the built-in embedder)")
    parser.add_argument("--cache", type=Path, default=evaluate.DEFAULT_CACHE,
                        help="folder for the built KBs (default: %(default)s)")
    parser.add_argument("--chunkers", type=lambda text: text.split(","), default=CHUNKERS,
                        help="default, windows (40 lines) or windows-N (N lines), "
                             "comma-separated (default: windows,default)")
    parser.add_argument("--js", type=Path, action="append", default=[],
                        help="also this JavaScript package's folder (its .js files), e.g. "
                             "one of npm's own node_modules; repeat for more (default: "
                             "Python only)")
    parser.add_argument("--sets", type=lambda text: tuple(text.split(",")), default=SETS,
                        help="the query sets to run, comma-separated: 'code search', "
                             "identifiers (default: both)")
    parser.add_argument("--min-lines", type=int, default=0,
                        help="score each hit as if it held at least this many lines, centred "
                             "on its own: chunkers compared at one hit size (default: as is)")
    parser.add_argument("--dump", type=Path, default=None,
                        help="also write the queries and answers to this JSON file")
    args = parser.parse_args(argv)
    if set(args.sets) - set(SETS):
        parser.error(f"--sets {','.join(args.sets)}: name {' or '.join(SETS)}")
    for chunker in set(args.chunkers) - {"default"}:
        try:
            window_size(chunker)
        except ValueError as err:
            parser.error(str(err))
    files = package_files(SITE, PACKAGES)
    for folder in args.js:
        files.update(js_files(folder))
    code_set = build_set(files)
    print(f"code set: {len(code_set.files)} files, {code_set.definitions} definitions, "
          f"{len(code_set.searches)} search and {len(code_set.identifiers)} identifier queries",
          file=sys.stderr)
    if args.dump:
        args.dump.write_text(json.dumps({"searches": [asdict(q) for q in code_set.searches],
                                         "identifiers": [asdict(q) for q in
                                                         code_set.identifiers]}, indent=1),
                             encoding="utf-8")
    lines = [f"code set: {len(code_set.files)} files of {versions(PACKAGES)}", ""]
    for chunker in args.chunkers:
        lines += run(build(code_set, chunker, args.cache, args.embedding), code_set, args.split,
                     args.sets, args.min_lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
