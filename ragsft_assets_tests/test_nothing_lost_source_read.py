"""Issue 34: a source that is not UTF-8 fails naming its file, and a JSON-lines source is streamed.

A 205 MB JSON-lines source used to peak at 1.18 GB in ``ragsft sources add`` (read whole, then
split into lines, then every mapped row held). ``read_records`` now reads a line at a time and
``scan_source`` (what ``sources add`` validates with) keeps only each id and its split.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.sources.read import PRESETS, read_source, scan_source
from ragsft_assets.sources.records import SourceError, read_records

DATA = Path(__file__).parent / "data" / "hotpotqa" / "hotpotqa_train_distractor_70.json"
RECORDS = json.loads(DATA.read_text(encoding="utf-8"))


def _latin1_lines(path: Path) -> Path:
    """Two records, the second's question in Latin-1 ("Où ...": byte 0xf9), as an editor might save it."""
    good = json.dumps(RECORDS[0]).encode()
    bad = json.dumps(RECORDS[1]).encode().replace(b'"question": "', b'"question": "O\xf9 ', 1)
    path.write_bytes(good + b"\n" + bad + b"\n")
    return path


@pytest.mark.parametrize("name", ["questions.jsonl", "questions.json", "questions.jsonl.gz"])
def test_a_source_that_is_not_utf8_fails_naming_the_file_and_line(tmp_path: Path, name: str) -> None:
    path = _latin1_lines(tmp_path / name)
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(SourceError) as failed:
        list(read_records(path))
    assert str(failed.value).startswith(f"{path}, line 2: not UTF-8 text (byte 0xf9")
    assert "convert the file to UTF-8" in str(failed.value)


def test_a_json_array_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "array.json"
    body = json.dumps(RECORDS[:2], indent=1).encode()
    path.write_bytes(body.replace(b'"question"', '"questión"'.encode("latin-1"), 1))
    with pytest.raises(SourceError, match=rf"^{path}, line \d+: not UTF-8 text"):
        list(read_records(path))


def test_sources_add_of_a_latin1_file_names_it(tmp_home: Path, tmp_path: Path) -> None:
    path = _latin1_lines(tmp_path / "latin1.jsonl")
    out = CliRunner().invoke(main, ["sources", "add", "hotpotqa.en", "--from", str(path)])
    assert out.exit_code == 1 and f"{path}, line 2: not UTF-8 text" in out.output, out.output
    assert "Traceback" not in out.output and not (tmp_home / "sources" / "hotpotqa.en").exists()


def test_a_truncated_gzip_source_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "shard-00000.jsonl.gz"
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS))
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=rf"^{path}: cannot be read to its end"):
        list(read_records(path))


def test_scan_agrees_with_the_full_read(tmp_path: Path) -> None:
    lines = tmp_path / "hotpot.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in [*RECORDS, RECORDS[0]]), encoding="utf-8")
    for path in (DATA, lines):
        read, scan = read_source(path, PRESETS["hotpotqa"]), scan_source(path, PRESETS["hotpotqa"])
        assert (scan.num_rows, scan.files, scan.rows_per_file) == (
            read.num_rows,
            read.files,
            read.rows_per_file,
        )
    assert scan_source(lines, PRESETS["hotpotqa"]).rows_per_file == {"hotpot.jsonl": 71}  # 70 unique


# Peak Python allocations while `sources add` validates a generated JSON-lines source, in a fresh
# interpreter. Reading whole held the text, its lines and every mapped row: several times the file.
_MEASURE = """
import sys, tracemalloc
from pathlib import Path
from ragsft_assets.sources.read import PRESETS, scan_source
tracemalloc.start()
scan = scan_source(Path(sys.argv[1]), PRESETS["hotpotqa"])
print(scan.num_rows, tracemalloc.get_traced_memory()[1])
"""


def test_a_large_json_lines_source_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        while fh.tell() < 40 << 20:  # 40 MB
            for r in RECORDS:
                fh.write(json.dumps({**r, "_id": f"{r['_id']}-{n}"}) + "\n")
                n += 1
    size = path.stat().st_size
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True, timeout=300
    )
    rows, peak = map(int, out.stdout.split())
    assert rows == n
    # ids and splits of ~10k records plus one line at a time: far below the file's own size
    assert peak < size // 4, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB source"
