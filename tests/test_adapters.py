"""Each adapter of a dependency's internals states the versions it was written for; an installed
version outside that range fails here with a plain sentence (issue 46), not at run time."""

from __future__ import annotations

import pytest

from adapters import chroma_clients, mcp_internals, pdfminer_layout, versions

RANGES = [chroma_clients.WRITTEN_FOR, pdfminer_layout.WRITTEN_FOR, *mcp_internals.WRITTEN_FOR]


@pytest.mark.parametrize("written_for", RANGES, ids=[r[0] for r in RANGES])
def test_the_installed_version_is_one_the_adapter_was_written_for(written_for):
    assert versions.problem(*written_for) is None


def test_a_version_outside_the_range_is_named_with_what_to_do():
    message = versions.problem("chromadb", "1.0", "1.6", installed="1.6.0")
    assert message == ("chromadb 1.6.0 is installed, but linecite's adapter for its internals was "
                       "written for 1.0 up to (not including) 1.6; install the version in "
                       "constraints.txt, or check the adapter against the new version and widen "
                       "its range")
    assert versions.problem("chromadb", "1.0", "1.6", installed="0.6.3") is not None
    assert versions.problem("pdfminer.six", "20231228", "20270101", installed="20260107") is None


def test_a_missing_distribution_says_how_to_install_it():
    assert "is not installed" in versions.problem("no-such-dist-linecite", "1", "2")
