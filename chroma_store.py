"""chroma_store.py: the Chroma side of a knowledge base.

Job: open one Chroma collection per KB (embedded `PersistentClient` by default, a Chroma
server when a URL is configured), write and delete chunk vectors, and answer
nearest-neighbour queries. It is handed an `embedders.Embedder` and does not own one.

Reads and writes `<kb_dir>/chroma/` (embedded mode) or the collection `linecite-<kb_id>` on
a Chroma server. A reader (the server) writes nothing but what chromadb writes on every open
(a row in chroma.sqlite3's `acquire_write` table; chromadb has no read-only mode); where the
folder is read-only it opens a private copy in the user cache instead (`private_copy`).
The collection's metadata records who made its vectors (provider, model, dimension);
every write, query and count checks it against the KB's embedder, and a mismatch raises
EmbedderMismatch saying to re-embed (reindex scope `embedding`); `check_shape` also compares
the length of a held vector, for a reader opening the store.
Listing, deleting and dropping never check, so that re-embedding can always run.

The embedder also goes into the collection's configuration as a chromadb
`EmbeddingFunction` (registered under our own names), so Chroma never falls back to its
default ONNX model, which would be a download at first use. Importing this module is cheap:
chromadb and numpy load on first use. A bare chromadb process that reopens our collection
with `get_collection(name)` must touch `chroma_store.UseEmbedding` first.

Layer: storage: the vector store, below the pipeline and search.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from adapters import chroma_clients
from common import paths
from common.commands import command
from providers import embedders
from providers.embedders import Embedder, EmbedderMismatch, embedder_for

if TYPE_CHECKING:
    from chromadb.api.types import Documents, EmbeddingFunction

    UseEmbedding: type[EmbeddingFunction[Documents]]

__all__ = ["ChromaStore", "collection_name", "embedder_for", "open_store"]

# -----------------------------------------------------------------------------
EMBEDDER_NAME = "linecite-use-m3"  # chromadb name of the builtin's EmbeddingFunction
PROVIDER_NAME = "linecite-provider"  # chromadb name for every other provider's
IDENTITY_PREFIX = "linecite_embedder_"  # collection metadata keys: + provider/model/dimension
COLLECTION_PREFIX = "linecite-"  # collection name = prefix + kb_id
MAX_NAME = 63  # Chroma's Rust API allows 512; 63 also passes the old Python check
PAGE_SIZE = 5000  # ids per page in all_ids()
CHROMA_DB = "chroma.sqlite3"  # chromadb's own database in an embedded store's folder
COPY_CACHE_ENV = "LINECITE_CHROMA_CACHE"  # where copies of read-only stores go (user cache)
COPY_ATTEMPTS = 3  # copies of a store that changed while being copied, before giving up
# collections made before identities were recorded hold the builtin's vectors
LEGACY_IDENTITY = {"provider": "builtin", "model": embedders.USE_MODEL,
                   "dimension": embedders.USE_DIMENSION}
# -----------------------------------------------------------------------------

_class_lock = threading.Lock()  # one class each: a second registration would shadow the first
_classes: dict[str, type] = {}  # chromadb name -> EmbeddingFunction class, built once


def _build_classes() -> dict[str, type]:
    """Define the chromadb faces of our embedders and register them by name."""
    import numpy as np
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
    from chromadb.utils.embedding_functions import register_embedding_function

    class ProviderEmbedding(EmbeddingFunction[Documents]):
        """A linecite Embedder as chromadb sees it; its config rebuilds it (never a key)."""

        def __init__(self, embedder: Embedder) -> None:
            self.embedder = embedder

        def __call__(self, input: Documents) -> Embeddings:
            vectors = self.embedder.embed_documents(list(input))
            return [np.asarray(v, dtype=np.float32) for v in vectors]

        def embed_query(self, input: Documents) -> Embeddings:
            return [np.asarray(self.embedder.embed_query(t), dtype=np.float32) for t in input]

        @staticmethod
        def name() -> str:
            return PROVIDER_NAME

        def get_config(self) -> dict[str, Any]:
            return self.embedder.config()

        @classmethod
        def build_from_config(cls, config: dict[str, Any]) -> ProviderEmbedding:
            return cls(embedder_for(config))

        def default_space(self) -> Space:
            return "cosine"

        def supported_spaces(self) -> list[Space]:
            return ["cosine", "ip", "l2"]  # unit vectors: all three rank alike

    class UseEmbedding(ProviderEmbedding):
        """The builtin embedder (multilingual USE v3), under the name the first release
        stored in every collection."""

        def __init__(self, embedder: Embedder | None = None) -> None:
            super().__init__(embedder or embedder_for(None))

        @staticmethod
        def name() -> str:
            return EMBEDDER_NAME

        @classmethod
        def build_from_config(cls, config: dict[str, Any]) -> UseEmbedding:
            return cls(embedder_for({**config, "provider": "builtin"}))

    out = {}
    for cls in (ProviderEmbedding, UseEmbedding):
        cls.__module__ = __name__  # so pickle and repr find chroma_store.<name>
        cls.__qualname__ = cls.__name__
        out[cls.name()] = register_embedding_function(cls)
    return out


def _embedding_classes() -> dict[str, type]:
    """chromadb name -> class, built and registered on first need."""
    with _class_lock:
        if not _classes:
            _classes.update(_build_classes())
    return _classes


def _chroma_function(embedder: Embedder) -> Any:
    """The chromadb EmbeddingFunction stored in the collection's configuration."""
    classes = _embedding_classes()
    name = EMBEDDER_NAME if embedder.provider == "builtin" else PROVIDER_NAME
    return classes[name](embedder)


