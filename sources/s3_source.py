"""Buckets as followed sources: the `s3://bucket/prefix` entries of a KB's sourcePaths, on any
S3-compatible server (MinIO, Ceph, R2, AWS S3), described by the KB's `s3` block (issue 33).

`plan` lists each prefix (every page of it) and compares each object with its indexed source
by ETag and size; ingest.py's sync deletes what disappeared and has each new or changed
object's `Download.fetch` write it to a private temporary file within the size bound, then
indexes it through the same extractors as a file (Indexer.index_fetched: the same bytes as
indexed, by SHA-256, stay unchanged). A source is named `s3://bucket/key`.
A listing that fails (a wrong key, no such bucket, an endpoint that does not answer) is
reported under `skipped` and that prefix's sources are kept: it is never taken as "every
object deleted". Keys come only from the environment (`keyPreset`, `accessKeyEnv`,
`secretKeyEnv`), never from config.json; TLS is verified unless `verifyTls` is false.

boto3 (botocore) speaks S3: its signing, pagination tokens and path- or virtual-host-style
addressing (`pathStyle`) are what the servers above agree on.

Layer: ground (imports kb, limits, folders and fulltext): the network edge of folder sync.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

import fulltext
import kb as kbmod
from common import limits
from common.commands import pip_install
from sources import folders

PAGE_KEYS = 1000  # keys asked per listing page (S3's own most)
MAX_OBJECTS = 200_000  # keys one prefix may hold; past it the listing is refused
CONNECT_SECONDS = 10
READ_SECONDS = 60  # one socket read (a listing page, a block of an object)
ATTEMPTS = 2  # botocore's tries per request
BLOCK = 1024 * 1024  # bytes per read of an object
ETAG_KEY = "s3etag:"  # + source name: fulltext's meta row with the object's ETag
KEY_ERRORS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
              "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed"}


class BucketError(limits.ReasonedError):
    """A bucket could not be listed or an object read; the message says why and what to do."""


@dataclass
class Object:
    key: str
    size: int
    etag: str
    mtime: float


def split(path: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, prefix)."""
    bucket, _, prefix = path[len(kbmod.S3_SCHEME):].partition("/")
    return bucket, prefix


def source_name(bucket: str, key: str) -> str:
    return limits.source_name(f"{kbmod.S3_SCHEME}{bucket}/{key}")


def key_names(block: dict) -> tuple[str, str]:
    """The environment variables holding the access key id and the secret key."""
    preset = kbmod.S3_KEY_PRESETS[block.get("keyPreset", "aws")]
    return block.get("accessKeyEnv", preset[0]), block.get("secretKeyEnv", preset[1])


