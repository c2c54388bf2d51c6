"""Turn e-mail saved as .eml or Outlook .msg into a page of raw lines, and hand over the files
it carries.

Reads one file, writes nothing; keeps the contract of `extract.py`. A message is one page:
"From: ...", "To: ...", "Cc: ..." (when present), "Date: ..." (ISO 8601), "Subject: ..." on
the first lines, an empty line, then the body (the plain-text part, else the HTML part's
visible lines, else for .msg the compressed RTF body's text), then one
"[attachment] NAME (TYPE, SIZE)" line per attachment. Inline pictures of an HTML body (a
signature's logo) are not attachments to the reader and are left out.

Attachments whose format linecite reads (and an Outlook message embedded in a .msg) are
returned in `Extracted.attachments`; ingest.py indexes each as a source of its own,
`mail.eml/report.pdf`. Bounds, checked before any attachment is read: at most
MAX_ATTACHMENTS per mail, and no more attachment bytes in all than the mail file holds (a
hostile .msg can point many attachments at the same sectors). An attachment inside an
attached message is listed in that message's lines, not indexed (one level).

.eml goes through the standard library's `email` package. .msg is an OLE compound file
(MS-OXMSG) read with olefile: properties are streams `__substg1.0_PPPPTTTT` (type 001F
UTF-16LE, 001E 8-bit in the message's code page, 0102 binary) or 16-byte entries of
`__properties_version1.0`; attachments are storages `__attach_version1.0_#N`, an embedded
message the nested storage `__substg1.0_3701000D`. The compressed RTF body (MS-OXRTFCP) is
decompressed here and read by markup.rtf_text. Encrypted mail (S/MIME, PGP, IRM) ends
`password-protected`.

Layer: reader (formats/), above formats/markup.py; it asks formats.supported which attachments a
reader claims.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import io
import re
import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from formats import (
    markup,
    office,
    supported,  # which attachments a reader claims
)
from formats.base import Extracted, ExtractError, check_text_size, clean_lines, decode_text
from formats.languages import head_language

# -----------------------------------------------------------------------------
HEADERS = ("From", "To", "Cc", "Date", "Subject")  # the header lines, in this order
MAX_ATTACHMENTS = 50  # attachments one mail gives as sources; the rest are only listed
MAX_NAME_CHARS = 120  # an attachment's name in its source name (the extension is kept)
RTF_DICT = (b"{\\rtf1\\ansi\\mac\\deff0\\deftab720{\\fonttbl;}{\\f0\\fnil \\froman \\fswiss "
            b"\\fmodern \\fscript \\fdecor MS Sans SerifSymbolArialTimes New RomanCourier"
            b"{\\colortbl\\red0\\green0\\blue0\r\n\\par \\pard\\plain\\f0\\fs20\\b\\i\\u\\tab"
            b"\\tx")  # MS-OXRTFCP's initial dictionary (207 bytes)
# -----------------------------------------------------------------------------

WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                    *(f"LPT{i}" for i in range(1, 10))}
_UNSAFE = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]')


@dataclass
class Attachment:
    """A file a mail carries. `pages` is set for an Outlook message embedded in a .msg: its
    lines are read here, as there is no file to hand to an extractor."""

    name: str  # a file name safe on Windows, unique within its mail
    content_type: str
    data: bytes
    pages: list[list[str]] | None = None
    size: int = 0  # bytes as the mail holds them (data's length, or the embedded message's)


def _encrypted(path: Path, how: str) -> ExtractError:
    return ExtractError("password-protected", f"{path.name} is encrypted ({how}); open it in "
                                              "your mail program and save a decrypted copy to "
                                              "index it.")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.0f} KB" if n < 1024 * 1024 else f"{n / 2**20:.1f} MB"


def _safe_name(name: str, fallback: str) -> str:
    """A name for the attachment's source and its temporary file: no folders, nothing Windows
    refuses, not too long (the extension kept)."""
    name = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip().rstrip(". ")
    if not name.strip("_"):
        name = fallback
    stem, dot, suffix = name.rpartition(".")
    if not dot or len(suffix) > 10:
        stem, suffix = name, ""
    stem = stem[:MAX_NAME_CHARS]
    if stem.upper() in WINDOWS_RESERVED:
        stem = "_" + stem
    return f"{stem}.{suffix}" if suffix else stem


def _unique(attachments: list[Attachment]) -> None:
    """Two attachments of one mail named alike ("image001.png") get "NAME (2).ext"."""
    taken: set[str] = set()
    for item in attachments:
        stem, dot, suffix = item.name.rpartition(".")
        stem, suffix = (stem, dot + suffix) if dot else (item.name, "")
        name, n = item.name, 1
        while name.lower() in taken:
            n += 1
            name = f"{stem} ({n}){suffix}"
        taken.add(name.lower())
        item.name = name


def _lines(headers: dict[str, str], body: list[str], attachments: list[Attachment]) -> list[str]:
    head = [f"{name}: {office._flat(headers[name])}" for name in HEADERS if headers.get(name)]
    listed = [f"[attachment] {a.name} ({a.content_type}, {_size(a.size)})" for a in attachments]
    while body and not body[-1].strip():
        body = body[:-1]
    return [line.rstrip() for line in head + [""] + body + listed]


def _page(path: Path, headers: dict[str, str], body: list[str], attachments: list[Attachment],
          parser: str) -> Extracted:
    """The message's page, and the attachments ingest.py may index (within the bounds)."""
    _unique(attachments)
    lines = _lines(headers, body, attachments)
    check_text_size(path, sum(len(line) + 1 for line in lines))
    if not any(line.strip() for line in body) and not headers.get("Subject") and not attachments:
        raise ExtractError("empty", f"{path.name} has no subject and no text; there is "
                                    "nothing to index.")
    readable = [a for a in attachments if a.pages is not None or (a.data and (
        supported(Path(a.name)) if Path(a.name).suffix else head_language(a.data)))]
    warnings = []
    if len(readable) > MAX_ATTACHMENTS:
        warnings.append(f"{len(readable) - MAX_ATTACHMENTS} attachments past the first "
                        f"{MAX_ATTACHMENTS} are listed, not indexed")
    return Extracted([lines], parser, warnings, readable[:MAX_ATTACHMENTS])