def __getattr__(name: str) -> Any:
    """PEP 562: `chroma_store.UseEmbedding` builds the class without a chromadb import up front."""
    if name == "UseEmbedding":
        return _embedding_classes()[EMBEDDER_NAME]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(kb_dir: Path, kb_id: str, embedding: dict | None, url: str | None = None,
               readonly: bool = False, generation: int = 0) -> ChromaStore | None:
    """The KB's vector store, or None for a BM25-only KB (embedding provider "none")."""
    if (embedding or {}).get("provider") == "none":
        return None
    return ChromaStore(kb_dir, kb_id, embedder_for(embedding), url=url, readonly=readonly,
                       generation=generation)


def _writable(path: Path) -> bool:
    """Whether chromadb can open the store at `path` in place: it writes chroma.sqlite3 (a
    row in its acquire_write table) and a journal beside it on every open. Opening the file
    for update writes nothing; it fails on a read-only mount, file or Windows ACL."""
    database = path / CHROMA_DB
    if not os.access(path, os.W_OK):
        return False
    try:
        with open(database, "r+b"):
            return True
    except FileNotFoundError:
        return True  # an empty folder: chromadb makes the file (then the collection is missing)
    except OSError:
        return False


def copy_stamp(path: Path) -> str:
    """What changes when a store's files change: every file's name, size and mtime, hashed."""
    rows = []
    for file in path.rglob("*"):
        if file.is_file():
            info = file.stat()
            rows.append(f"{file.relative_to(path).as_posix()}\0{info.st_size}\0"
                        f"{info.st_mtime_ns}")
    rows.sort()
    return hashlib.sha1("\n".join(rows).encode("utf-8")).hexdigest()[:16]


def copies_dir(path: Path) -> Path:
    """Where the copies of the store at `path` live: one folder per source store."""
    source = hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()[:16]
    return paths.cache_dir("chroma", COPY_CACHE_ENV) / source


def private_copy(path: Path) -> Path:
    """A copy of the store at `path` that chromadb may write, made once per state of its
    files (kept by their stamp, so an unchanged store is not copied again) and made whole
    before it takes its name, so a reader never opens half a copy. A store that changes
    while it is copied (a writer elsewhere) is copied again."""
    for _ in range(COPY_ATTEMPTS):
        stamp = copy_stamp(path)
        target = copies_dir(path) / stamp
        if target.is_dir():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".copy-", dir=target.parent))
        try:
            shutil.copytree(path, scratch / "store")
            if copy_stamp(path) == stamp:
                os.replace(scratch / "store", target)
                return target
        except OSError:
            if not target.is_dir():  # another server made the same copy first
                raise
            return target
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    raise OSError(f"{path} kept changing while it was copied (an indexer writes it elsewhere); "
                  "the next search tries again")


def drop_copy(copy: Path, source: Path) -> None:
    """Remove a copy its source has left behind (the source's files changed since), so the
    user cache holds one copy per store; a copy still open elsewhere (Windows) stays."""
    try:
        current = copy_stamp(source)
    except OSError:
        return
    if copy.name != current:
        shutil.rmtree(copy, ignore_errors=True)


class StoreMissing(RuntimeError):
    """A reader found no vector store where the KB's index says vectors were written."""


