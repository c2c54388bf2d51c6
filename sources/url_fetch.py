"""Fetch one web page or document for indexing, bounded and never from an address an agent
must not reach (issue 33).

ingest.py's `ingest_url` (the `ingest_url` tool, `python ingest.py URL`) calls `fetch`, which
writes the body to a file in a private temporary folder and returns `Fetched`: the final URL,
the file (named with the suffix of the type its bytes show), and the ETag / Last-Modified
validators that `check` later compares without reading the body again.

The bounds, each checked before the work it bounds:
- size: a declared Content-Length over the limit is refused before the body is read, and the
  bytes are counted while reading (a body that runs past the limit is cut and refused);
- time: one deadline for the whole fetch (name lookup, connects, TLS, every read, every
  redirect): each socket operation waits at most until it, so a slow body is cut too;
- redirects: at most MAX_REDIRECTS, each new address checked as the first one was.
SSRF: the host is resolved here, every address it resolves to is checked (`address_problem`)
and the connection goes to that checked address (httpcore's network backend hook), so a DNS
answer that changes between check and connect (rebinding) changes nothing. Loopback and
private addresses are refused unless LINECITE_URL_ALLOW_PRIVATE=1 or the KB's
`"urls": {"allowPrivate": true}`; link-local, cloud metadata, multicast, unspecified and
reserved addresses are refused always. No proxy variables are read, no cookies or credentials
are sent, and compressed bodies are not asked for (no decompression bomb).
httpcore (httpx's own HTTP layer) speaks HTTP; only the connect step is ours.

Layer: ground (imports limits and fulltext's meta table): the network edge of the pipeline.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, TimeoutError, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import httpcore

import fulltext
from common import limits

# ---------------------------------------------------------------------------
FETCH_SECONDS = 60.0  # the whole fetch, redirects included
CHECK_SECONDS = 10.0  # one check_changes request (headers only)
MAX_REDIRECTS = 5
MAX_URL_CHARS = 2048  # a URL an agent gives (and each redirect's)
ALLOW_PRIVATE_ENV = "LINECITE_URL_ALLOW_PRIVATE"  # "1": loopback and private ranges allowed
METADATA = {ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
            ipaddress.ip_address("fd00:ec2::254")}  # AWS over IPv6
BLOCK = 64 * 1024  # bytes per read
USER_AGENT = "linecite (document indexer)"
REDIRECTS = (301, 302, 303, 307, 308)
SNIFF_BYTES = 1024  # where a page's first tags must show
HTML_TAG = re.compile(rb"<(!doctype html|html|head|body|title|p|div|h[1-6]|table|ul|br)[\s>/]")
TYPES = {  # Content-Type -> suffix, when the bytes do not tell
    "text/html": ".html", "application/xhtml+xml": ".html", "text/plain": ".txt",
    "text/markdown": ".md", "application/json": ".json", "text/csv": ".csv",
    "application/xml": ".xml", "text/xml": ".xml", "application/pdf": ".pdf",
    "application/rtf": ".rtf", "text/rtf": ".rtf", "application/epub+zip": ".epub",
    "application/msword": ".doc", "application/vnd.ms-excel": ".xls",
    "application/vnd.ms-powerpoint": ".ppt",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.oasis.opendocument.text": ".odt",
}
ZIP_MEMBERS = {"word/document.xml": ".docx", "xl/workbook.xml": ".xlsx",
               "ppt/presentation.xml": ".pptx", "Contents/section0.xml": ".hwpx"}
ZIP_MIMETYPES = {b"application/epub+zip": ".epub", b"application/hwp+zip": ".hwpx",
                 b"application/vnd.oasis.opendocument.text": ".odt",
                 b"application/vnd.oasis.opendocument.spreadsheet": ".ods",
                 b"application/vnd.oasis.opendocument.presentation": ".odp"}
OLE_SUFFIXES = (".doc", ".xls", ".ppt", ".msg", ".hwp")
# ---------------------------------------------------------------------------

# Tests map a public-looking host name to 127.0.0.1 here (host, port -> addresses); None:
# the system resolver.
resolver: Callable[[str, int], list[str]] | None = None


class FetchError(limits.ReasonedError):
    """The URL was not fetched; the message says why and what to do. Nothing was changed."""


@dataclass
class Fetched:
    url: str  # the normalised URL asked for: the source's name
    final_url: str  # where the last redirect led
    file: Path
    size: int
    etag: str | None
    last_modified: str | None

    @property
    def validators(self) -> dict:
        return {"etag": self.etag, "lastModified": self.last_modified}


def private_allowed(urls_block: dict) -> bool:
    """Whether loopback and private addresses may be fetched: LINECITE_URL_ALLOW_PRIVATE=1 or
    the KB's `"urls": {"allowPrivate": true}`."""
    return os.environ.get(ALLOW_PRIVATE_ENV) == "1" or urls_block.get("allowPrivate") is True


