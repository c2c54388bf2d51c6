"""Read text from scans with Tesseract: PDF pages without a usable text layer, and images.

Reads a PDF or an image (.png .jpg .jpeg .tif .tiff .bmp .webp; a multi-page TIFF is one page
per frame); writes one small JSON file per OCR'd page to the OCR cache, so a re-index or a
crash never runs Tesseract on the same page twice. `formats.pdf.extract_pdf` calls `mend_pdf` for
pages with no text, junk text, or a scanner's OCR layer that Tesseract disagrees with
(pdf-with-ocr-text.pdf); `formats.image.extract_image` calls `read_image`. This module never imports
extract.py: it reads pixels and caches text, extract.py makes documents of it.

    python ingest.py smoke-ocr scan.pdf      # OCR a scan, print its text (exit 1: no Tesseract)
    LINECITE_OCR_LANG=kor+eng LINECITE_OCR_CACHE=/tmp/ocr python ingest.py scan.pdf

Pages render with pypdfium2 at DPI (no poppler), in the calling thread (pdfium is not
thread-safe); each page then runs in its own tesseract process from a thread pool, with
OMP_THREAD_LIMIT=1 so the processes do not fight over cores, and no more of them than fit in
MEMORY_BUDGET beside the caller (LINECITE_OCR_WORKERS overrides). Figures are in the README.

Layer: reader (formats/), above paths.py; extract.py calls it for images and scanned pages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from common import atomic, paths
from formats import IMAGE_SUFFIXES

# -----------------------------------------------------------------------------
DPI = 300  # render resolution; Tesseract is told it, since its own estimate cost CER .038->.058
DEFAULT_LANG = "kor+chi_sim+eng"  # the first is primary: "eng+kor+..." read Korean at CER .26
LANG_ENV, CACHE_ENV, WORKERS_ENV = "LINECITE_OCR_LANG", "LINECITE_OCR_CACHE", "LINECITE_OCR_WORKERS"
MEMORY_BUDGET = 2**30  # an ingest and its tesseract processes stay under 1 GB together
TESSERACT_MEMORY = 160 * 2**20  # one tesseract, kor+chi_sim+eng at 300 dpi: 150 MB seen
PAGE_TIMEOUT = 600  # seconds one tesseract run may take before the page is given up
LAYER_GATE = 3  # pages (first, middle, last) probed for a scanner's invisible OCR layer
LAYER_SAMPLES = 3  # layered pages OCR'd to judge that layer
LAYER_CONF = 85  # Tesseract words this confident are taken as right...
LAYER_MIN_WORDS = 10  # ...and with at least this many such words on a page...
LAYER_AGREEMENT = 0.9  # ...a layer holding fewer of them is wrong (measured .97-.98 vs .79)
WINDOWS_TESSERACT = Path(r"C:\Program Files\Tesseract-OCR\tesseract.exe")
TESSERACT_ENV = "LINECITE_TESSERACT"  # tesseract's full path: install.ps1 puts it in the host entry
# -----------------------------------------------------------------------------


class OcrUnavailable(RuntimeError):
    """Tesseract or every wanted language pack is missing; the message says how to install."""


@dataclass
class OcrResult:
    texts: dict[int, str] = field(default_factory=dict)  # 0-based page -> Tesseract's text
    warnings: list[str] = field(default_factory=list)  # for the source's record, never fatal


def install_help(missing: Sequence[str] = (), platform: str = sys.platform) -> str:
    """How to get Tesseract and the language packs, for the user's own system."""
    packs = list(missing) or DEFAULT_LANG.split("+")
    if platform.startswith("win"):
        files = " and ".join(f"{p}.traineddata" for p in packs)
        return ("run `.\\install.ps1 -WithOcr`: it installs Tesseract with winget, fetches "
                "the Korean and Chinese data into the base folder's tessdata and names both in "
                "the MCP host entry. By hand: `winget install UB-Mannheim.TesseractOCR`, put "
                f"{files} from https://github.com/tesseract-ocr/tessdata_fast into a folder, "
                f"and set TESSDATA_PREFIX to it and {TESSERACT_ENV} to tesseract.exe (linecite "
                f"finds {WINDOWS_TESSERACT} when it is not on PATH).")
    if platform == "darwin":
        return "install Tesseract with its language packs: `brew install tesseract tesseract-lang`"
    debs = " ".join(f"tesseract-ocr-{p.replace('_', '-')}" for p in packs if p != "eng")
    return f"install Tesseract: `sudo apt-get install tesseract-ocr {debs}` (Debian/Ubuntu)"


