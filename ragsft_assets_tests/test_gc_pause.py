"""paused_gc: the collector is off inside the block and back as it was after, errors included."""

from __future__ import annotations

import gc
from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets.gc_pause import paused_gc


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_restored_after(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with paused_gc():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError), paused_gc():
            raise KeyError("x")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_the_link_graph_checks_its_edges_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the compiled rule the (sentence, alias) pairs are one tuple per edge: no collection may walk
    the process meanwhile."""
    from ragsft_assets.corpus import link_graph as G
    from ragsft_assets_tests.test_corpus_link_graph import _abstracts

    seen = []
    real = G._enumeration_flags
    monkeypatch.setattr(G, "_enumeration_flags", lambda *args: seen.append(gc.isenabled()) or real(*args))
    rows = [("A", "train", [("B", 0)]), ("B", "train", [])]
    table = _abstracts(rows, {"A": ["Il a peint B, C et D."]})
    assert isinstance(table, pa.Table)
    G.build_link_graph(table, G.LinkGraphConfig())
    assert seen == [False] and gc.isenabled()


def test_the_abstracts_build_and_the_ledgers_run_with_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build gathers a tuple per rejected record and the ledgers a JSON detail per dropped row."""
    from ragsft_assets.corpus import build as B
    from ragsft_assets.corpus import ledgers as LG
    from ragsft_assets.corpus.abstracts import AbstractsConfig
    from ragsft_assets_tests.corpus_fixtures import interlinked_records, write_jsonl

    seen: list[tuple[str, bool]] = []
    real_merge, real_details = B.merge_chunks, LG._details
    monkeypatch.setattr(
        B, "merge_chunks", lambda paths: seen.append(("merge", gc.isenabled())) or real_merge(paths)
    )
    monkeypatch.setattr(
        LG, "_details", lambda k, v: seen.append(("ledger", gc.isenabled())) or real_details(k, v)
    )
    build = B.build_abstracts([write_jsonl(tmp_path / "d.jsonl", interlinked_records(20))], AbstractsConfig())
    LG.abstracts_ledger("p", "x", build.table, [("i", "too_short", "T")])
    assert seen == [("merge", False), ("ledger", False)] and gc.isenabled()