def _iso_date(value: str) -> str:
    """A mail Date header in ISO 8601, with the sender's offset; as written if unparsable."""
    try:
        return email.utils.parsedate_to_datetime(value).isoformat()
    except (TypeError, ValueError, IndexError):
        return value


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
    kind = message.get_content_type()
    if kind == "multipart/encrypted" or (kind in ("application/pkcs7-mime",
                                                  "application/x-pkcs7-mime")
                                         and message.get_param("smime-type") != "signed-data"):
        raise _encrypted(path, "S/MIME" if "pkcs7" in kind else "PGP")
    headers = {name: str(message.get(name, "")) for name in HEADERS}
    if when := message.get("Date"):
        headers["Date"] = _iso_date(str(when))
    return _page(path, headers, _eml_body(message), _eml_attachments(message), "email")


def _eml_body(message: Any) -> list[str]:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return []
    try:
        text = part.get_content()
    except (LookupError, UnicodeError):  # an unknown charset: decode it as text files are
        raw = part.get_payload(decode=True) or b""
        text = (decode_text(raw) or ("", ""))[0]
    return markup.html_lines(text) if part.get_content_subtype() == "html" else office._lines(text)


def _eml_attachments(message: Any) -> list[Attachment]:
    found = []
    for n, part in enumerate(message.iter_attachments(), 1):
        if part.get("Content-ID") and part.get_content_disposition() != "attachment":
            continue  # a picture the HTML body shows inline
        kind = part.get_content_type()
        if kind == "message/rfc822":
            inner = part.get_payload(0)
            data = inner.as_bytes()
            fallback = f"{inner.get('Subject') or 'message'}.eml"
        else:
            data = part.get_payload(decode=True) or b""
            fallback = f"attachment-{n}"
        name = _safe_name(part.get_filename() or fallback, f"attachment-{n}")
        found.append(Attachment(name, kind, data, size=len(data)))
    return found


