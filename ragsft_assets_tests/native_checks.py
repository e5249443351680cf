"""What the tests of the compiled corpus rules share: the real records, and the leak check."""

from __future__ import annotations

import functools
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from ragsft_assets.corpus.structured_wikipedia import iter_xml_dump_records

PACKAGE = Path(__file__).resolve().parents[1] / "ragsft_assets"
DATA = Path(__file__).resolve().parent / "data"


@functools.cache
def structured_records() -> tuple[dict, ...]:
    """Every record of the shipped structured-Wikipedia samples (French) and of the XML dump (English)."""
    records: list[dict] = []
    paths = [
        *sorted((PACKAGE / "sample_snapshot" / "sample.fr").glob("*.jsonl")),
        PACKAGE / "bench" / "data" / "frwiki_namespace_0_sample.jsonl",
        DATA / "frwiki_structured" / "frwiki_namespace_0_sample.jsonl",
    ]
    for path in paths:
        for line in path.read_bytes().splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:  # the sample's deliberately broken lines
                continue
            if isinstance(record, dict):
                records.append(record)
    dump = (
        DATA / "enwiki_dump_sample" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    )
    records += [r for _first, batch in iter_xml_dump_records(dump) for r in batch]
    return tuple(records)


def assert_no_leaks(run: Callable[[], None], watched: Sequence[object], max_growth: int = 20_000) -> None:
    """``run`` gives back every reference it takes to the ``watched`` objects, and calling it again and
    again does not grow the memory tracemalloc sees (call it once before, so that caches are full)."""
    refcounts = [sys.getrefcount(o) for o in watched]
    run()
    assert [sys.getrefcount(o) for o in watched] == refcounts
    tracemalloc.start()
    try:
        run()
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            run()
        growth = tracemalloc.get_traced_memory()[0] - first
    finally:
        tracemalloc.stop()
    assert growth < max_growth, growth