def missing_message(kb_id: str, where: object, what: str) -> str:
    """What a user reads when a KB's vectors are gone, and the one command that fixes it."""
    return (f"the vector store of knowledge base {kb_id!r} ({where}) {what}; run "
            f"`{command('ingest', '--kb', kb_id)}` or start_reindex(kb_id={kb_id!r}) to embed the "
            "stored text again (no file is read again)")


def left_behind(err: BaseException | None) -> bool:
    """Whether a reader's failure is chromadb's InternalError, as an embedded client raises
    once another process has written the collection since it loaded its vector index: a new
    chunk's row is there, its vector is not ("Error finding id"). A store opened afresh (a
    client of another generation) reads it."""
    if err is None or "chromadb" not in sys.modules:  # no store ever opened: not Chroma's
        return False
    from chromadb.errors import InternalError

    return isinstance(err, InternalError)


def collection_name(kb_id: str) -> str:
    """A Chroma-legal collection name for kb_id, stable and distinct per id."""
    name = COLLECTION_PREFIX + kb_id
    legal = re.fullmatch(r"[A-Za-z0-9._-]*[A-Za-z0-9]", name) and ".." not in name
    if legal and len(name) <= MAX_NAME:
        return name
    # other characters (Hangul, spaces, ..) or too long: keep a readable part, add a hash
    digest = hashlib.sha1(kb_id.encode("utf-8")).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9]+", "-", kb_id).strip("-")
    readable = readable[:MAX_NAME - len(COLLECTION_PREFIX) - len(digest) - 1]
    return f"{COLLECTION_PREFIX}{readable}-{digest}" if readable else COLLECTION_PREFIX + digest


def _batches(n: int, size: int) -> list[slice]:
    """Slices covering range(n) in runs of at most size."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _matrix(rows: Sequence) -> Any:
    """Vectors as one float32 (n, dim) array: Chroma refuses lists of numpy scalars."""
    import numpy as np

    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"expected a list of vectors, got an array of shape {matrix.shape}")
    return matrix


def _identity_metadata(identity: dict) -> dict:
    """Identity as collection metadata (Chroma metadata holds no None)."""
    return {IDENTITY_PREFIX + k: v for k, v in identity.items() if v}


def _recorded_identity(collection: Any) -> dict | None:
    """The identity a collection's metadata records, or None when it records none."""
    meta = collection.metadata or {}
    if IDENTITY_PREFIX + "provider" not in meta:
        return None
    return {k: meta.get(IDENTITY_PREFIX + k) for k in ("provider", "model", "dimension")}


def _held_dimension(collection: Any) -> int | None:
    """The length of the vectors a collection holds, from one of them (None when empty):
    metadata can be missing or wrong, a stored vector cannot."""
    got = collection.get(limit=1, include=["embeddings"])["embeddings"]
    return len(got[0]) if got is not None and len(got) else None