def normalise(url: str) -> str:
    """The URL as the source is named: scheme and host in lower case, the host in IDNA, no
    default port, no fragment, the path percent-encoded. Raises FetchError for what is not
    an http(s) URL with a host, or carries credentials."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or not url.strip():
        raise FetchError("bad-url", f"a URL must be 1-{MAX_URL_CHARS:,} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as err:
        raise FetchError("bad-url", f"{url[:80]!r} is not a valid URL ({err})") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise FetchError("bad-url", f"{url[:80]!r} is not an http:// or https:// address; give "
                                    "the full URL of a page or document")
    if parts.username or parts.password:
        raise FetchError("bad-url", "URLs with a user name or password are not fetched; give "
                                    "the address without credentials")
    scheme = parts.scheme.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        netloc += f":{port}"
    path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
    query = quote(parts.query, safe="/%:@!$&'()*+,;=-._~?")
    return urlunsplit((scheme, netloc, path, query, ""))


def address_problem(address: str, allow_private: bool) -> str | None:
    """Why an address must not be connected to, or None. Link-local, metadata, multicast,
    unspecified and reserved addresses are refused always; loopback, private and other
    non-global ones (carrier-grade NAT, documentation ranges) unless `allow_private`."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA:
        return "a cloud metadata address"
    for kind, hit in (("a link-local", ip.is_link_local), ("a multicast", ip.is_multicast),
                      ("an unspecified", ip.is_unspecified),
                      ("a reserved", ip.is_reserved and not ip.is_loopback)):  # ::1 is both
        if hit:
            return f"{kind} address"
    if not ip.is_global and not allow_private:
        kind = "a loopback" if ip.is_loopback else "a private"
        return (f"{kind} address (set {ALLOW_PRIVATE_ENV}=1 or the KB's "
                '"urls": {"allowPrivate": true} to fetch from an intranet)')
    return None


