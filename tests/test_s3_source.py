"""Buckets as followed sources against a real S3 wire-protocol server on 127.0.0.1: moto's
standalone server (`python -m moto.server`) in its own process, with its IAM checking keys
(INITIAL_NO_AUTH_ACTION_COUNT: the first calls make a user and its key, every later one is
signed and checked), holding real corpus files (issue 33).
"""

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

boto3 = pytest.importorskip("boto3", reason="boto3 (requirements-s3.txt) is not installed")
pytest.importorskip("moto.server", reason="moto (requirements-dev.txt) is not installed")

import fulltext  # noqa: E402
import ingest  # noqa: E402
import kb as kbmod  # noqa: E402
import library  # noqa: E402
from sources import s3_source  # noqa: E402
from tests.conftest import free_port, shared_path, stop_process  # noqa: E402

KEY_ENV, SECRET_ENV = "LINECITE_TEST_S3_KEY", "LINECITE_TEST_S3_SECRET"
CORPUS = ("txt/ko/news.txt", "md/en/docugami_KG-RAG_README.md",
          "pdf/en/002-trivial-libre-office-writer.pdf", "docx/docx2python/zen_of_python.docx")


class Server:
    """A moto server process and the key its IAM accepts."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                      "-p", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None, "moto died"
                time.sleep(0.05)
        iam = self._client("iam", "setup", "setup")
        iam.create_user(UserName="linecite")
        iam.put_user_policy(UserName="linecite", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="linecite")["AccessKey"]
        self.key, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3 = self._client("s3", self.key, self.secret)

    def _client(self, service: str, key: str, secret: str):
        from botocore.config import Config

        return boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            config=Config(s3={"addressing_style": "path"}))

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc)


@pytest.fixture(scope="module")
def server():
    srv = Server()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


def use_keys(monkeypatch, srv: Server) -> None:
    monkeypatch.setenv(KEY_ENV, srv.key)
    monkeypatch.setenv(SECRET_ENV, srv.secret)


def make_kb(base: Path, kb_id: str, srv: Server, bucket: str, prefix: str = "docs/"):
    folder = base / kb_id
    folder.mkdir(parents=True)
    config = {"id": kb_id, "embedding": {"provider": "none"},
              "sourcePaths": [f"s3://{bucket}/{prefix}"],
              "s3": {"endpoint": srv.endpoint, "region": "us-east-1", "accessKeyEnv": KEY_ENV,
                     "secretKeyEnv": SECRET_ENV, "pathStyle": True}}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def fill(srv: Server, bucket: str) -> dict[str, bytes]:
    """The corpus files as objects under docs/, and one outside the followed prefix."""
    srv.s3.create_bucket(Bucket=bucket)
    bodies = {f"docs/{Path(p).name}": shared_path("corpus", *p.split("/")).read_bytes()
              for p in CORPUS}
    for key, body in {**bodies, "other/outside.txt": b"not followed"}.items():
        srv.s3.put_object(Bucket=bucket, Key=key, Body=body)
    return bodies


def dump(kb: kbmod.KnowledgeBase) -> dict:
    """Every source's name, state, size, hash and lines: what a search and read_range see."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        out = {}
        for s in fulltext.list_sources(conn):
            lines = [tuple(r) for r in conn.execute(
                "SELECT l.page, l.line, l.text FROM lines l JOIN sources s ON s.id = "
                "l.source_id WHERE s.name = ? ORDER BY l.page, l.line", (s["name"],))]
            out[s["name"]] = (s["state"], s["size"], s["sha256"], s["path"], lines)
        return out
    finally:
        conn.close()


def test_a_bucket_syncs_changes_and_deletions_like_a_folder(server, tmp_path, monkeypatch):
    """Sync (two listing pages of 2 keys), then an object changed and one deleted: each
    object is read by the file extractors under `s3://bucket/key`, check_changes names what
    changed, the sync redoes only that, and the index equals a clean one made afterwards."""
    use_keys(monkeypatch, server)
    monkeypatch.setattr(s3_source, "PAGE_KEYS", 2)
    bodies = fill(server, "sync")
    kb = make_kb(tmp_path / "base", "bucket", server, "sync")
    summary = ingest.sync(kb)
    names = {f"s3://sync/{key}" for key in bodies}
    assert (summary.indexed, summary.skipped, summary.deleted) == (4, [], 0)
    assert set(dump(kb)) == names

    local = tmp_path / "local"  # the same files from disk: the same lines
    local.mkdir()
    for key, body in bodies.items():
        (local / Path(key).name).write_bytes(body)
    (tmp_path / "disk" / "disk").mkdir(parents=True)
    (tmp_path / "disk" / "disk" / "config.json").write_text(json.dumps(
        {"id": "disk", "embedding": {"provider": "none"}}), encoding="utf-8")
    disk = kbmod.load(tmp_path / "disk", "disk")
    ingest.ingest(disk, [local])
    on_disk = {name.rsplit("/", 1)[1]: row[4] for name, row in dump(disk).items()}
    assert {name.rsplit("/", 1)[1]: row[4] for name, row in dump(kb).items()} == on_disk
    assert all(row[0] == "ready" and row[3] == name for name, row in dump(kb).items())

    lib = library.Library(tmp_path / "base")
    listed = lib.list_sources("bucket")["sources"]
    assert {s["name"] for s in listed} == names
    read = lib.read_range("s3://sync/docs/news.txt", 1, 1, 3, 0, "bucket")
    assert read["source"] == "s3://sync/docs/news.txt" and read["lines"]
    assert lib.get_index_info("bucket")["sources_by_state"]["ready"] == 4

    server.s3.put_object(Bucket="sync", Key="docs/news.txt", Body="새 소식\n둘째 줄\n".encode())
    server.s3.delete_object(Bucket="sync", Key="docs/docugami_KG-RAG_README.md")
    changes = lib.check_changes("bucket")
    assert changes["modified"] == ["s3://sync/docs/news.txt"]
    assert changes["deleted"] == ["s3://sync/docs/docugami_KG-RAG_README.md"]
    assert changes["unchanged"] == 2 and changes["added"] == []
    lib.close()
    summary = ingest.sync(kb)
    assert (summary.indexed, summary.deleted, summary.unchanged) == (1, 1, 2)
    assert [t for _p, _l, t in dump(kb)["s3://sync/docs/news.txt"][4]] == ["새 소식", "둘째 줄"]

    clean = make_kb(tmp_path / "base", "clean", server, "sync")
    ingest.sync(clean)
    assert dump(clean) == dump(kb)
    ingest.rebuild(kb)  # a damaged index's rebuild lists the bucket again
    assert dump(kb) == dump(clean)


