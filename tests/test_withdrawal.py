"""A withdrawal's files without Spark, on a local lake: its note records the landed file's size and SHA-256 and a
resumed withdrawal moves only those bytes; nothing is moved over another file; a note that does not parse is named
and holds back no other withdrawal; two writers of one note never share a temporary file. (A withdrawal end to end:
tests/test_landing_contract.py; on object storage: tests/test_object_store.py.)"""

import json
import threading
from datetime import date
from pathlib import Path

import pytest

from exact_backfills.operations import (
    NOTE_SUFFIX,
    WITHDRAWING,
    WITHDRAWN,
    WithdrawalNote,
    begin_withdrawal,
    move_withdrawn,
    notes_of,
)
from resources import storage
from resources.lake import landing_path, withdrawn_path
from tests.support.orders import ORDER_ITEMS

BATCH = "ingest_date=2025-01-05"
DAYS = [date(2025, 1, 4), date(2025, 1, 5)]


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    return tmp_path


def land(name: str, data: bytes) -> tuple[str, str]:
    """A file landed in the batch: its path relative to the source's folder, and its lake path."""
    rel = f"{BATCH}/{name}"
    path = Path(landing_path(ORDER_ITEMS.name)) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return rel, str(path)


def begun(rel: str, landed: str) -> WithdrawalNote:
    """A withdrawal of the landed file begun as `withdraw` begins one: its note written, nothing moved yet."""
    return begin_withdrawal(ORDER_ITEMS, rel, "sent twice", DAYS, storage.digest(landed))


def test_a_resumed_withdrawal_whose_landed_file_was_replaced_refuses_naming_it_and_moves_nothing(lake):
    rel, landed = land("items.parquet", b"the bad file")
    note = begun(rel, landed)
    recorded = json.loads(Path(note.path).read_text())
    assert (recorded["status"], recorded["size"]) == (WITHDRAWING, len(b"the bad file"))
    # Between the note and the move, the producer lands other bytes under the same name.
    Path(landed).write_bytes(b"a good file, landed again")
    with pytest.raises(ValueError) as refused:
        move_withdrawn(note, landed)
    said = str(refused.value)
    assert "\n" not in said and landed in said
    assert "25 bytes" in said and f"{len(b'the bad file')} bytes" in said and recorded["sha256"] in said
    assert Path(landed).read_bytes() == b"a good file, landed again" and not Path(note.moved_to).exists()
    assert WithdrawalNote.read(note.path).status == WITHDRAWING
    # The bytes the note recorded back in place, the same withdrawal goes on.
    Path(landed).write_bytes(b"the bad file")
    assert move_withdrawn(note, landed).status == WITHDRAWN
    assert Path(note.moved_to).read_bytes() == b"the bad file" and not Path(landed).exists()
    assert WithdrawalNote.read(note.path).status == WITHDRAWN


def test_a_withdrawal_never_moves_a_file_over_another(lake):
    rel, landed = land("items.parquet", b"the bad file")
    note = begun(rel, landed)
    Path(note.moved_to).write_bytes(b"someone else's file")
    with pytest.raises(FileExistsError):
        storage.move(landed, note.moved_to)
    with pytest.raises(ValueError) as refused:
        move_withdrawn(note, landed)
    assert "\n" not in str(refused.value) and note.moved_to in str(refused.value)
    assert Path(note.moved_to).read_bytes() == b"someone else's file"
    assert Path(landed).read_bytes() == b"the bad file"
    # The same bytes at both places (a move cut short after its link or copy): it is finished, not redone.
    Path(note.moved_to).write_bytes(b"the bad file")
    assert move_withdrawn(note, landed).status == WITHDRAWN
    assert Path(note.moved_to).read_bytes() == b"the bad file" and not Path(landed).exists()


def test_a_torn_note_is_named_and_holds_back_no_other_withdrawal_in_its_folder(lake):
    rel, landed = land("items.parquet", b"landed again after a withdrawal")
    folder = Path(withdrawn_path(ORDER_ITEMS.name)) / BATCH
    folder.mkdir(parents=True)
    # An earlier withdrawal of a file of the same name, whose note was cut short, and an empty note of another file.
    (folder / "items.parquet").write_bytes(b"withdrawn earlier")
    cut = folder / f"items.parquet{NOTE_SUFFIX}"
    cut.write_text('{"file": "ingest_date=2025-01-05/items.parquet", "sour')
    empty = folder / f"other.parquet{NOTE_SUFFIX}"
    empty.write_bytes(b"")
    said: list[str] = []
    assert notes_of(ORDER_ITEMS, rel, said.append) == []
    assert len(said) == 2
    assert [line for line in said if str(cut) in line] and [line for line in said if str(empty) in line]
    assert all("\n" not in line and "does not parse" in line for line in said)
    note = begun(rel, landed)
    assert note.moved_to == str(folder / "items.parquet.1")
    assert move_withdrawn(note, landed).status == WITHDRAWN
    assert [n.path for n in notes_of(ORDER_ITEMS, rel, said.append)] == [note.path]
    assert cut.read_text().endswith('"sour') and (folder / "items.parquet").read_bytes() == b"withdrawn earlier"


def test_two_writers_of_one_note_never_share_a_temporary_file(lake):
    note = Path(withdrawn_path(ORDER_ITEMS.name)) / BATCH / f"items.parquet{NOTE_SUFFIX}"
    written = [json.dumps({"writer": w, "pad": "x" * 200_000}).encode() for w in range(4)]
    failures: list[Exception] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(25):
                storage.write_bytes(str(note), data)
        except Exception as error:  # a writer's failure is what the test looks for
            failures.append(error)

    writers = [threading.Thread(target=write, args=(data,)) for data in written]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert failures == []
    assert note.read_bytes() in written
    assert sorted(p.name for p in note.parent.iterdir()) == [note.name]  # no temporary file left
    # A note created only where none is: of two writers at once, one creates it, the other is told.
    new = str(note.parent / f"new{NOTE_SUFFIX}")
    created: list[bytes] = []

    def create(data: bytes) -> None:
        try:
            storage.create_bytes(new, data)
            created.append(data)
        except FileExistsError:
            pass

    creators = [threading.Thread(target=create, args=(data,)) for data in written]
    for c in creators:
        c.start()
    for c in creators:
        c.join()
    assert len(created) == 1 and Path(new).read_bytes() == created[0]