def _resolve(host: str, port: int, deadline: float) -> list[str]:
    """The host's addresses, looked up within the deadline (getaddrinfo has no timeout of
    its own, so it runs in a thread that is left behind if it hangs)."""
    if resolver is not None:
        return resolver(host, port)
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    found: list = []

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            found.append(err)

    thread = threading.Thread(target=look_up, daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if not found:
        raise httpcore.ConnectTimeout(f"looking up {host} took too long")
    if isinstance(found[0], OSError):
        raise httpcore.ConnectError(f"cannot look up {host} ({found[0]})")
    return list(dict.fromkeys(info[4][0] for info in found[0]))


class _Refused(httpcore.ConnectError):
    """A host that resolves to an address the policy refuses (no connection was made)."""


class _Deadline(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the fetch's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float):
        self.inner = inner
        self.deadline = deadline

    def _left(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the time bound of the fetch ran out")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _Deadline(self.inner.start_tls(ssl_context, server_hostname,
                                              self._left(timeout)), self.deadline)

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class _Guarded(httpcore.NetworkBackend):
    """httpcore's connect step: resolve, check every address, connect to a checked one."""

    def __init__(self, allow_private: bool, deadline: float):
        self.inner = httpcore.SyncBackend()
        self.allow_private = allow_private
        self.deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = _resolve(host, port, self.deadline)
        for address in addresses:
            if problem := address_problem(address, self.allow_private):
                raise _Refused(f"{host} resolves to {address}, {problem}")
        failure: Exception = httpcore.ConnectError(f"{host} has no address")
        for address in addresses:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout(f"connecting to {host} took too long")
            try:
                stream = self.inner.connect_tcp(address, port, min(left, timeout or left),
                                                local_address, socket_options)
                return _Deadline(stream, self.deadline)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                failure = err
        raise failure

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise _Refused("unix sockets are not fetched")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _header(response: httpcore.Response, name: bytes) -> str | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _pool(allow_private: bool, deadline: float) -> httpcore.ConnectionPool:
    return httpcore.ConnectionPool(network_backend=_Guarded(allow_private, deadline),
                                   max_connections=1, retries=0)


def _request_headers(extra: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
    fields = {"User-Agent": USER_AGENT, "Accept": "*/*",
              "Accept-Encoding": "identity", **(extra or {})}
    return [(k.encode(), v.encode("latin-1", "replace")) for k, v in fields.items()]


def _open(pool: httpcore.ConnectionPool, url: str, method: str, deadline: float,
          extra: dict[str, str] | None = None):
    """Follow redirects (each re-checked) to the answer that is not one; returns the
    response's context manager (entered) and the final URL."""
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        left = max(0.001, deadline - time.monotonic())
        timeouts = {"connect": left, "read": left, "write": left, "pool": left}
        stream = pool.stream(method, current, headers=_request_headers(extra),
                             extensions={"timeout": timeouts})
        response = _enter(stream, url)
        if response.status not in REDIRECTS:
            return stream, response, current
        location = _header(response, b"location")
        stream.__exit__(None, None, None)
        if not location:
            raise FetchError("http-error", f"{current} redirects (HTTP {response.status}) "
                                           "without saying where")
        current = normalise(urljoin(current, location))
    raise FetchError("too-many-redirects", f"{url} redirects more than {MAX_REDIRECTS} times; "
                                           "give the final address")


def _enter(stream, url: str) -> httpcore.Response:
    """The response headers, or FetchError for a refused address, a timeout or no answer."""
    try:
        return stream.__enter__()
    except _Refused as err:
        raise FetchError("refused-address", f"{url} was not fetched: {err}") from None
    except httpcore.TimeoutException:
        raise FetchError("timeout", f"{url} did not answer within the time bound; try again "
                                    "later") from None
    except httpcore.NetworkError as err:
        raise FetchError("unreachable", f"{url} cannot be reached ({err}); check the address "
                                        "and the network") from None
    except httpcore.ProtocolError as err:
        raise FetchError("http-error", f"{url} did not answer in HTTP ({err})") from None


def fetch(url: str, folder: Path, limit: int, allow_private: bool = False,
          seconds: float = FETCH_SECONDS) -> Fetched:
    """GET `url` into a file in `folder` (a private temporary folder), within `limit` bytes
    and `seconds` in all. Raises FetchError."""
    url = normalise(url)
    deadline = time.monotonic() + seconds
    with _pool(allow_private, deadline) as pool:
        stream, response, final = _open(pool, url, "GET", deadline)
        try:
            _check_answer(url, response, limit)
            body = folder / "download"
            size = _save(url, response, body, limit)
        finally:
            stream.__exit__(None, None, None)
    kind = _header(response, b"content-type")
    file = body.rename(folder / ("download" + suffix_for(body, kind, final)))
    return Fetched(url, final, file, size, _header(response, b"etag"),
                   _header(response, b"last-modified"))


def _check_answer(url: str, response: httpcore.Response, limit: int) -> None:
    """Refuse an error status, an encoded body, or a declared size over `limit`, before the
    body is read."""
    if response.status >= 400:
        raise FetchError("http-error", f"{url} answered HTTP {response.status}; check the "
                                       "address (or whether the page needs a login)")
    if response.status != 200:
        raise FetchError("http-error", f"{url} answered HTTP {response.status}, not a document")
    encoding = (_header(response, b"content-encoding") or "identity").lower()
    if encoding != "identity":
        raise FetchError("http-error", f"{url} sent a {encoding}-encoded body although none "
                                       "was asked for; it was not read")
    declared = _header(response, b"content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise FetchError("too-large", _too_large(url, int(declared), limit))


def _too_large(url: str, size: int | None, limit: int) -> str:
    said = f"{size / 2**20:,.1f} MB" if size is not None else "more"
    return (f"{url} is {said}, over the limit of {limit / 2**20:,.1f} MB per document, so it was "
            "not read (LINECITE_MAX_FILE_MB raises the limit)")


def _save(url: str, response: httpcore.Response, body: Path, limit: int) -> int:
    """Write the body, counting its bytes: FetchError past `limit` or the deadline."""
    size = 0
    try:
        with body.open("wb") as out:
            for block in response.iter_stream():
                size += len(block)
                if size > limit:
                    raise FetchError("too-large", _too_large(url, None, limit))
                out.write(block)
    except httpcore.TimeoutException:
        raise FetchError("timeout", f"{url} sent its body too slowly: it was cut at "
                                    f"{size:,} bytes when the time bound ran out") from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as err:
        raise FetchError("unreachable", f"{url} broke off after {size:,} bytes ({err}); try "
                                        "again") from None
    return size


def suffix_for(file: Path, content_type: str | None, url: str) -> str:
    """The suffix whose reader should read the body: its magic bytes first, then the
    Content-Type, then the URL's own suffix. Raises FetchError when none is supported."""
    from formats import READERS

    with file.open("rb") as f:
        head = f.read(SNIFF_BYTES)
    url_suffix = Path(urlsplit(url).path).suffix.lower()
    declared = TYPES.get((content_type or "").split(";")[0].strip().lower())
    if head.startswith(b"%PDF-"):
        return ".pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_suffix(file, url) or declared or url_suffix
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):  # OLE: the header tells which
        return next((s for s in (url_suffix, declared) if s in OLE_SUFFIXES), ".doc")
    if head.lstrip().startswith(b"{\\rtf"):
        return ".rtf"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"<") and HTML_TAG.search(text):
        return ".html"
    for suffix in (declared, url_suffix):
        if suffix and suffix in READERS:
            return suffix
    raise FetchError("unsupported-format",
                     f"{url} is {content_type or 'of no stated type'}, which no reader takes; "
                     "pages (HTML), PDF, Office, OpenDocument, EPUB, RTF and text are indexed")


def _zip_suffix(file: Path, url: str) -> str | None:
    """Which zip-based format a zip is, from its members (read from the central directory)
    and its `mimetype` entry, unpacked as every reader unpacks one (zipxml.read_member: a
    3 GiB entry in a 3 MB zip took this process past 6 GB, issue 45). None when no member
    tells, or the zip is damaged (its reader says so); FetchError for a zip bomb."""
    from formats.base import ExtractError
    from formats.zipxml import read_member

    try:
        with zipfile.ZipFile(file) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                kind = read_member(archive, "mimetype", file)[:100].strip()
                if kind in ZIP_MIMETYPES:
                    return ZIP_MIMETYPES[kind]
    except ExtractError as err:
        if err.reason == "zip-bomb":
            raise FetchError(err.reason, f"{url} was refused: {err.detail}") from None
        return None
    except (zipfile.BadZipFile, OSError, KeyError):
        return None
    return next((s for member, s in ZIP_MEMBERS.items() if member in names), None)


# -- what check_changes compares ------------------------------------------------------
VALIDATORS_KEY = "validators:"  # + source name: fulltext's meta row with its ETag and date


def saved_validators(conn, name: str) -> dict:
    """The ETag / Last-Modified recorded when source `name` was last fetched ({} if none)."""
    value = fulltext.get_meta(conn, VALIDATORS_KEY + name)
    return json.loads(value) if value else {}


def save_validators(conn, name: str, validators: dict) -> None:
    fulltext.set_meta(conn, VALIDATORS_KEY + name, json.dumps(validators))


def changed(url: str, validators: dict, allow_private: bool,
            seconds: float = CHECK_SECONDS) -> bool | None:
    """Whether the page at `url` changed since `validators` were recorded, by a conditional
    HEAD (If-None-Match / If-Modified-Since: 304 means unchanged, else the new validators are
    compared); None when it cannot be told without fetching it (no validators were given).
    Raises FetchError when there is no answer, or one that is neither 200 nor 304."""
    asked = {k: v for k, v in (("If-None-Match", validators.get("etag")),
                               ("If-Modified-Since", validators.get("lastModified"))) if v}
    if not asked:
        return None
    deadline = time.monotonic() + seconds
    with _pool(allow_private, deadline) as pool:
        stream, response, _final = _open(pool, url, "HEAD", deadline, asked)
        stream.__exit__(None, None, None)
    if response.status == 304:
        return False
    if response.status != 200:
        raise FetchError("http-error", f"{url} answered HTTP {response.status}; its indexed "
                                       "copy is kept")
    now = {"etag": _header(response, b"etag"),
           "lastModified": _header(response, b"last-modified")}
    return any(validators.get(k) and now[k] != validators[k] for k in now)


# -- re-checking the URLs a KB holds (check_changes, sync) ----------------------------
CHECK_THREADS = 8  # URLs checked at once
CHECK_BUDGET = 30.0  # seconds check_changes spends on URLs in all; the rest are "not-checked"


@dataclass
class Refetch:
    """A URL source to fetch again (ingest.py's sync indexes what `fetch` returns)."""

    name: str
    allow_private: bool

    def fetch(self, folder: Path, limit: int) -> tuple[Path, float, Callable]:
        """(file, mtime, what to record after indexing it): the validators for next time."""
        got = fetch(self.name, folder, limit, self.allow_private)
        return got.file, time.time(), lambda conn: save_validators(conn, self.name,
                                                                   got.validators)


@dataclass
class Recheck:
    """What re-checking a KB's URL sources found; `to_fetch` holds the changed ones and
    those without validators (only their bytes can tell: SHA-256 decides)."""

    to_fetch: list[Refetch] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)  # failed last time: fetched, not asked
    unchanged: int = 0
    skipped: list[dict] = field(default_factory=list)  # unreachable or not checked: kept

    def untold(self) -> list[dict]:
        """check_changes' entries for the URLs only a fetch can tell about."""
        return [{"name": r.name, "reason": "no-validators", "detail": (
                    f"{r.name} sent no ETag or Last-Modified, so only fetching it again tells "
                    "whether it changed; start_reindex does")}
                for r in self.to_fetch if r.name not in (*self.changed, *self.retried)]