def client(block: dict):
    """A boto3 S3 client for the KB's `s3` block; BucketError when a key variable is unset."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise BucketError("boto3-missing", "buckets need boto3: "
                                           f"{pip_install('requirements-s3.txt')}") from None
    names = key_names(block)
    keys = [os.environ.get(name, "") for name in names]
    for name, key, what in zip(names, keys, ("access key id", "secret key"), strict=True):
        if not key:
            raise BucketError("no-key", f"set the environment variable {name} to the {what} "
                                        "of the KB's bucket (the s3 block names it)")
    config = Config(connect_timeout=CONNECT_SECONDS, read_timeout=READ_SECONDS,
                    retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                    s3={"addressing_style": "path" if block.get("pathStyle") else "auto"})
    session = boto3.session.Session(aws_access_key_id=keys[0], aws_secret_access_key=keys[1],
                                    region_name=block.get("region", "us-east-1"))
    return session.client("s3", endpoint_url=block.get("endpoint"),
                          verify=block.get("verifyTls", True), config=config)


def _error(err: Exception, where: str, block: dict) -> BucketError:
    """One sentence for a botocore failure: a refused key names its variable."""
    from botocore.exceptions import ClientError

    if isinstance(err, ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        if code in KEY_ERRORS:
            access, secret = key_names(block)
            return BucketError("bad-key", f"{where}: the server refused the key ({code}); set "
                                          f"{access} and {secret} to a key that may read it")
        if code == "NoSuchBucket":
            return BucketError("no-bucket", f"{where}: no such bucket; check sourcePaths")
        return BucketError("s3-error", f"{where}: the server answered {code or 'an error'}")
    return BucketError("unreachable", f"{where}: {block.get('endpoint') or 'the endpoint'} "
                                      f"cannot be reached ({type(err).__name__}); check the "
                                      "s3 block's endpoint and the network")


def list_prefix(s3, bucket: str, prefix: str, block: dict) -> list[Object]:
    """Every object under the prefix, page by page (PAGE_KEYS a page, at most MAX_OBJECTS);
    "folder" markers (keys ending in `/`) are left out. Raises BucketError."""
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"{kbmod.S3_SCHEME}{bucket}/{prefix}"
    found: list[Object] = []
    ask = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
    while True:
        try:
            page = s3.list_objects_v2(**ask)
        except (BotoCoreError, ClientError) as err:
            raise _error(err, where, block) from None
        found += [Object(item["Key"], item["Size"], item.get("ETag", ""),
                         _stamp(item.get("LastModified")))
                  for item in page.get("Contents", []) if not item["Key"].endswith("/")]
        if len(found) > MAX_OBJECTS:
            raise BucketError("too-many-objects", f"{where} holds over {MAX_OBJECTS:,} objects; "
                                                  "follow narrower prefixes")
        if not page.get("IsTruncated"):
            return found
        ask["ContinuationToken"] = page["NextContinuationToken"]


def _stamp(when) -> float:
    return when.timestamp() if isinstance(when, datetime) else 0.0


@dataclass
class Download:
    """An object to fetch and index (pipeline/indexer.py's Indexer.index_downloads)."""

    name: str
    bucket: str
    obj: Object
    s3: object
    block: dict

    def fetch(self, folder: Path, limit: int) -> tuple[Path, float, object]:
        """(file, mtime, what to record after indexing): the object written to `folder`
        within `limit` bytes (its listed size checked first, the bytes counted)."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self.obj.size > limit:
            raise BucketError("too-large", _too_large(self.name, limit))
        file = folder / _file_name(self.obj.key)
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=self.obj.key)["Body"]
            with body, open(file, "wb") as out:
                size = 0
                while block := body.read(BLOCK):
                    size += len(block)
                    if size > limit:
                        raise BucketError("too-large", _too_large(self.name, limit))
                    out.write(block)
        except (BotoCoreError, ClientError) as err:
            raise _error(err, self.name, self.block) from None
        etag = self.obj.etag
        return file, self.obj.mtime, lambda conn: fulltext.set_meta(conn, ETAG_KEY + self.name,
                                                                    etag)


def _too_large(name: str, limit: int) -> str:
    return (f"{name} is over the limit of {limit // (1024 * 1024):,} MB (LINECITE_MAX_FILE_MB); "
            "raise it to index this object")


def _file_name(key: str) -> str:
    """A local file name keeping the key's last part (the extractors go by its suffix);
    `object-` first, so no key becomes a Windows device name (`con.txt`)."""
    return "object-" + re.sub(r"[^\w.\-]", "_", PurePosixPath(key).name)[-120:]


@dataclass
class BucketPlan:
    """What a bucket sync would do; check_changes shows it without doing it."""

    added: list[Download] = field(default_factory=list)
    modified: list[Download] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[dict] = field(default_factory=list)  # prefixes not listed: their sources kept

    def to_json(self) -> dict:
        return {"added": [d.name for d in self.added], "modified": [d.name for d in self.modified],
                "deleted": self.deleted, "unchanged": self.unchanged, "skipped": self.skipped}


def plan(conn, kb: kbmod.KnowledgeBase, force: bool = False) -> BucketPlan:
    """Compare the KB's bucket prefixes with what is indexed: an object is unchanged when its
    ETag and size are those recorded (and its source did not fail); reads no object."""
    result = BucketPlan()
    if not kb.bucket_paths:
        return result
    try:
        s3 = client(kb.s3)
    except BucketError as err:
        result.skipped += [_not_listed(path, err) for path in kb.bucket_paths]
        return result
    sources = fulltext.list_sources(conn, where="WHERE s.name LIKE 's3://%'")
    attachments = folders.attachment_sources((s["name"], s["path"]) for s in sources)
    indexed = {s["name"]: s for s in sources if s["name"] not in attachments}
    seen: set[str] = set()
    for path in dict.fromkeys(kb.bucket_paths):
        bucket, prefix = split(path)
        try:
            objects = list_prefix(s3, bucket, prefix, kb.s3)
        except BucketError as err:
            result.skipped.append(_not_listed(path, err))
            seen.update(n for n in indexed if n.startswith(source_name(bucket, prefix)))
            continue
        for obj in objects:
            _compare(result, conn, indexed, Download(source_name(bucket, obj.key), bucket, obj,
                                                     s3, kb.s3), force, seen)
    roots = tuple(source_name(*split(path)) for path in kb.bucket_paths)
    result.deleted = [n for n in indexed if n.startswith(roots) and n not in seen]
    return result


def _compare(result: BucketPlan, conn, indexed: dict, item: Download, force: bool,
             seen: set[str]) -> None:
    if item.name in seen:  # two overlapping prefixes list it twice
        return
    seen.add(item.name)
    if len(item.name) > limits.MAX_NAME_CHARS:
        result.skipped.append({"name": item.name[:limits.ECHO_CHARS] + "...",
                               "reason": "name-too-long", "detail": (
                                   f"its source name would be over {limits.MAX_NAME_CHARS:,} "
                                   "characters; shorten the key to index it")})
        return
    row = indexed.get(item.name)
    if row is None:
        result.added.append(item)
    elif (force or row["state"] in folders.RETRY_STATES or row["size"] != item.obj.size
          or fulltext.get_meta(conn, ETAG_KEY + item.name) != item.obj.etag):
        result.modified.append(item)
    else:
        result.unchanged += 1


def _not_listed(path: str, err: BucketError) -> dict:
    return {"path": path, "reason": err.reason,
            "detail": f"{err}; its indexed sources are kept as they are"}