# ----------------------------------------------------------------------------- MSG

PT_UNICODE, PT_STRING8, PT_BINARY = 0x001F, 0x001E, 0x0102
SUBJECT, SENDER_NAME, SENDER_EMAIL, SENDER_SMTP, SENT_AS_NAME, SENT_AS_EMAIL = (
    0x0037, 0x0C1A, 0x0C1F, 0x5D01, 0x0042, 0x0065)
DISPLAY_TO, DISPLAY_CC, SUBMIT_TIME, DELIVERY_TIME, HEADERS_TEXT = (
    0x0E04, 0x0E03, 0x0039, 0x0E06, 0x007D)
BODY, HTML_BODY, RTF_BODY, CODEPAGE, INTERNET_CPID, MESSAGE_CLASS = (
    0x1000, 0x1013, 0x1009, 0x3FFD, 0x3FDE, 0x001A)
ATTACH_DATA, ATTACH_LONG_NAME, ATTACH_NAME, ATTACH_METHOD, ATTACH_MIME, DISPLAY_NAME = (
    0x3701, 0x3707, 0x3704, 0x3705, 0x370E, 0x3001)
HIDDEN, RECIPIENT_TYPE, SMTP_ADDRESS, EMAIL_ADDRESS = 0x7FFE, 0x0C15, 0x39FE, 0x3003
EMBEDDED = 5  # ATTACH_METHOD of a message attached as a message
FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=timezone.utc)


