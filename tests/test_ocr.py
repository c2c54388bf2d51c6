"""ocr.py with the real Tesseract on real scans, and extract.py's use of it.

Tests that run Tesseract skip, with the reason, where it or its kor/chi_sim/eng packs are
missing; CI installs them (.ci/run), so there they run. Every test gets its own empty OCR
cache, so no text can come from an earlier run. A "bogus" tesseract_cmd stands for a machine
without Tesseract. Known-text scans are made here: fpdf2 text -> pypdfium2 image -> image PDF.
"""

from __future__ import annotations

import os
import unicodedata

import pypdfium2 as pdfium
import pytest
from conftest import shared_path, text_pdf
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont

import extract
import formats.base
from extract import ExtractError
from formats import ocr
from formats import pdf as pdf_reader

SCANNED = ("corpus", "pdf", "scanned")
KEY = f"{ocr.DEFAULT_LANG}.{ocr.DPI}"  # how cache files are named after the page
PAGES = [  # page 1 keeps a text layer; pages 2 and 3 become images of their text
    ["Linecite keeps this page as text", "Nothing here is read by Tesseract"],
    ["Second page about invoices", "Payment is due within thirty days"],
    ["Third page mentions harbour cranes", "Ships unload containers at dawn"],
]


def _why_no_tesseract() -> str | None:
    try:
        missing = ocr.languages(ocr.DEFAULT_LANG)[1]
    except (ImportError, ocr.OcrUnavailable) as exc:
        return f"needs Tesseract with {ocr.DEFAULT_LANG}: {exc}"
    return f"needs Tesseract language packs {'+'.join(missing)}" if missing else None


needs_tesseract = pytest.mark.skipif(_why_no_tesseract() is not None,
                                     reason=str(_why_no_tesseract()))


@pytest.fixture(autouse=True)
def ocr_cache(tmp_path, monkeypatch):
    """A fresh cache per test, and the default languages whatever the shell says."""
    monkeypatch.setenv(ocr.CACHE_ENV, str(tmp_path / "ocr-cache"))
    monkeypatch.delenv(ocr.LANG_ENV, raising=False)
    return tmp_path / "ocr-cache"


@pytest.fixture
def no_tesseract(tmp_path, monkeypatch):
    """This machine without Tesseract: pytesseract pointed at a file that does not exist."""
    pytesseract = pytest.importorskip("pytesseract")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))


@pytest.fixture(scope="module")
def scan_pdf(tmp_path_factory):
    """PAGES as a PDF: page 1 a real text layer, pages 2-3 images of fpdf2-rendered text."""
    rendered = pdfium.PdfDocument(bytes(text_pdf(PAGES, 16).output()))
    images = [rendered[i].render(scale=150 / 72, grayscale=True).to_pil() for i in (1, 2)]
    mixed = text_pdf(PAGES[:1], 16)
    for image in images:
        mixed.add_page()
        mixed.image(image, x=0, y=0, w=mixed.w)
    path = tmp_path_factory.mktemp("scan") / "mixed-scan.pdf"
    mixed.output(str(path))
    return path


