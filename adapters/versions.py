"""Which installed version of a dependency an adapter was written for, asked without importing it.

Each adapter module names the range of versions it was read against (`WRITTEN_FOR`); the test
suite asks `problem()` for every adapter, so an upgrade that leaves a range fails one test
with a plain sentence instead of breaking a private name silently at run time.

Layer: ground (imports nothing of ours).
"""

from __future__ import annotations

import re
from importlib import metadata


def _numbers(version: str) -> tuple[int, ...]:
    """"4.2.3" -> (4, 2, 3); pre-release and local parts are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:4])


def problem(distribution: str, low: str, below: str, installed: str | None = None) -> str | None:
    """None when `distribution` is installed at a version in [low, below); else one sentence
    naming the version found, the range, and what to do."""
    if installed is None:
        try:
            installed = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return f"{distribution} is not installed; install requirements.txt with constraints.txt"
    if _numbers(low) <= _numbers(installed) < _numbers(below):
        return None
    return (f"{distribution} {installed} is installed, but linecite's adapter for its internals "
            f"was written for {low} up to (not including) {below}; install the version in "
            "constraints.txt, or check the adapter against the new version and widen its range")