_LANGS: dict[str, list[str]] = {}  # tesseract command -> its installed languages (per process)


def _tesseract():
    """pytesseract, pointed at $LINECITE_TESSERACT when set (install.ps1 leaves PATH alone and
    puts the path in the host entry instead), else at tesseract.exe on Windows when PATH lacks
    it; and set to give every tesseract it starts OMP_THREAD_LIMIT=1: one process per page is
    faster than OpenMP threads inside each, and the limit must not reach OpenMP libraries in
    this process."""
    try:
        import pytesseract
    except ImportError as exc:
        raise OcrUnavailable("the pytesseract package is missing: pip install pytesseract "
                             f"pillow; then {install_help()}") from exc

    module = pytesseract.pytesseract
    if chosen := os.environ.get(TESSERACT_ENV, "").strip():
        if not Path(chosen).is_file():
            raise OcrUnavailable(f"{TESSERACT_ENV} names {chosen}, which is not a file: point it "
                                 f"at tesseract's program, or unset it; {install_help()}")
        module.tesseract_cmd = chosen
    elif (os.name == "nt" and module.tesseract_cmd == "tesseract" and not shutil.which("tesseract")
            and WINDOWS_TESSERACT.exists()):
        module.tesseract_cmd = str(WINDOWS_TESSERACT)
    module.environ = {"OMP_THREAD_LIMIT": "1", **os.environ}  # what pytesseract passes as env
    return pytesseract


def languages(spec: str | None = None) -> tuple[str, list[str]]:
    """(the -l argument to run, wanted packs that are not installed) for `spec`, else
    $LINECITE_OCR_LANG, else DEFAULT_LANG. Raises OcrUnavailable without Tesseract or packs."""
    spec = spec or os.environ.get(LANG_ENV) or DEFAULT_LANG
    pytesseract = _tesseract()
    cmd = pytesseract.pytesseract.tesseract_cmd
    if cmd not in _LANGS:
        try:
            _LANGS[cmd] = pytesseract.get_languages()
        except (pytesseract.TesseractNotFoundError, OSError) as exc:
            raise OcrUnavailable(f"Tesseract not found ({cmd}); {install_help()}") from exc
    wanted = [lang for lang in spec.split("+") if lang]
    have = [lang for lang in wanted if lang in _LANGS[cmd]]
    missing = [lang for lang in wanted if lang not in _LANGS[cmd]]
    if not have:
        raise OcrUnavailable(f"no Tesseract language pack for {spec}; {install_help(missing)}")
    return "+".join(have), missing


def default_cache_dir(platform: str = sys.platform) -> Path:
    """$LINECITE_OCR_CACHE, else the user cache folder's `ocr` (paths.cache_dir)."""
    return paths.cache_dir("ocr", CACHE_ENV, platform)


