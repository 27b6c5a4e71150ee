"""Derived-state files (:func:`wrenmem.fs.fsutil.read_marshal`): what was written is read back,
and anything missing, short, damaged or foreign reads as None (the caller rebuilds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wrenmem.fs.fsutil import read_marshal, write_marshal

DATA = {"v": 1, "postings": {"term": (b"\x01\x00\x00\x00", b"\x00" * 8)},
        "rows": [("a", 1.5, None, ["x"])], "blob": b"\xff" * 100_000}


def test_what_was_written_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state.bin"
    assert write_marshal(path, DATA)
    assert read_marshal(path) == DATA
    assert write_marshal(path, {"v": 2})  # replaced by a rename: the new content
    assert read_marshal(path) == {"v": 2}


@pytest.mark.parametrize("damage", ["empty", "short", "magic", "flipped", "truncated",
                                    "not marshal", "folder", "missing"])
def test_a_damaged_or_foreign_file_reads_as_none(tmp_path: Path, damage: str) -> None:
    import zlib

    path = tmp_path / "state.bin"
    assert write_marshal(path, DATA)
    raw = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "short":
        path.write_bytes(raw[:10])
    elif damage == "magic":
        path.write_bytes(b"wrenmem0" + raw[8:])
    elif damage == "flipped":
        at = len(raw) // 2
        path.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:])
    elif damage == "truncated":
        path.write_bytes(raw[:-1000])
    elif damage == "not marshal":  # a valid checksum over bytes marshal cannot decode
        payload = b"\x00not marshal"
        path.write_bytes(raw[:8] + zlib.crc32(payload).to_bytes(4, "big") + payload)
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    else:
        path.unlink()
    assert read_marshal(path) is None
