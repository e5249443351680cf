"""paused_gc: the collector is off inside the block and back as it was after, errors included."""

from __future__ import annotations

import gc

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