@dataclass
class _Job:
    """One file's OCR settings; the cache key is (file SHA-256, page, language spec, dpi)."""

    sha256: str
    spec: str  # the languages asked for; the cache entry records the ones that ran
    dpi: int  # 0 for image files: read at their own resolution
    cache_dir: Path
    workers: int

    def cache_path(self, page: int) -> Path:
        name = f"p{page + 1:05d}.{re.sub(r'[^A-Za-z0-9_+-]', '_', self.spec)}.{self.dpi}.json"
        return self.cache_dir / self.sha256[:2] / self.sha256 / name

    def cached(self, page: int) -> dict | None:
        try:
            entry = json.loads(self.cache_path(page).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if entry.get("lang") == self.spec:
            return entry
        try:  # made while a pack was missing: good enough unless that pack is here now
            return entry if languages(self.spec)[0] == entry.get("lang") else None
        except OcrUnavailable:
            return entry

    def store(self, page: int, entry: dict) -> None:
        """Atomic: a crash leaves the old entry or none, never half a file."""
        try:
            atomic.write_json(self.cache_path(page), entry, indent=None)
        except OSError:  # a read-only or full cache costs time on the next run, nothing else
            pass


def default_workers(rss: int | None = None) -> int:
    """Tesseract processes to run at once: one per core, but only as many as fit beside this
    process in MEMORY_BUDGET. Each takes ~150 MB with kor+chi_sim+eng loaded, and an ingest
    that has loaded Kiwi, jieba and the embedder is already ~740 MB (then one fits)."""
    import psutil

    rss = psutil.Process().memory_info().rss if rss is None else rss
    fit = (MEMORY_BUDGET - rss) // TESSERACT_MEMORY
    return max(1, min(os.cpu_count() or 1, fit))


def _job(path: Path, spec: str | None, dpi: int, cache_dir: Path | None, sha256: str | None,
         workers: int | None) -> _Job:
    workers = workers or int(os.environ.get(WORKERS_ENV) or 0) or default_workers()
    return _Job(sha256 or paths.file_sha256(path),
                spec or os.environ.get(LANG_ENV) or DEFAULT_LANG, dpi,
                Path(cache_dir) if cache_dir else default_cache_dir(), max(1, workers))


def _ascii_dir(folder: str) -> str:
    """tesseract.exe opens files through the ANSI code page (tesseract-ocr/tesseract#3709), so
    a temp folder under C:\\Users\\김철수 fails on a non-Korean Windows: use its 8.3 name."""
    if os.name != "nt" or folder.isascii():
        return folder
    import ctypes

    buffer = ctypes.create_unicode_buffer(32768)
    size = ctypes.windll.kernel32.GetShortPathNameW(folder, buffer, len(buffer))
    return buffer.value if 0 < size < len(buffer) else folder


def _run_tesseract(image, lang: str, dpi: int) -> dict:
    """One page through one tesseract process: text (txt) plus its confident words (tsv)."""
    pytesseract = _tesseract()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="linecite-ocr-", ignore_cleanup_errors=True) as tmp:
        page, out = Path(_ascii_dir(tmp), "page.pnm"), Path(_ascii_dir(tmp), "out")
        image.save(page, format="PPM")  # uncompressed: PNG encoding cost 0.6 s a page
        config = (f"--dpi {dpi} " if dpi else "") + "-c tessedit_create_tsv=1"
        pytesseract.pytesseract.run_tesseract(str(page), str(out), "txt", lang, config=config,
                                              timeout=PAGE_TIMEOUT)
        text = out.with_suffix(".txt").read_text(encoding="utf-8", errors="replace")
        rows = [r.split("\t") for r in out.with_suffix(".tsv").read_text(
            encoding="utf-8", errors="replace").splitlines()[1:]]
    sure = [r[11] for r in rows if len(r) == 12 and r[11].strip() and float(r[10]) >= LAYER_CONF]
    return {"lang": lang, "text": text.replace("\f", "").rstrip(), "confident": " ".join(sure),
            "seconds": round(time.monotonic() - started, 2)}


Pages = Callable[[int, int], None]  # (pages done, pages): progress within one file


def _read(job: _Job, pages: list[int], render: Callable[[int], object],
          progress: Pages | None = None) -> tuple[dict, list]:
    """Cache entries for `pages`, running Tesseract for the misses: images are made one at a
    time in this thread and at most 2 x workers wait, so memory stays flat. Warnings come in
    page order, whichever tesseract finished first. `progress` hears each page done."""
    entries = {i: e for i in pages if (e := job.cached(i)) is not None}
    todo = [i for i in pages if i not in entries]
    if not todo:
        return entries, []
    tell = progress or (lambda done, of: None)
    tell(len(pages) - len(todo), len(pages))
    lang, missing = languages(job.spec)
    warnings = [f"ocr ran without the {'+'.join(missing)} language pack: {install_help(missing)}"
                ] if missing else []
    lost: dict[int, str] = {}  # page -> why it was not read
    running: dict[Future, int] = {}

    def collect(done: set[Future]) -> None:
        for future in done:
            page = running.pop(future)
            try:
                entries[page] = future.result()
                job.store(page, entries[page])
            except Exception as exc:  # a timeout or a tesseract crash costs one page only
                lost[page] = f"ocr failed on page {page + 1}: {type(exc).__name__}: {exc}"[:300]
            tell(len(entries) + len(lost), len(pages))

    with ThreadPoolExecutor(max_workers=job.workers) as pool:
        for page in todo:
            if len(running) >= 2 * job.workers:
                collect(wait(running, return_when=FIRST_COMPLETED).done)
            try:  # rendered here, not in the pool: pdfium is not thread-safe
                image = render(page)
            except Exception as exc:  # one damaged page or frame costs that page only
                lost[page] = f"ocr skipped page {page + 1}: {type(exc).__name__}: {exc}"[:300]
                continue
            running[pool.submit(_run_tesseract, image, lang, job.dpi)] = page
        collect(set(running))
    return entries, warnings + [lost[page] for page in sorted(lost)]