class _Storage:
    """One property object of a .msg (the message, an attachment, a recipient, an embedded
    message): its strings and binaries by property id, and its fixed-size values."""

    def __init__(self, ole: Any, entries: list[list[str]], prefix: str, header: int,
                 codepage: str = "cp1252"):
        self.ole, self.entries, self.prefix, self.codepage = ole, entries, prefix, codepage
        self.fixed: dict[int, bytes] = {}
        props = self.stream_named("__properties_version1.0") or b""
        for at in range(header, len(props) - 15, 16):
            tag, _, value = struct.unpack_from("<II8s", props, at)
            self.fixed[tag >> 16] = value
        if page := self.number(CODEPAGE) or self.number(INTERNET_CPID):
            self.codepage = markup._codec(page)

    def sub(self, prefix: str, header: int) -> _Storage:
        """An object inside this one (an attachment, a recipient, an embedded message)."""
        return _Storage(self.ole, self.entries, prefix, header, self.codepage)

    def stream_named(self, name: str) -> bytes | None:
        name = self.prefix + name
        return self.ole.openstream(name).read() if self.ole.exists(name) else None

    def stream(self, prop: int, kind: int) -> bytes | None:
        return self.stream_named(f"__substg1.0_{prop:04X}{kind:04X}")

    def size(self, prop: int, kind: int) -> int:
        name = f"{self.prefix}__substg1.0_{prop:04X}{kind:04X}"
        return self.ole.get_size(name) if self.ole.exists(name) else 0

    def text(self, prop: int) -> str:
        if (data := self.stream(prop, PT_UNICODE)) is not None:
            text = data.decode("utf-16-le", "replace")
        elif (data := self.stream(prop, PT_STRING8)) is not None:
            text = data.decode(self.codepage, "replace")
        else:
            return ""
        return text.replace("\x00", "").strip()

    def number(self, prop: int) -> int:
        value = self.fixed.get(prop)
        return struct.unpack_from("<i", value)[0] if value else 0

    def time(self, prop: int) -> datetime | None:
        value = self.fixed.get(prop)
        ticks = struct.unpack_from("<Q", value)[0] if value else 0
        try:
            return FILETIME_EPOCH + timedelta(microseconds=ticks // 10) if ticks else None
        except OverflowError:
            return None

    def children(self, kind: str) -> list[str]:
        """The prefixes of this object's attachments or recipients, in their order."""
        parts = self.prefix.split("/")[:-1]
        depth = len(parts)
        return sorted({"/".join(e[:depth + 1]) + "/" for e in self.entries
                       if len(e) > depth + 1 and e[:depth] == parts
                       and e[depth].startswith(f"__{kind}_version1.0_#")})

    def total_size(self) -> int:
        """Bytes in all the streams under this object."""
        return sum(self.ole.get_size("/".join(e)) for e in self.entries
                   if "/".join(e).startswith(self.prefix))


def extract_msg(path: Path) -> Extracted:
    """An Outlook message saved as .msg (MS-OXMSG)."""
    import olefile

    data = path.read_bytes()  # OSError here (locked, gone) is extract()'s not-found
    if not data:
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
    if not olefile.isOleFile(io.BytesIO(data)):
        raise ExtractError("corrupt", f"{path.name} is not an Outlook message (no OLE "
                                      "container); give it its real extension.")
    try:
        ole = olefile.OleFileIO(io.BytesIO(data))
        try:
            message = _Storage(ole, ole.listdir(), "", 32)
            if not message.fixed and not message.text(MESSAGE_CLASS):
                raise ExtractError("corrupt", f"{path.name} is an OLE file but no Outlook "
                                              "message; give it its real extension.")
            _refuse_encrypted(path, message)
            budget = [len(data)]
            headers, body = _msg_headers(message), _msg_body(message)
            attachments = _msg_attachments(message, budget, nested=False)
        finally:
            ole.close()
    except ExtractError:
        raise
    except Exception as exc:  # olefile, struct, codecs: a damaged container
        raise ExtractError("corrupt", f"{path.name} is a damaged Outlook message ("
                                      f"{type(exc).__name__}: {str(exc)[:200]}); re-save it "
                                      "from Outlook and retry.") from exc
    return _page(path, headers, body, attachments, "olefile:msg")


def _refuse_encrypted(path: Path, message: _Storage) -> None:
    kind = message.text(MESSAGE_CLASS).lower()
    if kind.startswith("ipm.note.smime") and not kind.endswith(".multipartsigned"):
        raise _encrypted(path, "S/MIME")
    if kind.startswith("ipm.note.rpmsg"):
        raise _encrypted(path, "rights management")


def _address(name: str, address: str) -> str:
    return f"{name} <{address}>" if name and address and name != address else name or address


def _msg_headers(message: _Storage) -> dict[str, str]:
    sender = next((a for a in (message.text(SENDER_SMTP), message.text(SENDER_EMAIL),
                               message.text(SENT_AS_EMAIL)) if "@" in a), "")
    headers = {"From": _address(message.text(SENDER_NAME) or message.text(SENT_AS_NAME), sender),
               "Subject": message.text(SUBJECT)}
    recipients = _recipients(message)
    headers["To"] = recipients.get(1) or message.text(DISPLAY_TO)
    headers["Cc"] = recipients.get(2) or message.text(DISPLAY_CC)
    written = email.message_from_string(message.text(HEADERS_TEXT),
                                        policy=email.policy.default).get("Date")
    when = message.time(SUBMIT_TIME) or message.time(DELIVERY_TIME)
    if written:  # the transport headers keep the sender's time zone
        headers["Date"] = _iso_date(str(written))
    elif when:
        headers["Date"] = when.replace(microsecond=0).isoformat()
    return headers


def _recipients(message: _Storage) -> dict[int, str]:
    """Recipient type (1 To, 2 Cc, 3 Bcc) -> "Name <address>, ..." from the recipient table."""
    found: dict[int, list[str]] = {}
    for prefix in message.children("recip"):
        recipient = message.sub(prefix, 8)
        address = next((a for a in (recipient.text(SMTP_ADDRESS), recipient.text(EMAIL_ADDRESS))
                        if "@" in a), "")
        entry = _address(recipient.text(DISPLAY_NAME), address)
        if entry:
            found.setdefault(recipient.number(RECIPIENT_TYPE), []).append(entry)
    return {kind: ", ".join(names) for kind, names in found.items()}


def _msg_body(message: _Storage) -> list[str]:
    if text := message.text(BODY):
        return office._lines(text)
    if (html := message.stream(HTML_BODY, PT_BINARY)) is not None:
        page = message.number(INTERNET_CPID)  # the HTML's own code page, when Outlook kept it
        text = html.decode(markup._codec(page), "replace") if page \
            else (decode_text(html) or ("", ""))[0]
        return markup.html_lines(text)
    if (rtf := message.stream(RTF_BODY, PT_BINARY)) is not None:
        return office._lines(markup.rtf_text(decompress_rtf(rtf)).replace("\f", "\n"))
    return []


def _msg_attachments(message: _Storage, budget: list[int], nested: bool) -> list[Attachment]:
    """The message's attachments; data is read only while the byte budget lasts, and an
    embedded message's own lines only at the first level."""
    found = []
    for n, prefix in enumerate(message.children("attach"), 1):
        item = message.sub(prefix, 8)
        if item.number(HIDDEN):
            continue  # a picture the HTML body shows inline
        name = item.text(ATTACH_LONG_NAME) or item.text(ATTACH_NAME)
        if item.number(ATTACH_METHOD) == EMBEDDED and message.ole.exists(
                prefix + f"__substg1.0_{ATTACH_DATA:04X}000D"):
            name = name or item.text(DISPLAY_NAME) or "message"
            suffix = "" if name.lower().endswith((".msg", ".eml")) else ".msg"
            found.append(_embedded(item, name + suffix, budget, nested))
            continue
        size = item.size(ATTACH_DATA, PT_BINARY)
        within = 0 < size <= budget[0]
        budget[0] -= size if within else 0
        data = (item.stream(ATTACH_DATA, PT_BINARY) or b"") if within else b""
        kind = item.text(ATTACH_MIME) or "application/octet-stream"
        found.append(Attachment(_safe_name(name, f"attachment-{n}"), kind, data, size=size))
    return found


def _embedded(item: _Storage, name: str, budget: list[int], nested: bool) -> Attachment:
    inner = item.sub(item.prefix + f"__substg1.0_{ATTACH_DATA:04X}000D/", 24)
    size = inner.total_size()
    if nested or size > budget[0]:
        return Attachment(_safe_name(name, "message.msg"), "message/rfc822", b"", size=size)
    budget[0] -= size
    lines = _lines(_msg_headers(inner), _msg_body(inner), _msg_attachments(inner, budget, True))
    lines = clean_lines("\n".join(lines))  # what extract() does to every file's lines
    return Attachment(_safe_name(name, "message.msg"), "message/rfc822", b"", [lines], size)


def decompress_rtf(data: bytes) -> bytes:
    """An RTF body as Outlook stores it (MS-OXRTFCP: LZ77 over a 4 KB ring dictionary that
    starts with RTF_DICT; "MELA" marks an uncompressed one)."""
    if len(data) < 16:
        raise ValueError("compressed RTF shorter than its header")
    size, raw_size, kind = struct.unpack_from("<III", data)
    if kind == 0x414C454D:  # "MELA"
        return data[16:16 + raw_size]
    if kind != 0x75465A4C:  # "LZFu"
        raise ValueError(f"unknown compressed RTF type {kind:#x}")
    ring = bytearray(4096)
    ring[:len(RTF_DICT)] = RTF_DICT
    write, out, at, end = len(RTF_DICT), bytearray(), 16, min(len(data), size + 4)
    while at < end:
        flags, at = data[at], at + 1
        for bit in range(8):
            if at >= end or len(out) >= raw_size:
                break
            if flags >> bit & 1:  # a reference: 12 bits of offset, 4 of length - 2
                if at + 1 >= end:
                    break
                ref = struct.unpack_from(">H", data, at)[0]
                at += 2
                if ref >> 4 == write:  # the end marker
                    return bytes(out)
                sources = [(ref >> 4) + k for k in range((ref & 0xF) + 2)]
            else:
                sources, at = [-1], at + 1
            for source in sources:  # byte by byte: a run may copy what it just wrote
                byte = data[at - 1] if source < 0 else ring[source % 4096]
                ring[write] = byte
                write = (write + 1) % 4096
                out.append(byte)
    return bytes(out[:raw_size])
