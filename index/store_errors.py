"""What an error of SQLite on a KB's index (fulltext.sqlite3) means to the user, and what to do
about it: the one place that decides it, for the server's reads and ingests (library.py) and
ingest.py's command line.

Read or written, a file that is not a readable index (SQLITE_CORRUPT, SQLITE_NOTADB, an I/O
error, a file that cannot be opened) is damaged: rebuild the KB, or restore the file. A write
meets three other faults first, each with its own fix: a folder that cannot be written, a lock
held by another program, a full disk. Anything else (a busy database while reading, a bug) is
no fault of the file: it is raised as it is, never sending the user off to rebuild.

Layer: index: below library.py and ingest.py, above common/.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.commands import command
from common.limits import UserError


class KBDamaged(UserError):
    """A KB whose fulltext.sqlite3 cannot be read: truncated, overwritten, not SQLite."""


def is_damage(err: sqlite3.DatabaseError) -> bool:
    """True for a file that is not a readable index (SQLITE_CORRUPT, SQLITE_NOTADB, I/O);
    False for a busy database or a bug, which must not send the user off to rebuild."""
    if type(err) is sqlite3.DatabaseError:
        return True
    return isinstance(err, sqlite3.OperationalError) and any(
        words in str(err) for words in ("disk I/O error", "unable to open"))


def damaged(kb_id: str, index: Path, err: sqlite3.DatabaseError) -> KBDamaged:
    """The damage, with the two ways out."""
    return KBDamaged(f"knowledge base {kb_id!r} is damaged: {index} cannot be read ({err}); "
                     f"rebuild it from its source files with `{command('ingest', '--kb', kb_id)} "
                     "--rebuild` (the damaged file is kept aside), or restore that file from a "
                     "backup")


def write_problem(index: Path, err: sqlite3.DatabaseError) -> str | None:
    """Why a write to the index failed when the file is not at fault, with the fix; else None."""
    text = str(err)
    if "readonly" in text or "unable to open" in text:
        return (f"cannot write the index {index} ({text}); make the KB folder writable, or "
                "index into a writable folder with --base-path")
    if "locked" in text:
        return f"the index {index} is locked by another program ({text}); retry when it is done"
    if "full" in text:
        return f"the disk holding {index} is full ({text}); free some space and retry"
    return None


def user_error(kb_id: str, index: Path, err: sqlite3.DatabaseError,
               writing: bool = False) -> UserError | None:
    """What `err` on the KB's index means to the user (`writing`: met by an ingest), or None
    when it is no fault of the file the user can fix."""
    problem = write_problem(index, err) if writing else None
    if problem is not None:
        return UserError(problem)
    return damaged(kb_id, index, err) if is_damage(err) else None


@contextmanager
def explained(kb_id: str, index: Path, writing: bool = False) -> Iterator[None]:
    """SQLite's errors on the KB's index, raised inside, as the UserError that says what to do
    (user_error); any other raised as it is."""
    try:
        yield
    except sqlite3.DatabaseError as err:
        problem = user_error(kb_id, index, err, writing)
        if problem is None:
            raise
        raise problem from None