def _text_image(lines: list[str], mode: str = "L", ink=0, paper=255) -> Image.Image:
    """Black text on white (or on `paper`), big enough for Tesseract to read without doubt."""
    font = ImageFont.load_default(size=48)
    image = Image.new(mode, (1400, 120 + 90 * len(lines)), paper)
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(lines):
        draw.text((60, 60 + 90 * n), line, fill=ink, font=font)
    return image


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def _levenshtein(a: str, b: str) -> int:
    """Edit distance, bit-parallel (Myers/Hyyrö): fast enough for whole pages in Python."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    masks: dict[str, int] = {}
    for i, char in enumerate(b):
        masks[char] = masks.get(char, 0) | 1 << i
    full, top = (1 << len(b)) - 1, 1 << (len(b) - 1)
    plus, minus, score = full, 0, len(b)
    for char in a:
        eq = masks.get(char, 0)
        xv = eq | minus
        xh = (((eq & plus) + plus) ^ plus) | eq
        hp, hm = minus | ~(xh | plus), plus & xh
        score += 1 if hp & top else -1 if hm & top else 0
        hp, hm = ((hp << 1) | 1) & full, (hm << 1) & full
        plus, minus = (hm | ~(xv | hp)) & full, hp & xv
    return score


def cer(got: str, want: str) -> float:
    """Character error rate over whitespace-normalised text."""
    got, want = " ".join(got.split()), " ".join(want.split())
    return _levenshtein(got, want) / max(len(want), 1)


def _count(text: str, script: str) -> int:
    return sum(1 for c in text if unicodedata.name(c, "").startswith(script))


# ----------------------------------------------------------------------------- no Tesseract run


def test_levenshtein_matches_the_textbook_cases():
    assert [_levenshtein(a, b) for a, b in [("kitten", "sitting"), ("", "abc"), ("흐름", "흐름이"),
                                            ("flaw", "lawn"), ("same", "same")]] == [3, 3, 1, 2, 0]


def test_install_help_names_each_platforms_command():
    windows, linux = ocr.install_help(platform="win32"), ocr.install_help(platform="linux")
    assert "winget install UB-Mannheim.TesseractOCR" in windows
    assert "kor.traineddata and chi_sim.traineddata" in windows
    assert r"C:\Program Files\Tesseract-OCR\tesseract.exe" in windows
    assert "sudo apt-get install tesseract-ocr tesseract-ocr-kor tesseract-ocr-chi-sim" in linux
    assert "brew install tesseract tesseract-lang" in ocr.install_help(platform="darwin")
    assert ocr.install_help(["kor"], platform="linux").count("tesseract-ocr-") == 1


def test_cache_dir_follows_env_then_platform(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Local"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ocr.default_cache_dir() == tmp_path / "ocr-cache"  # the autouse fixture's env var
    monkeypatch.delenv(ocr.CACHE_ENV)
    assert ocr.default_cache_dir("win32") == tmp_path / "Local" / "linecite" / "cache" / "ocr"
    assert ocr.default_cache_dir("linux") == tmp_path / "xdg" / "linecite" / "ocr"
    assert ocr.default_cache_dir("darwin").parts[-4:] == ("Library", "Caches", "linecite", "ocr")


def test_layer_agreement_tells_a_wrong_layer_and_ignores_chinese_spacing():
    sure = ("Desiring to keep you posted on the progress of the Foundation you will be "
            "interested to know that the Foundation has received the following letters")
    assert ocr.layer_agreement(sure, sure.upper()) == 1.0
    wrong = ("Eeairing to keep you posted on the progress of the Foundstion you Kill tee "
             "intrested to knot that to defce the Foundation, hes received •the fallowings")
    assert ocr.layer_agreement(sure, wrong) < ocr.LAYER_AGREEMENT
    assert ocr.layer_agreement("too few words here", "") is None  # a near-blank page: no vote
    tesseract = "本公司成立于2020年，是一家专注于人工智能技术研发的高科技企业。"
    layer = " ".join("本公司成立于") + " 2020 年 ， "  # an OCR layer spaced char by char
    layer += " ".join("是一家专注于人工智能技术研发的高科技企业")
    assert ocr.layer_agreement(tesseract, layer) == 1.0


def test_without_tesseract_text_pages_stay_and_a_warning_says_how(scan_pdf, no_tesseract):
    result = extract.extract(scan_pdf)
    assert (result.parser, result.pages) == ("pypdfium2", [PAGES[0], [], []])
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("ocr unavailable: pages 2, 3 have no usable text layer")
    assert ocr.install_help() in result.warnings[0]


def test_image_without_tesseract_fails_with_install_steps(tmp_path, no_tesseract):
    path = tmp_path / "note.png"
    _text_image(["Hello"]).save(path)
    with pytest.raises(ExtractError) as caught:
        extract.extract(path)
    assert caught.value.reason == "ocr-unavailable" and "ocr-unavailable" in formats.base.REASONS
    assert ocr.install_help() in caught.value.detail


def test_born_digital_pdf_never_calls_tesseract(tmp_path, no_tesseract, ocr_cache):
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Plain text layer, no scan")
    pdf.output(str(tmp_path / "plain.pdf"))
    result = extract.extract(tmp_path / "plain.pdf")
    assert (result.parser, result.warnings) == ("pypdfium2", [])  # a call would have warned
    assert not ocr_cache.exists()


def test_smoke_without_tesseract_exits_1_with_the_install_message(tmp_path, no_tesseract, capsys):
    path = tmp_path / "note.png"
    _text_image(["Hello"]).save(path)
    assert ocr.smoke(path) == 1
    assert ocr.install_help() in capsys.readouterr().err


# ----------------------------------------------------------------------------- with Tesseract


@needs_tesseract
def test_languages_keep_only_installed_packs_and_limit_openmp(monkeypatch):
    import pytesseract

    monkeypatch.delenv("OMP_THREAD_LIMIT", raising=False)
    assert ocr.languages("eng+nosuch") == ("eng", ["nosuch"])
    monkeypatch.setenv(ocr.LANG_ENV, "kor+eng")
    assert ocr.languages() == ("kor+eng", [])
    with pytest.raises(ocr.OcrUnavailable, match="no Tesseract language pack for nosuch"):
        ocr.languages("nosuch")
    assert pytesseract.pytesseract.environ["OMP_THREAD_LIMIT"] == "1"  # for tesseract only:
    assert "OMP_THREAD_LIMIT" not in os.environ  # this process is untouched


@needs_tesseract
def test_smoke_with_a_missing_language_pack_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ocr.LANG_ENV, "eng+nosuch")
    assert ocr.smoke(tmp_path / "never-opened.png") == 1
    assert "OCR needs nosuch" in capsys.readouterr().err


@needs_tesseract
def test_cache_entry_made_without_a_pack_is_redone_once_the_pack_is_there(tmp_path, monkeypatch):
    import pytesseract

    job = ocr._Job("ab" * 32, "kor+eng", 300, tmp_path / "cache", workers=1)
    job.store(0, {"lang": "eng", "text": "made while kor was missing", "confident": ""})
    assert job.cached(0) is None  # kor is installed now: read the page again
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "none"))
    assert job.cached(0)["text"] == "made while kor was missing"  # better than nothing


@needs_tesseract
@pytest.mark.slow
def test_image_only_pages_are_read_onto_their_own_pages(scan_pdf):
    result = extract.extract(scan_pdf)
    assert (result.parser, result.warnings, len(result.pages)) == ("pypdfium2+ocr", [], 3)
    assert result.pages[0] == PAGES[0]  # the text layer is kept as it was
    for number, other in ((1, 2), (2, 1)):  # ("page" once came out as "0806": judge by CER)
        text = "\n".join(result.pages[number])
        assert cer(text, "\n".join(PAGES[number])) < 0.1, text
        assert cer(text, "\n".join(PAGES[other])) > 0.5


@needs_tesseract
@pytest.mark.slow
def test_second_extraction_runs_no_tesseract(scan_pdf, ocr_cache, monkeypatch, tmp_path):
    import pytesseract

    first = extract.extract(scan_pdf)
    names = sorted(p.name for p in ocr_cache.rglob("*") if p.is_file())
    assert names == [f"p00002.{KEY}.json", f"p00003.{KEY}.json"]  # atomic: no .tmp left
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "none"))
    again = extract.extract(scan_pdf)
    assert again == first and again.parser == "pypdfium2+ocr"


@needs_tesseract
def test_junk_text_layer_is_replaced_by_ocr(tmp_path, monkeypatch):
    pdf = FPDF()
    pdf.set_font("Helvetica", size=20)
    pdf.add_page()
    pdf.cell(text="Quarterly revenue grew strongly")
    pdf.output(str(tmp_path / "junk.pdf"))

    def junk(path, wanted):  # a font without ToUnicode, as every backend reads it
        return {0: "(cid:12)(cid:7) " * 40}, set()

    monkeypatch.setattr(pdf_reader, "PDF_BACKENDS", [("pypdfium2", junk), ("pdfminer", junk)])
    result = extract.extract(tmp_path / "junk.pdf")
    assert result.parser == "pypdfium2+ocr"
    assert result.pages == [["Quarterly revenue grew strongly"]]


@needs_tesseract
def test_multipage_tiff_and_transparent_png(tmp_path):
    frames = [_text_image(["First frame says hello"]), _text_image(["Second frame says goodbye"])]
    frames[0].save(tmp_path / "two.tif", save_all=True, append_images=frames[1:])
    result = extract.extract(tmp_path / "two.tif")
    assert result.parser == "tesseract"
    assert [len(page) for page in result.pages] == [1, 1]
    assert cer(result.pages[0][0], "First frame says hello") < 0.1
    assert cer(result.pages[1][0], "Second frame says goodbye") < 0.1
    clear = _text_image(["Ink on glass"], mode="RGBA", ink=(0, 0, 0, 255), paper=(0, 0, 0, 0))
    clear.save(tmp_path / "clear.png")  # black on transparent black: unreadable unless flattened
    assert cer("".join(extract.extract(tmp_path / "clear.png").pages[0]), "Ink on glass") < 0.2


@needs_tesseract
def test_smoke_prints_the_text_and_exits_0_or_2(tmp_path, capsys):
    _text_image(["Smoke test words"]).save(tmp_path / "words.png")
    Image.new("L", (400, 300), 255).save(tmp_path / "blank.png")
    assert ocr.smoke(tmp_path / "words.png") == 0
    assert "Smoke test words" in capsys.readouterr().out
    assert ocr.smoke(tmp_path / "blank.png") == 2


@needs_tesseract
@pytest.mark.parametrize(("name", "script", "least"), [
    ("english-and-korean.png", "HANGUL", 20), ("chi_sim_image.jpeg", "CJK UNIFIED", 50),
    ("jpn-vert.jpeg", "", 10),  # vertical Japanese, no jpn pack: only "some text" is fair
])
def test_corpus_images_give_text(name, script, least):
    result = extract.extract(shared_path("corpus", "images", name))
    text = "".join("".join(page) for page in result.pages)
    assert (result.parser, len(result.pages)) == ("tesseract", 1)
    assert _count(text, script) >= least if script else len("".join(text.split())) >= least
    if name.startswith("english"):
        assert "RULES AND INSTRUCTIONS" in text


@needs_tesseract
@pytest.mark.slow
def test_corpus_korean_scan_character_error_rate(record_property):
    folder = shared_path(*SCANNED)
    truth = [page for page in (folder / "DERIVED_pcasm-korean_p20-22_imageonly.groundtruth.txt")
             .read_text(encoding="utf-8").split("\f") if page.strip()]
    result = extract.extract(folder / "DERIVED_pcasm-korean_p20-22_imageonly.pdf")
    assert (result.parser, len(result.pages), len(truth)) == ("pypdfium2+ocr", 3, 3)
    pages = ["\n".join(page) for page in result.pages]
    rate = cer("\n".join(pages), "\n".join(truth))
    record_property("korean_scan_cer", round(rate, 4))
    print(f"Korean scan CER {rate:.4f}; per page", [round(cer(p, t), 3) for p, t in
                                                   zip(pages, truth, strict=True)])
    assert rate < 0.10
    assert all(cer(p, t) < 0.2 for p, t in zip(pages, truth, strict=True))  # on the right page


@needs_tesseract
def test_corpus_chinese_scan_gives_han_text():
    result = extract.extract(shared_path(*SCANNED, "chinese_scan.pdf"))
    text = "".join(result.pages[0])
    assert result.parser == "pypdfium2+ocr" and _count(text, "CJK UNIFIED") >= 50
    assert "公司" in text


@needs_tesseract
@pytest.mark.slow
def test_corpus_typewritten_english_scan_gives_latin_text():
    result = extract.extract(shared_path(*SCANNED, "grumman_1974_typewritten_scan_175.pdf"))
    first, second = ("\n".join(page) for page in result.pages)
    assert result.parser == "pypdfium2+ocr"
    assert "ACCESSORY KIT NO. AK-120A" in first and "December 20, 1974" in first
    assert "Main Gear" in second and _count(second, "LATIN") > 500


@needs_tesseract
@pytest.mark.slow
def test_corpus_wrong_ocr_layer_is_read_again_and_a_good_one_kept():
    wrong = extract.extract(shared_path(*SCANNED, "pdf-with-ocr-text.pdf"))
    text = _flat("\n".join(wrong.pages[0]))
    assert wrong.parser == "pypdfium2+ocr"
    assert "desiring to keep you posted" in text and "eeairing" not in text
    good = extract.extract(shared_path(*SCANNED, "a1977-backus-p21.pdf"))
    assert good.parser == "pypdfium2"  # its layer agreed with Tesseract's sample reading
    assert good.pages[0][0] == "position is that it permits the definition of new functional"


def test_default_workers_keep_the_ingest_and_its_tesseracts_under_the_budget(monkeypatch):
    monkeypatch.setattr(ocr.os, "cpu_count", lambda: 16)
    for rss_mb in (40, 330, 740, 1500):
        workers = ocr.default_workers(rss_mb * 2**20)
        assert workers >= 1  # OCR always runs, even past the budget
        if workers > 1:
            assert rss_mb * 2**20 + workers * ocr.TESSERACT_MEMORY <= ocr.MEMORY_BUDGET
    assert ocr.default_workers(740 * 2**20) == 1  # Kiwi, jieba and USE loaded: one fits
    assert ocr.default_workers(40 * 2**20) == 6  # not 16, the cores
    monkeypatch.setattr(ocr.os, "cpu_count", lambda: 2)
    assert ocr.default_workers(40 * 2**20) == 2  # nor more than the cores


class _Unsavable:
    """A rendered page whose pixels cannot be written out: tesseract fails on it in the pool."""

    def save(self, *args, **kwargs):
        raise OSError("disk full")


@needs_tesseract
def test_failed_pages_are_warned_of_in_page_order(tmp_path):
    # Regression: a page failed in the pool was warned of when its tesseract returned, after
    # pages skipped later, and futures finishing together came in a set's order, so a source's
    # warnings could differ from one ingest to the next.
    def render(page: int):
        if page == 1:
            raise ValueError("damaged page")
        return _Unsavable()

    job = ocr._Job("0" * 64, "eng", 0, tmp_path / "cache", workers=2)
    entries, warnings = ocr._read(job, [0, 1, 2], render)
    assert entries == {}
    assert [w.split(":")[0] for w in warnings] == [
        "ocr failed on page 1", "ocr skipped page 2", "ocr failed on page 3"]
