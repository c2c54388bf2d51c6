"""Fetch Tesseract's Korean and Chinese language data into a folder, each file checked against
its pinned SHA-256 before it is kept.

    .venv\\Scripts\\python tessdata.py FOLDER [kor chi_sim]   # install.ps1 -WithOcr runs this

winget's Tesseract brings English only, and no package on PyPI or winget carries kor and
chi_sim, so install.ps1 fetches them from the Tesseract project's tessdata_fast at a fixed
tag. A file whose size or SHA-256 differs from the pin (a changed upstream file, a proxy's
error page, a cut download) is deleted and reported; nothing unchecked is ever left under its
final name (it is written to NAME.part and renamed only once checked). A file already in
FOLDER is left as it is. Exit 0 when every language is there, 1 when one is missing, with the
reason and the command to retry on stderr.

Layer: installer helper (beside install.ps1), imports nothing of linecite.
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# -----------------------------------------------------------------------------
TAG = "4.1.0"  # tessdata_fast's tag; Debian's tesseract-ocr-kor/-chi-sim 1:4.1.0: the same bytes
URL = "https://github.com/tesseract-ocr/tessdata_fast/raw/{tag}/{lang}.traineddata"
URL_ENV = "LINECITE_TESSDATA_URL"  # another mirror of the same files ({lang} in it); tests use it
TIMEOUT = 60  # seconds without a byte before a download is given up
CHUNK = 1 << 16
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    sha256: str
    size: int


PINS = {
    "kor": Pin("6b85e11d9bbf07863b97b3523b1b112844c43e713df8b66418a081fd1060b3b2", 1_677_415),
    "chi_sim": Pin("a5fcb6f0db1e1d6d8522f39db4e848f05984669172e584e8d76b6b3141e1f730",
                   2_469_156),
}


class Refused(RuntimeError):
    """A download that did not match its pin, or did not finish; the message says what to do."""


def url_for(lang: str) -> str:
    template = os.environ.get(URL_ENV) or URL
    return template.format(tag=TAG, lang=lang)


def fetch(lang: str, folder: Path) -> Path:
    """`folder/lang.traineddata`, downloaded and checked; raises Refused on any mismatch."""
    pin, target = PINS[lang], folder / f"{lang}.traineddata"
    part = target.with_name(target.name + ".part")
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url_for(lang), timeout=TIMEOUT) as answer, \
                part.open("wb") as out:
            while block := answer.read(CHUNK):
                size += len(block)
                if size > pin.size:  # bound: never more than the pinned file's bytes
                    break
                digest.update(block)
                out.write(block)
    except OSError as exc:  # URLError, a timeout, a full disk
        part.unlink(missing_ok=True)
        raise Refused(f"{lang}.traineddata could not be downloaded from {url_for(lang)} "
                      f"({exc}); check the network or proxy, then run this again") from exc
    if size != pin.size or digest.hexdigest() != pin.sha256:
        part.unlink(missing_ok=True)
        got = (f"more than {pin.size:,} bytes" if size > pin.size else f"{size:,} bytes"
               if size != pin.size else f"SHA-256 {digest.hexdigest()}")
        raise Refused(f"{lang}.traineddata from {url_for(lang)} is not the pinned file (got "
                      f"{got}; want {pin.size:,} bytes, SHA-256 {pin.sha256}): deleted, nothing "
                      "installed. A proxy or captive portal may have answered instead; fetch it "
                      "from a network that reaches github.com, or copy it from another machine")
    os.replace(part, target)
    return target


def ensure(folder: Path, langs: list[str]) -> list[str]:
    """Fetch each language FOLDER lacks; the messages of those that failed."""
    folder.mkdir(parents=True, exist_ok=True)
    problems = []
    for lang in langs:
        if (folder / f"{lang}.traineddata").is_file():
            continue
        print(f"linecite: fetching {lang}.traineddata (tessdata_fast {TAG}) into {folder}",
              file=sys.stderr)
        try:
            fetch(lang, folder)
        except Refused as exc:
            problems.append(str(exc))
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    unknown = [lang for lang in args[1:] if lang not in PINS]
    if not args or unknown:
        print(f"usage: python tessdata.py FOLDER [{' '.join(PINS)}]"
              + (f" (no pin for {', '.join(unknown)})" if unknown else ""), file=sys.stderr)
        return 2
    problems = ensure(Path(args[0]), args[1:] or list(PINS))
    for problem in problems:
        print(f"linecite: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
