"""The out-of-core corpus build (issue 36) writes the bytes the in-memory build wrote.

The SHA-256s below are those of the files the stage wrote before it went out of core (code at
6357fd4: ``build_abstracts`` + ``storage.write_split_asset`` + ``build_link_graph`` +
``storage.write_asset``, and the two ledgers), on the sample snapshot and on a 2,000-record
``ragsft bench corpus`` dump. Both paths must still give them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets import storage
from ragsft_assets.bench import corpus as bench_corpus
from ragsft_assets.corpus import build as build_module
from ragsft_assets.corpus import spill
from ragsft_assets.corpus.abstracts import AbstractsConfig
from ragsft_assets.corpus.build import build_abstracts
from ragsft_assets.corpus.ledgers import abstracts_ledger, link_graph_ledger
from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph, build_link_graph_files
from ragsft_assets.ledger import write_ledger
from ragsft_assets_tests.corpus_fixtures import SAMPLE_DIR, interlinked_records, write_jsonl

SAMPLE_SHA256 = {
    "abstracts/train": "ec3981ab9097bbb0b2ddc71cfc9fba549effab8e5d3f6191471dcec3307d3e80",
    "abstracts/validation": "9dad2b672cb8972abd1925d4949a62f7dc13bdc094f5bd7e37a86bc26bd2e800",
    "abstracts/test": "9cf8d4f6e2dd6c5d1ba144fc9bff41bca49af89bfb14dc7a110c5c802d4d5fc9",
    "link_graph": "d9a569095dd42ef70760c566612364d2766d18d4b4ea58faaae8d87af0f2cca6",
    "ledger/abstracts": "e6dad7789dab535905a3eaf3a25bd12dd9f71ea3feb6734ae51e646c3eb5a9bd",
    "ledger/link_graph": "c86c556221791243c80e5e3230d6fc029c76d0baa1a46a94e3f030842d3bc1e7",
}
BENCH_2000_SHA256 = {
    "abstracts/train": "009d7147edc6a6be38fea5ee0340cdaff29c92d160148bd26833e089aee8f3b4",
    "abstracts/validation": "970b9e41807a3c4a9a8946c9324565858fc6e429ec8595191ccb70cdd8c2fba9",
    "abstracts/test": "a45b6d2dc070dc1eac88acf298adfe7bf257667a128d10a5e2c28b6a0aa0b437",
    "link_graph": "63ad9c579a41693071f294cc787bb7d3cb38ee335e2add92798aaf1b662f615a",
    "ledger/abstracts": "831a85917bb4a039b9adbde7610c74e8463d519e842ea3cee922817430c1be30",
    "ledger/link_graph": "6b59783c2a9b4cdd7e667421e3d89311ec66ebcb77899d00b19986d95c22e01b",
}
BENCH_2000_DUMP_SHA256 = "5d1015faf255fed3d58253bb4b933b4199715df22eb1fba3e0970150e261d002"
PRODUCT = "ragsft"  # the product name the recorded ledgers were written with


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _out_of_core(dump: Path, root: Path, workers: int = 1, cfg: LinkGraphConfig | None = None):
    paths = {s: storage.asset_path("p", "abstracts", s, root) for s in storage.SPLITS}
    build = build_abstracts([dump], AbstractsConfig(), workers=workers, tmp_dir=str(root), out_paths=paths)
    graph_path = storage.asset_path("p", "link_graph", storage.ALL, root)
    graph = build_link_graph_files(
        [paths[s] for s in storage.SPLITS], cfg or LinkGraphConfig(), graph_path, workers=workers
    )
    files = {f"abstracts/{s}": p for s, p in paths.items()}
    files["link_graph"] = graph_path
    files["ledger/abstracts"] = write_ledger(
        abstracts_ledger("p", PRODUCT, build.table, build.rejected), "p", "abstracts", root
    )
    files["ledger/link_graph"] = write_ledger(
        link_graph_ledger("p", PRODUCT, graph.table, graph.dropped), "p", "link_graph", root
    )
    return build, graph, files


def _in_memory(dump: Path, root: Path, cfg: LinkGraphConfig | None = None):
    build = build_abstracts([dump], AbstractsConfig())
    graph = build_link_graph(build.table, cfg or LinkGraphConfig())
    files = {
        f"abstracts/{s}": p
        for s, p in storage.write_split_asset(build.table, "p", "abstracts", root=root).items()
    }
    files["link_graph"] = storage.write_asset(graph.table, "p", "link_graph", storage.ALL, root)
    files["ledger/abstracts"] = write_ledger(
        abstracts_ledger("p", PRODUCT, build.table, build.rejected), "p", "abstracts", root
    )
    files["ledger/link_graph"] = write_ledger(
        link_graph_ledger("p", PRODUCT, graph.table, graph.dropped), "p", "link_graph", root
    )
    return build, graph, files


def test_sample_snapshot_gives_the_recorded_bytes_both_ways(tmp_path: Path) -> None:
    dump = SAMPLE_DIR / "frwiki_namespace_0_0.jsonl"
    _, _, files = _out_of_core(dump, tmp_path / "ooc")
    assert {k: _sha(p) for k, p in files.items()} == SAMPLE_SHA256
    _, _, files = _in_memory(dump, tmp_path / "mem")
    assert {k: _sha(p) for k, p in files.items()} == SAMPLE_SHA256


def test_bench_dump_gives_the_recorded_bytes_on_two_workers(tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    bench_corpus.generate(dump, 2000)
    assert _sha(dump) == BENCH_2000_DUMP_SHA256  # the generator itself did not change
    _, _, files = _out_of_core(dump, tmp_path / "ooc", workers=2)
    assert {k: _sha(p) for k, p in files.items()} == BENCH_2000_SHA256


@pytest.mark.parametrize(
    "cfg",
    [
        LinkGraphConfig(in_degree_cap=3, bridge_top_k=5),
        LinkGraphConfig(bridge_titles=("Ville003", "Ville010")),
    ],
)
def test_small_row_groups_hold_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfg: LinkGraphConfig
) -> None:
    """Files larger than a row group: more row groups, the same rows; the cap and bridges decided the
    same way over every row group (the in-degree cap is global)."""
    dump = write_jsonl(tmp_path / "d.jsonl", interlinked_records(60))
    mem_build, mem_graph, mem_files = _in_memory(dump, tmp_path / "mem", cfg)
    monkeypatch.setattr(build_module, "ROW_GROUP_ROWS", 7)
    monkeypatch.setattr(spill, "ROW_GROUP_ROWS", 5)
    build, graph, files = _out_of_core(dump, tmp_path / "ooc", cfg=cfg)
    assert pq.ParquetFile(files["abstracts/train"]).metadata.num_row_groups > 3
    assert pq.ParquetFile(files["link_graph"]).metadata.num_row_groups > 3
    assert graph.funnel == mem_graph.funnel
    assert graph.funnel["in_degree_cap"] > 0 or cfg.bridge_titles
    assert graph.dropped == mem_graph.dropped
    assert graph.bridge_ids == mem_graph.bridge_ids
    assert build.funnel == mem_build.funnel and build.rejected == mem_build.rejected
    for key in files:
        assert pq.read_table(files[key]).equals(pq.read_table(mem_files[key])), key


def test_gather_takes_rows_across_mapped_files(tmp_path: Path) -> None:
    import pyarrow.ipc as ipc

    schema = pa.schema([("n", pa.int64()), ("s", pa.string())])
    paths = []
    for k in range(3):
        path = tmp_path / f"{k}.arrow"
        with ipc.new_file(str(path), schema) as writer:
            for b in range(2):  # two record batches per file
                base = k * 100 + b * 10
                writer.write_table(
                    pa.table({"n": range(base, base + 4), "s": [f"r{base + i}" for i in range(4)]})
                )
        paths.append(str(path))
    mapped = spill.MappedArrow(paths, schema)
    whole = mapped.table.combine_chunks()
    rows = np.array([23, 0, 5, 17, 4, 4, 11, 8])
    got = mapped.gather(rows)
    mapped.drop_pages()  # the table stays readable after its pages are given back
    assert got.equals(whole.take(pa.array(rows)))
    assert got.column("s").num_chunks == 1
    assert mapped.gather(np.zeros(0, np.int64), ["s"]).num_rows == 0


_PEAK_SCRIPT = """
import sys, tempfile
from pathlib import Path
import pyarrow as pa
from ragsft_assets import storage
from ragsft_assets.bench import corpus as bench_corpus
from ragsft_assets.corpus import build as B, spill
from ragsft_assets.corpus.abstracts import AbstractsConfig
from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph, build_link_graph_files
n, mode, d = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
B.ROW_GROUP_ROWS = spill.ROW_GROUP_ROWS = 256
bench_corpus.generate(d / "d.jsonl", n)
out = {s: storage.asset_path("p", "abstracts", s, d) for s in storage.SPLITS}
if mode == "out_of_core":
    B.build_abstracts([d / "d.jsonl"], AbstractsConfig(), chunk_bytes=1 << 20, out_paths=out, tmp_dir=str(d))
    build_link_graph_files([out[s] for s in storage.SPLITS], LinkGraphConfig(), d / "g.parquet", tmp_dir=str(d))
else:
    b = B.build_abstracts([d / "d.jsonl"], AbstractsConfig(), chunk_bytes=1 << 20, tmp_dir=str(d))
    build_link_graph(b.table, LinkGraphConfig())
print(pa.default_memory_pool().max_memory())
"""


def _arrow_peak(n: int, mode: str, tmp_path: Path) -> int:
    """Arrow's peak allocation for a build of ``n`` bench records, in a fresh process."""
    import subprocess
    import sys

    folder = tmp_path / f"{mode}-{n}"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(n), mode, str(folder)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


def test_arrow_memory_stays_nearly_flat_out_of_core(tmp_path: Path) -> None:
    """Issue 36: four times the records, with row groups of 256 rows: the out-of-core build's Arrow
    peak grows well under 2x (ids and row numbers only), the in-memory build's about 4x (the tables)."""
    small, large = _arrow_peak(1500, "out_of_core", tmp_path), _arrow_peak(6000, "out_of_core", tmp_path)
    assert large < 2 * small, (small, large)
    small, large = _arrow_peak(1500, "in_memory", tmp_path), _arrow_peak(6000, "in_memory", tmp_path)
    assert large > 3 * small, (small, large)  # what the measure sees when the tables are held
