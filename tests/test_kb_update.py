"""kb.update, the one way the web page changes a KB's config.json: a valid change is written
(atomically, unknown fields kept), an invalid one refused with kb.py's message and the file
untouched, and changes from two writers at once both kept (follow, from ingest.py --follow,
takes the same lock).
"""

from __future__ import annotations

import json
import threading

import pytest

import kb as kbmod


@pytest.fixture
def base(tmp_path):
    kbmod.open_or_create(tmp_path, "notes")
    config = tmp_path / "notes" / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["note for people"] = "kept as written"  # a field kb.py does not know
    config.write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def read_config(base) -> dict:
    return json.loads((base / "notes" / "config.json").read_text(encoding="utf-8"))


def test_a_valid_change_is_written_and_other_fields_kept(base):
    def change(data: dict) -> None:
        data["search"] = {"fusion": "rrf"}

    kb = kbmod.update(base, "notes", change)
    assert kbmod.search_settings(kb).fusion == "rrf"
    data = read_config(base)
    assert data["search"] == {"fusion": "rrf"} and data["note for people"] == "kept as written"
    assert kbmod.search_settings(kbmod.load(base, "notes")).fusion == "rrf"


@pytest.mark.parametrize("block, field", [
    ({"search": {"fusion": "average"}}, "search.fusion"),
    ({"embedding": {"provider": "openai"}}, "embedding"),
    ({"search": {"fusion": "rrf", "colour": "blue"}}, "search.colour"),
])
def test_an_invalid_change_is_refused_with_the_field_and_the_file_unchanged(base, block, field):
    config = base / "notes" / "config.json"
    before = config.read_bytes()
    with pytest.raises(kbmod.ConfigError, match=field.replace(".", r"\.")):
        kbmod.update(base, "notes", lambda data: data.update(block))
    assert config.read_bytes() == before
    assert not list(config.parent.glob("*.tmp*"))  # no half-written file left beside it


def test_two_writers_at_once_both_keep_their_changes(base, tmp_path):
    folders = [tmp_path / "docs" / f"f{i:02d}" for i in range(40)]
    for folder in folders:
        folder.mkdir(parents=True)
    kb = kbmod.load(base, "notes")

    def add_by_update(mine: list) -> None:
        for folder in mine:
            kbmod.update(base, "notes", lambda data, f=folder: data.update(
                sourcePaths=[*(data.get("sourcePaths") or []), str(f)]))

    def add_by_follow(mine: list) -> None:
        for folder in mine:
            kbmod.follow(kb, folder)

    writers = [threading.Thread(target=add_by_update, args=(folders[:20],)),
               threading.Thread(target=add_by_follow, args=(folders[20:],))]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert sorted(read_config(base)["sourcePaths"]) == sorted(str(f.resolve()) for f in folders)
