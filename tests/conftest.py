"""Shared fixtures: where ../shared is, and a skip for tests that need it."""

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the calling test when that material is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs ../shared/{'/'.join(parts)} (the team's test corpus), absent here")
    return path