def refetches(names: list[str], urls_block: dict) -> list[Refetch]:
    """The URL sources `names` to fetch again under the KB's `urls` block."""
    allow = private_allowed(urls_block)
    return [Refetch(name, allow) for name in names]


def url_sources(conn) -> list[tuple[str, dict | None]]:
    """(name, validators) of each source made by ingest_url: named by its http(s) URL,
    which is also its recorded path. Validators are None for one whose last fetch failed or
    needs action (folders.RETRY_STATES): it is fetched again whatever its server says, as
    folder sync reads a failed file again; an older version saved the ETag of a failed
    fetch, and a 304 to it kept the source failed for ever (issue 45)."""
    return [(s["name"], None if s["state"] in ("failed", "needs_action") else
             saved_validators(conn, s["name"])) for s in fulltext.list_sources(
        conn, where="WHERE s.path = s.name AND (s.name LIKE 'http://%' OR s.name LIKE "
                    "'https://%')")]


def recheck(sources: list[tuple[str, dict | None]], allow_private: bool,
            budget: float | None = None) -> Recheck:
    """Ask each URL whether it changed (`changed`, CHECK_THREADS at a time, each within
    CHECK_SECONDS; `budget`: seconds in all, after which the rest are reported unchecked);
    one with validators None (url_sources: it failed) is `retried`, fetched without asking.
    A URL that does not answer is reported and its source kept: never taken as deleted."""
    plan = Recheck(retried=[name for name, saved in sources if saved is None])
    plan.to_fetch = [Refetch(name, allow_private) for name in plan.retried]
    end = None if budget is None else time.monotonic() + budget
    pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="linecite-url-check")
    futures = {pool.submit(changed, name, saved, allow_private): name
               for name, saved in sources if saved is not None}
    try:
        for future in as_completed(futures, None if end is None else end - time.monotonic()):
            _record(plan, futures.pop(future), future, allow_private)
    except TimeoutError:  # concurrent.futures' own on 3.10, the builtin from 3.11
        pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for name in futures.values():
        plan.skipped.append({"name": name, "reason": "not-checked", "detail": (
            f"{name} was not checked within {budget:.0f} s (too many URLs); a sync checks "
            "every one")})
    return plan


def _record(plan: Recheck, name: str, future, allow_private: bool) -> None:
    try:
        verdict = future.result()
    except FetchError as err:
        plan.skipped.append({"name": name, "reason": err.reason, "detail": (
            f"{err}; the source is kept as indexed")})
        return
    if verdict is False:
        plan.unchanged += 1
        return
    if verdict:
        plan.changed.append(name)
    plan.to_fetch.append(Refetch(name, allow_private))