# ----------------------------------------------------------------------------- PDF

_CJK = "\u3400-\u9fff\uf900-\ufaff"
_CJK_GAP = re.compile(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])")
_HAS_CJK = re.compile(rf"[{_CJK}]")
_WORDS = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+")  # Han runs apart from digits and letters


def _tokens(text: str) -> set[str]:
    """What two readings of a page are compared by: words of 3+ letters (Latin, Hangul), and
    Han character pairs, since Chinese has no spaces and OCR layers space it each their way."""
    found: set[str] = set()
    for word in _WORDS.findall(_CJK_GAP.sub("", text.lower())):
        if _HAS_CJK.match(word):
            found.update(word[i : i + 2] for i in range(len(word) - 1))
        elif len(word) >= 3:
            found.add(word)
    return found


def layer_agreement(confident: str, layer: str) -> float | None:
    """Share of the words Tesseract is sure of that a page's own text layer also has; None
    when Tesseract is sure of too few to judge (a near-blank page). A dictionary test cannot
    tell a bad layer ("aomberehip", "Gentrsl") from a good one full of names and formulas."""
    sure = _tokens(confident)
    if len(sure) < LAYER_MIN_WORDS:
        return None
    return len(sure & _tokens(layer)) / len(sure)


def _page_kind(doc, index: int) -> str:
    """'blank' (no objects: nothing to read), 'layered' (most text is invisible, render mode
    3: a scan carrying an OCR layer), or 'other'. The first 50 text objects are enough."""
    import pypdfium2.raw as raw

    page = doc[index]
    try:
        count, modes = raw.FPDFPage_CountObjects(page), []
        for k in range(count):
            obj = raw.FPDFPage_GetObject(page, k)
            if raw.FPDFPageObj_GetType(obj) == raw.FPDF_PAGEOBJ_TEXT and len(modes) < 50:
                modes.append(raw.FPDFTextObj_GetTextRenderMode(obj))
            if len(modes) == 50:
                break
    finally:
        page.close()
    hidden = modes.count(raw.FPDF_TEXTRENDERMODE_INVISIBLE)
    return "blank" if not count else "layered" if hidden * 2 > len(modes) else "other"


def _spread(items: list[int], n: int) -> list[int]:
    """n items evenly spread over `items`, first and last included."""
    if len(items) <= n:
        return items
    return sorted({items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)})


def _layered_pages(doc, candidates: list[int]) -> list[int]:
    """Pages whose text is a scanner's OCR layer. Only when one of LAYER_GATE probe pages has
    one are all pages looked at: that look costs ~1.5 ms a page, half of a text extraction."""
    if not any(_page_kind(doc, i) == "layered" for i in _spread(candidates, LAYER_GATE)):
        return []
    return [i for i in candidates if _page_kind(doc, i) == "layered"]


def _layer_is_wrong(entries: dict, texts: list[str], samples: list[int]) -> bool:
    """Most sampled pages that can be judged have a layer Tesseract disagrees with."""
    votes = [layer_agreement(entries[i]["confident"], texts[i]) for i in samples if i in entries]
    votes = [v for v in votes if v is not None]
    return bool(votes) and sum(v < LAYER_AGREEMENT for v in votes) * 2 >= len(votes)


