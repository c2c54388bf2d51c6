"""chromadb's embedded clients, one per store folder and generation, shared by every store of a
process and closed with the last.

chromadb caches one System per path *string* (SharedSystemClient's private cache): a second
client on the same path is the same System, so a store that must see a folder replaced under
it (a rebuild, a restored copy) could not open a fresh one. Each generation gets its own
string: generation n appends n "/." to the folder (the same folder to the file system, another
key to chromadb's cache). Written for chromadb 1.0 up to 1.6, whose cache is keyed so; an
upgrade outside that range fails tests/test_adapters.py.

Layer: adapter (adapters/): used by chroma_store.py only.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

WRITTEN_FOR = ("chromadb", "1.0", "1.6")  # distribution, from, below

_client_lock = threading.Lock()  # held while an embedded client is made or closed
_clients: dict[str, list] = {}  # path string -> [its one embedded client, stores using it]


def shared(path: Path, generation: int, settings: Any) -> Any:
    """The embedded client of `path` for this generation of the store."""
    return _client(_client_path(path, generation), settings)


def _client_path(path: Path, generation: int) -> str:
    """The path string chromadb gets: generation n appends n "/." (the same folder), so each
    generation gets a client of its own in this process."""
    return os.path.join(str(path), *["."] * generation)


def _client(path: str, settings: Any) -> Any:
    """The process's one embedded client on `path`, made under a lock on first need.

    chromadb keeps one System per path string but makes and starts it unlocked: two threads
    opening the same store at once (the warm-up's search and ingest_file's writer) met a
    half-started System ("'RustBindingsAPI' object has no attribute 'bindings'"). Here every
    store of a path holds the same client, counted, and the last to close it closes it."""
    import chromadb

    with _client_lock:
        held = _clients.get(path)
        if held is None:
            held = _clients[path] = [chromadb.PersistentClient(path=path, settings=settings), 0]
        held[1] += 1
        return held[0]


def release(client: Any) -> None:
    """A store's hold on its client ends; the client closes with its last store."""
    with _client_lock:
        path = next((p for p, held in _clients.items() if held[0] is client), None)
        if path is None:  # an HTTP client: its own
            client.close()
            return
        _clients[path][1] -= 1
        if _clients[path][1] <= 0:
            del _clients[path]
            client.close()
