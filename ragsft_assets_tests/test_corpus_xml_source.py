"""The corpus assets build from an official MediaWiki XML dump dropped into a snapshot folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc

from ragsft_assets.corpus.structured_wikipedia import dump_files
from ragsft_assets.defs.corpus import defs as corpus_defs
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore

DUMP = (
    Path(__file__).resolve().parent
    / "data/enwiki_dump_sample/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)
KEY = "20160607.en"


def test_xml_dump_snapshot_builds_abstracts_and_graph(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots" / KEY
    folder.mkdir(parents=True)
    shutil.copy(DUMP, folder / "enwiki-20160607-pages-articles1.xml.bz2")
    assert [p.name for p in dump_files(folder)] == ["enwiki-20160607-pages-articles1.xml.bz2"]

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [KEY])
    store = ArtifactStore(home=str(tmp_path))
    result = dg.materialize(
        list(corpus_defs.assets),
        resources={"store": store, "snapshots": SnapshotSource(home=str(tmp_path))},
        partition_key=KEY,
        instance=instance,
        # Leads of this old dump are short: keep two-sentence leads of 150+ characters.
        run_config={"ops": {"abstracts": {"config": {"min_chars": 150, "split_shares": [1.0, 0.0, 0.0]}}}},
        selection=["abstracts", "link_graph"],
    )
    assert result.success
    abstracts = store.read(KEY, "abstracts")
    # 106 articles in the dump, 1 without a lead; short leads and list pages are filtered.
    assert 60 <= abstracts.num_rows <= 105
    titles = set(abstracts["title"].to_pylist())
    assert "Anarchism" in titles
    assert all(u.startswith("https://en.wikipedia.org/wiki/") for u in abstracts["url"].to_pylist())
    graph = store.read(KEY, "link_graph")
    assert graph.num_rows > 0
    # Every edge stays inside the corpus (the dump's links resolve through its redirects).
    assert set(graph["target_title"].to_pylist()) <= titles
    assert pc.all(pc.equal(graph["split"], "train")).as_py()