def mend_pdf(path: Path, texts: list[str], unusable: list[int], *, lang: str | None = None,
             dpi: int = DPI, cache_dir: Path | None = None, sha256: str | None = None,
             workers: int | None = None, progress: Pages | None = None) -> OcrResult:
    """Tesseract's text for the pages of `path` that need it: `unusable` pages (no text or
    junk, as extract.py judged) that have anything drawn on them, and pages whose OCR layer
    Tesseract disagrees with on most of LAYER_SAMPLES sampled pages. Never raises for a
    missing Tesseract: pages keep their text and a warning says how to install it.
    `progress` hears (pages done, pages) of each pass that runs Tesseract."""
    import pypdfium2 as pdfium

    path, result = Path(path), OcrResult()
    with path.open("rb") as handle:  # a file object: pdfium's own path handling fails on
        try:  # some non-ASCII names
            doc = pdfium.PdfDocument(handle)
        except pdfium.PdfiumError:  # pdfminer read it (unreadablemetadata.pdf), pdfium cannot
            result.warnings += ["ocr skipped: pdfium cannot open this PDF"] if unusable else []
            return result
        try:
            unusable = [i for i in unusable if i < len(doc)]
            todo = [i for i in unusable if _page_kind(doc, i) != "blank"]
            rest = [i for i in range(min(len(texts), len(doc))) if i not in set(unusable)]
            layered = _layered_pages(doc, rest)
            if not todo and not layered:
                return result

            def render(index: int):
                page = doc[index]
                try:
                    return page.render(scale=dpi / 72, grayscale=True).to_pil()
                finally:
                    page.close()

            job = _job(path, lang, dpi, cache_dir, sha256, workers)
            samples = _spread(layered, LAYER_SAMPLES)
            entries, result.warnings = _read(job, todo + samples, render, progress)
            if _layer_is_wrong(entries, texts, samples):
                more, warnings = _read(job, layered, render, progress)
                entries.update(more)
                result.warnings += warnings
                todo += layered
        except OcrUnavailable as exc:
            shown = ", ".join(str(i + 1) for i in todo[:20]) + (" ..." if len(todo) > 20 else "")
            result.warnings += [f"ocr unavailable: pages {shown} have no usable text layer and "
                                f"were not read; {exc}"] if todo else []
            return result
        finally:
            doc.close()
    result.texts = {i: entries[i]["text"] for i in todo if i in entries}
    result.warnings = list(dict.fromkeys(result.warnings))  # both passes warn of a missing pack
    return result


# ----------------------------------------------------------------------------- images


def _flat(image):
    """A frame Tesseract reads as the eye sees it: upright (EXIF), transparency on white."""
    from PIL import Image, ImageOps

    image = ImageOps.exif_transpose(image)
    if image.mode in ("1", "L", "RGB"):
        return image
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, "white")
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


def read_image(path: Path, progress: Pages | None = None) -> tuple[list[str], list[str]]:
    """OCR every frame of an image file (a multi-page TIFF has several): (text of each frame,
    "" where OCR read nothing; warnings), telling `progress` (frames done, frames). Raises
    OcrUnavailable, and PIL's own errors for a file that is no image (formats.image says
    what they mean)."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()  # decode errors surface here, as "corrupt", not as a failed page
        frames = getattr(image, "n_frames", 1)

        def render(index: int):  # frame by frame: a 200-page TIFF never sits in memory
            image.seek(index)
            return _flat(image)

        entries, warnings = _read(_job(path, None, 0, None, None, None), list(range(frames)),
                                  render, progress)
    return [entries[i]["text"] if i in entries else "" for i in range(frames)], warnings


# ----------------------------------------------------------------------------- smoke test


def smoke(path: Path) -> int:
    """OCR every page of a scanned PDF or an image and print the text: 0 when text came out,
    1 when Tesseract or a language pack is missing (the install message goes to stderr), 2
    when the file gave no text."""
    import pypdfium2 as pdfium
    from PIL import UnidentifiedImageError

    path = Path(path)
    try:
        if missing := languages()[1]:
            print(f"linecite: OCR needs {'+'.join(missing)}: {install_help(missing)}",
                  file=sys.stderr)
            return 1
        if path.suffix.lower() in IMAGE_SUFFIXES:
            pages, warnings = read_image(path)
            print(*warnings, sep="\n", file=sys.stderr)
        else:
            count = len(pdfium.PdfDocument(path.read_bytes()))
            result = mend_pdf(path, [""] * count, list(range(count)))
            print(*result.warnings, sep="\n", file=sys.stderr)
            pages = [result.texts.get(i, "") for i in range(count)]
    except OcrUnavailable as exc:
        print(f"linecite: OCR unavailable: {exc}", file=sys.stderr)
        return 1
    except (pdfium.PdfiumError, UnidentifiedImageError, OSError) as exc:
        print(f"linecite: {exc}", file=sys.stderr)
        return 2
    for number, text in enumerate(pages, 1):
        print(f"--- page {number} ---\n{text}")
    return 0 if any(text.strip() for text in pages) else 2
