"""Turn e-mail saved as .eml into a page of raw lines.

Reads one file, writes nothing; keeps the contract of `extract.py`. A message is one page:
"From: ...", "To: ...", "Cc: ..." (when present), "Date: ..." (ISO 8601), "Subject: ..." on
the first lines, an empty line, then the body (the plain-text part, else the HTML part's
visible lines), then an "[attachment] NAME" line per attachment. Attachments are listed, not
indexed: indexing them as sources of their own (`mail.eml/report.pdf`) needs ingest.py to
take more than one source from a file.

.eml goes through the standard library's `email` package (no dependency). Outlook .msg is not
read yet: there is no real .msg to test a reader against in the team's corpus.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
from pathlib import Path

import markup
import office
from extract import Extracted, ExtractError, _decode, check_text_size

# -----------------------------------------------------------------------------
HEADERS = ("From", "To", "Cc", "Date", "Subject")  # the header lines, in this order
# -----------------------------------------------------------------------------


def _page(path: Path, headers: dict[str, str], body: list[str], attachments: list[str],
          parser: str) -> Extracted:
    head = [f"{name}: {office._flat(headers[name])}" for name in HEADERS if headers.get(name)]
    lines = head + [""] + body + [f"[attachment] {office._flat(a)}" for a in attachments if a]
    check_text_size(path, sum(len(line) + 1 for line in lines))
    if not any(line.strip() for line in body) and not headers.get("Subject"):
        raise ExtractError("empty", f"{path.name} has no subject and no text; there is "
                                    "nothing to index.")
    return Extracted([[line.rstrip() for line in lines]], parser)


# ----------------------------------------------------------------------------- EML


def extract_eml(path: Path) -> Extracted:
    """A MIME message saved as .eml."""
    data = path.read_bytes()
    if not data.strip():
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not any(message.get(name) for name in HEADERS):
        raise ExtractError("corrupt", f"{path.name} has no mail headers (From, To, Subject); "
                                      "give it its real extension.")
    headers = {name: str(message.get(name, "")) for name in HEADERS}
    if when := message.get("Date"):
        try:
            headers["Date"] = email.utils.parsedate_to_datetime(str(when)).isoformat()
        except (TypeError, ValueError):
            pass  # an unparsable date stays as written
    part = message.get_body(preferencelist=("plain", "html"))
    body: list[str] = []
    if part is not None:
        try:
            text = part.get_content()
        except (LookupError, UnicodeError):  # an unknown charset: decode it as text files are
            raw = part.get_payload(decode=True) or b""
            text = (_decode(raw) or ("", ""))[0]
        body = (markup.html_lines(text) if part.get_content_subtype() == "html"
                else office._lines(text))
    names = [a.get_filename() or a.get_content_type() for a in message.iter_attachments()]
    return _page(path, headers, body, names, "email")
