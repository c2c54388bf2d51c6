"""Shared fixtures: where ../shared is, and a skip for tests that need it."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


@pytest.fixture(scope="session", autouse=True)
def ocr_cache(tmp_path_factory):
    """OCR results go to a scratch cache, not the user's (subprocesses inherit it too)."""
    path = tmp_path_factory.mktemp("ocr-cache")
    old = os.environ.get("LINECITE_OCR_CACHE")
    os.environ["LINECITE_OCR_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LINECITE_OCR_CACHE", None)
    else:
        os.environ["LINECITE_OCR_CACHE"] = old


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the calling test when that material is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs ../shared/{'/'.join(parts)} (the team's test corpus), absent here")
    return path


def clean_env(**extra: str) -> dict:
    """This process's environment without linecite's own settings, plus `extra`: a spawned
    server or CLI sees only what its test sets."""
    drop = ("LINECITE_HOME", "LINECITE_TRANSPORT", "LINECITE_HOST", "LINECITE_PORT",
            "LINECITE_HTTP_TOKEN", "LINECITE_ALLOWED_DIRS", "LINECITE_PAUSE_AT",
            "LINECITE_CHROMA_URL")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """Ask a server to stop, and kill it if it has not within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def text_pdf(pages: list[list[str]], font_size: int = 11, doc_class=None):
    """An fpdf2 document (not yet written): one text line per cell, pages in order."""
    from fpdf import FPDF

    pdf = (doc_class or FPDF)(format="A4")
    pdf.set_font("Helvetica", size=font_size)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return pdf