def test_a_listing_pages_past_1000_keys(server):
    """1,005 keys: the server answers 1,000 a page, so the last 5 come only by the
    continuation token."""
    server.s3.create_bucket(Bucket="many")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: server.s3.put_object(Bucket="many", Key=f"k/{i:04}.txt",
                                                     Body=b"x"), range(1005)))
    first = server.s3.list_objects_v2(Bucket="many", Prefix="k/")
    assert len(first["Contents"]) == 1000 and first["IsTruncated"]
    block = {"endpoint": server.endpoint, "pathStyle": True}
    found = s3_source.list_prefix(server.s3, "many", "k/", block)
    assert sorted(o.key for o in found) == [f"k/{i:04}.txt" for i in range(1005)]


def test_a_wrong_or_missing_key_is_one_sentence_naming_the_variable(server, tmp_path,
                                                                    monkeypatch):
    use_keys(monkeypatch, server)
    fill(server, "keys")
    kb = make_kb(tmp_path / "base", "keys", server, "keys")
    ingest.sync(kb)
    before = dump(kb)
    monkeypatch.setenv(SECRET_ENV, "not-the-secret")
    summary = ingest.sync(kb)
    [entry] = summary.skipped
    assert entry["reason"] == "bad-key" and SECRET_ENV in entry["detail"]
    assert entry["detail"].count(". ") == 0 and "\n" not in entry["detail"]
    assert summary.deleted == 0 and dump(kb) == before
    monkeypatch.delenv(KEY_ENV)
    [entry] = ingest.sync(kb).skipped
    assert entry["reason"] == "no-key" and KEY_ENV in entry["detail"]
    assert dump(kb) == before


def test_the_endpoint_going_down_mid_sync_deletes_nothing(tmp_path, monkeypatch):
    """The server stops while changed objects are being fetched, then is down at the next
    listing: both are reported and every source keeps its indexed lines."""
    srv = Server()
    try:
        use_keys(monkeypatch, srv)
        bodies = fill(srv, "down")
        kb = make_kb(tmp_path / "base", "down", srv, "down")
        ingest.sync(kb)
        before = dump(kb)
        for key in ("docs/news.txt", "docs/docugami_KG-RAG_README.md"):
            srv.s3.put_object(Bucket="down", Key=key, Body=b"changed\n")

        def stop_at_first_fetch(done: int, total: int, message: str) -> None:
            if message.startswith("fetching") and srv.proc.poll() is None:
                srv.stop()

        summary = ingest.sync(kb, report=stop_at_first_fetch)
        assert srv.proc.poll() is not None  # it did stop mid-sync
        assert sorted((e["name"], e["reason"]) for e in summary.skipped) == [
            ("s3://down/docs/docugami_KG-RAG_README.md", "unreachable"),
            ("s3://down/docs/news.txt", "unreachable")]
        assert summary.deleted == 0 and dump(kb) == before
        summary = ingest.sync(kb)
        assert [(e["path"], e["reason"]) for e in summary.skipped] == [
            ("s3://down/docs/", "unreachable")]
        assert summary.deleted == 0 and dump(kb) == before and len(before) == len(bodies)
    finally:
        srv.stop()


def test_a_bucket_path_is_never_watched_or_walked_as_a_folder(server, tmp_path):
    from service import watcher
    docs = tmp_path / "docs"
    docs.mkdir()
    kb = make_kb(tmp_path / "base", "mixed", server, "mixed")
    kb.source_paths.append(str(docs))
    assert list(watcher.Watcher._roots(kb)) == [docs.resolve()]
    assert kb.folder_paths == [str(docs)] and kb.bucket_paths == ["s3://mixed/docs/"]