class ChromaStore:
    """One KB's collection; the client opens on first use and close() releases it."""

    def __init__(self, kb_dir: Path, kb_id: str, embedder: Embedder,
                 url: str | None = None, readonly: bool = False, generation: int = 0) -> None:
        self.kb_dir = Path(kb_dir)
        self.kb_id = kb_id
        self.embedder = embedder
        self.url = url
        self.readonly = readonly  # a reader (the server) never creates a folder or collection
        # which client identity (0 or 1) a reader opens: chromadb shares one client, and its
        # vector index in memory, per path string in a process, so a fresh client that sees
        # another process's writes, opened while the old one serves, needs another spelling
        self.generation = generation
        self.copy: Path | None = None  # the private copy a read-only store is served from
        self.name = collection_name(kb_id)
        self._client: Any = None
        self._collection: Any = None
        self._max_batch = 0
        self._stored: dict | None = None  # the collection's recorded identity, read on open

    @property
    def is_open(self) -> bool:
        """Whether a client is open (a vector index may be loaded): a store never used costs
        nothing to replace."""
        return self._client is not None

    def _open(self) -> Any:
        """The collection, creating client and collection on first call (a reader only
        opens what exists, and says so when it does not)."""
        if self._collection is not None:
            return self._collection
        function = _chroma_function(self.embedder)  # registers ours before any reopen
        client = self._connect()
        if self.readonly:
            return self._open_existing(client)
        try:
            # the function goes in through the configuration, not as embedding_function=,
            # so opening a collection made by another embedder reaches our identity check
            # instead of failing inside chromadb with its own conflict error
            collection = client.get_or_create_collection(
                self.name, embedding_function=None,
                metadata=_identity_metadata(self.embedder.identity()) or None,
                configuration={"hnsw": {"space": "cosine"}, "embedding_function": function})
            self._stored = _recorded_identity(collection)
            self._max_batch = client.get_max_batch_size()
        except BaseException:
            chroma_clients.release(client)
            raise
        self._client, self._collection = client, collection
        return collection

    def _open_existing(self, client: Any) -> Any:
        from chromadb.errors import NotFoundError

        try:
            collection = client.get_collection(self.name)
            self._stored = _recorded_identity(collection)
            self._max_batch = client.get_max_batch_size()
        except (NotFoundError, ValueError):
            chroma_clients.release(client)
            raise StoreMissing(self._missing(f"has no collection {self.name!r}")) from None
        except BaseException:
            chroma_clients.release(client)
            raise
        self._client, self._collection = client, collection
        return collection

    def _missing(self, what: str) -> str:
        return missing_message(self.kb_id, self.url or self.kb_dir / "chroma", what)

    def _checked(self, dimension: int | None = None, record: bool = False) -> Any:
        """The collection, after checking that its vectors come from our embedder.

        `dimension` is the length of the vectors at hand; `record` (a write) stores our
        identity where the collection has none yet or lacks the dimension.
        """
        collection = self._open()
        ours = self.embedder.identity(dimension)
        stored = self._stored
        if stored is None and collection.count() > 0:
            stored = self._stored = dict(LEGACY_IDENTITY)
        if stored is not None:
            differ = [k for k, v in ours.items() if v and stored.get(k) and stored[k] != v]
            if differ:
                raise EmbedderMismatch(
                    f"knowledge base {self.kb_id!r} holds vectors from "
                    f"{embedders.describe(stored)}, but its config now says "
                    f"{embedders.describe(ours)}; {self._reembed()}")
        if record and (stored is None or not stored.get("dimension")) and ours["dimension"]:
            collection.modify(metadata={**(collection.metadata or {}),
                                        **_identity_metadata(ours)})
            self._stored = ours
        return collection

    def _reembed(self) -> str:
        """The way out of every mismatch: embed the stored text again, nothing re-extracted."""
        return (f"re-embed its stored text (no extraction) with "
                f"start_reindex(kb_id={self.kb_id!r}, scope=\"embedding\")")

    def check_shape(self) -> None:
        """Raise EmbedderMismatch (naming the re-embed command) when the collection holds
        another model's vectors, or vectors of another length than the embedder makes.

        A reader runs this when it opens the store, so a status tells the truth before the
        first query: a collection put in place of `chroma/` without our identity (seen in
        the field: 384-dim vectors) passed the identity check as a first-release collection,
        and every vector query then failed inside Chroma with no fix named. An embedder that
        learns its dimension at its first embed (an HTTP provider without `dimension`) is
        compared at the first query instead, where `query` passes the vector's length.
        """
        collection = self._checked()
        ours = self.embedder.identity()
        held = _held_dimension(collection)
        if held and ours["dimension"] and held != ours["dimension"]:
            raise EmbedderMismatch(
                f"knowledge base {self.kb_id!r} holds {held}-dim vectors, but its config says "
                f"{embedders.describe(ours)}; {self._reembed()}")

    def _connect(self) -> Any:
        """An embedded client on kb_dir/chroma, or an HTTP client for self.url."""
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        if self.url is None:
            path = self.kb_dir / "chroma"
            if self.readonly and not path.is_dir():
                raise StoreMissing(self._missing("is missing"))
            if self.readonly:
                path = self._readable_copy(path)
            path.mkdir(parents=True, exist_ok=True)
            return chroma_clients.shared(path, self.generation, settings)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"Chroma URL must look like http://host:port, got {self.url!r}")
        ssl = parts.scheme == "https"
        return chromadb.HttpClient(host=parts.hostname, port=parts.port or (443 if ssl else 80),
                                   ssl=ssl, settings=settings)

    def _readable_copy(self, path: Path) -> Path:
        """The folder a reader opens: the store itself when chromadb can write it, else a
        private copy in the user cache (chromadb writes chroma.sqlite3 on every open and has
        no read-only mode, so a store on a read-only mount cannot be opened where it is)."""
        if _writable(path):
            return path
        try:
            self.copy = private_copy(path)
        except OSError as err:
            raise OSError(f"{path} is read-only, and copying it to {copies_dir(path)} to serve "
                          f"its vectors failed ({err}); free space there, set "
                          f"{COPY_CACHE_ENV} to a folder with room, or make {path} writable"
                          ) from None
        print(f"linecite: {path} is read-only; its vectors are served from a copy at "
              f"{self.copy}", file=sys.stderr, flush=True)
        return self.copy

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Document vectors for texts from the KB's embedder, in order."""
        if not texts:
            return []
        return self.embedder.embed_documents(list(texts))

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query (some models embed queries differently)."""
        return self.embedder.embed_query(text)

    def upsert(self, ids: list[str], embeddings: Sequence, metadatas: list[dict]) -> None:
        """Insert or replace chunks' vectors, in batches the client accepts. No text: SQLite
        holds it, and nothing reads a second copy here."""
        if not len(ids) == len(embeddings) == len(metadatas):
            raise ValueError("upsert needs one embedding and metadata per id")
        if not ids:
            return
        collection = self._checked(len(embeddings[0]), record=True)
        metas = [m or None for m in metadatas]  # Chroma rejects an empty metadata dict
        for part in _batches(len(ids), self._max_batch):
            collection.upsert(ids=list(ids[part]), embeddings=_matrix(embeddings[part]),
                              metadatas=metas[part])

    def delete(self, ids: list[str]) -> None:
        """Remove chunks by id; unknown ids are ignored (Chroma's own behaviour)."""
        if not ids:
            return  # Chroma raises on an empty id list
        collection = self._open()
        for part in _batches(len(ids), self._max_batch):
            collection.delete(ids=list(ids[part]))

    def all_ids(self) -> set[str]:
        """Every chunk id in the collection, read page by page without payloads."""
        collection = self._open()
        ids: set[str] = set()
        offset = 0
        while True:
            page = collection.get(include=[], limit=PAGE_SIZE, offset=offset)["ids"]
            ids.update(page)
            if len(page) < PAGE_SIZE:
                return ids
            offset += PAGE_SIZE

    def query(self, embedding: Sequence[float], n: int,
              where: dict | None = None) -> list[tuple[str, float]]:
        """(id, cosine similarity) of the n nearest chunks, best first."""
        if n <= 0:
            return []
        collection = self._checked(len(embedding))
        result = collection.query(query_embeddings=_matrix([embedding]), n_results=n,
                                  where=where or None, include=["distances"])
        ids, distances = result["ids"][0], result["distances"][0]
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances, strict=True)]

    def vectors(self, ids: list[str], dimension: int | None = None) -> tuple[list[str], Any]:
        """The stored vectors of these ids (unknown ids skipped): (their ids, a float32 matrix
        with one row each)."""
        got = self._checked(dimension).get(ids=list(ids), include=["embeddings"]) if ids else {}
        if not got.get("ids"):
            import numpy as np

            return [], np.zeros((0, 0), np.float32)
        return list(got["ids"]), _matrix(got["embeddings"])

    def cosines(self, embedding: Sequence[float], ids: list[str]) -> dict[str, float]:
        """Cosine of `embedding` with the stored vectors of these ids (unknown ids skipped)."""
        import numpy as np

        found, matrix = self.vectors(ids, len(embedding))
        if not found:
            return {}
        query = np.asarray(embedding, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query) + 1e-12
        return dict(zip(found, map(float, matrix @ query / norms), strict=True))

    def warm(self) -> None:
        """Open the collection and load its vector index (a one-hit query), so that the first
        search on a store opened in the background does not wait for the load."""
        collection = self._checked()
        dimension = (self._stored or {}).get("dimension")
        if dimension and collection.count():
            self.query([1.0] + [0.0] * (int(dimension) - 1), 1)

    def count(self) -> int:
        """Number of chunks in the collection (after the identity check, so that a probe
        of a working embedder still stops on a collection of another model's vectors)."""
        return self._checked().count()

    def reset(self) -> None:
        """Drop the collection, so the next use starts an empty one with the current embedder:
        a new model's vectors cannot sit beside the old ones, and Chroma refuses a collection
        whose stored embedding function differs from the one offered."""
        from chromadb.errors import NotFoundError

        self.close()
        client = self._connect()
        try:
            client.delete_collection(self.name)
        except (NotFoundError, ValueError):
            pass  # nothing to drop
        finally:
            chroma_clients.release(client)

    def close(self) -> None:
        """Release the client; embedded mode then closes its files (Windows can move them)."""
        if self._client is not None:
            chroma_clients.release(self._client)  # closes with the last store using it
        if self.copy is not None:
            drop_copy(self.copy, self.kb_dir / "chroma")
            self.copy = None
        self._client = None
        self._collection = None
        self._stored = None
