"""The warm-up: Kiwi, jieba, the embedder and Chroma loaded in a thread before the first search
needs them, started so that it never slows the handshake (tools/list) down.

Layer: surface: below server.py (which installs the middleware and hands it the lifespan's
Library), above library.py.
"""

from __future__ import annotations

import os
import threading

from fastmcp.server.middleware import Middleware

from library import Library

# ---------------------------------------------------------------------------
WARM_UP_ENV = "LINECITE_WARM_UP"  # "0": no warm-up search (at initialize; HTTP: at start)
HANDSHAKE_GRACE = 1.0  # seconds a warm-up started at initialize waits for tools/list
# ---------------------------------------------------------------------------


class WarmUp(Middleware):
    """Load what a first search needs, in a thread: in a new process that search otherwise
    waits seconds for Kiwi, jieba, the embedder and Chroma. Over stdio it starts when the host
    says `initialize` (the process is its: the spawn's imports are done, and the host asks
    soon after); the HTTP server starts it with the server (`at_start`), not at a first
    request. tools/list starts it too, for a host that never initializes. LINECITE_WARM_UP=0
    turns it off."""

    library: Library | None = None
    at_start = False  # set by server.py's main() for the HTTP transport
    started = False

    def __init__(self) -> None:
        self.listed = threading.Event()  # tools/list answered: the handshake is over

    def start(self) -> None:
        """Start the warm-up once per process (a no-op when off or already started)."""
        if self.started or self.library is None or os.environ.get(WARM_UP_ENV, "1") == "0":
            return
        self.started = True
        threading.Thread(target=self._run, args=(self.library,), name="linecite-warm-up",
                         daemon=True).start()

    def _run(self, library: Library) -> None:
        """Yield to the handshake first: on 2 cores the loads' imports, started at once,
        made tools/list ~0.5-1 s slower; a host lists the tools right after initializing."""
        self.listed.wait(0 if self.at_start else HANDSHAKE_GRACE)
        library.warm_up()

    async def on_initialize(self, context, call_next):
        self.start()
        return await call_next(context)

    async def on_discover(self, context, call_next):
        self.start()
        return await call_next(context)

    async def on_list_tools(self, context, call_next):
        self.start()
        try:
            return await call_next(context)
        finally:
            self.listed.set()
