"""A truncated or corrupt ``.jsonl.gz`` fails with the file's name and what to do, never a bare EOFError."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from ragsft_assets.corpus.structured_wikipedia import CorruptDumpError, iter_line_chunks


def _gz(path: Path, n: int) -> bytes:
    data = gzip.compress(
        b"".join(b'{"name": "T%d", "abstract": "x"}\n' % i for i in range(n)), compresslevel=6
    )
    path.write_bytes(data)
    return data


def test_whole_gz_reads_every_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl.gz"
    _gz(path, 50)
    assert sum(len(lines) for _, lines in iter_line_chunks(path, chunk_lines=7)) == 50


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_gz_names_the_file_and_what_to_do(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "part-00001.jsonl.gz"
    data = _gz(path, 5000)
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:])
    with pytest.raises(CorruptDumpError) as info:
        for _ in iter_line_chunks(path):
            pass
    message = str(info.value)
    assert "part-00001.jsonl.gz" in message
    assert "export it again" in message
    assert not isinstance(info.value, EOFError)
