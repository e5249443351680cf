"""``ragsft bench corpus``'s generator: real material, real record sizes, the enumeration rule at work."""

from __future__ import annotations

import random
from pathlib import Path

import orjson

import ragsft_assets
from ragsft_assets.bench import corpus as bench_corpus
from ragsft_assets.corpus.abstracts import AbstractsConfig
from ragsft_assets.corpus.build import build_abstracts
from ragsft_assets.corpus.link_graph import ENUMERATION, LinkGraphConfig, build_link_graph


def test_material_is_shipped_in_the_package() -> None:
    package = Path(ragsft_assets.__file__).resolve().parent
    for path in (bench_corpus.REAL_RECORDS, bench_corpus.SAMPLE_DUMP):
        assert path.is_file() and package in path.parents
    material = bench_corpus.load_material()
    assert len(material.templates) == 4 and len(material.sentences) > 300
    assert (
        sum(1 for _, anchors in material.sentences if anchors) > 100
    )  # real anchors kept with their sentence


def test_record_sizes_follow_the_real_records(tmp_path: Path) -> None:
    material = bench_corpus.load_material()
    rng = random.Random(3)
    sizes = sorted(len(orjson.dumps(bench_corpus.make_record(i, 400, rng, material))) + 1 for i in range(400))
    lo, hi = min(material.sizes), max(material.sizes)
    assert lo > 2.7 * 1024 and hi < 11.2 * 1024  # the 4 real frwiki records: 2.8-11.1 KiB
    assert lo <= sizes[0] and sizes[-1] <= hi
    assert 3 * 1024 < sizes[len(sizes) // 2] < 9 * 1024  # not piled at one end


def test_generated_sentences_reach_the_enumeration_rule(tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    bench_corpus.generate(dump, 300)
    build = build_abstracts([dump], AbstractsConfig(), workers=1)
    graph = build_link_graph(build.table, LinkGraphConfig(), workers=1)
    assert bench_corpus.enum_checked_share(build.table) > 0.05
    assert graph.funnel[ENUMERATION] > 0 and graph.funnel["kept"] > 0  # the rule fires, edges survive


def test_bench_run_prints_the_ratio_the_cpu_ratio_and_the_load(tmp_path: Path) -> None:
    """The whole bench on a few records: the closing line's values, the CPU of the pool counted."""
    values = bench_corpus.run(240, str(tmp_path))
    for key in ("ratio", "cpu_ratio", "load_avg", "record_kb_p50", "enum_checked_share", "writes_s", "cores"):
        assert key in values, key
    assert values["native"] == bench_corpus.compiled_rules()  # which implementation was timed
    assert values["bar"] == bench_corpus.BAR and values["passed"] == (values["ratio"] >= bench_corpus.BAR)
    assert 0 < values["cpu_ratio"] < 5 and values["writes_s"] > 0
    assert values["records"] == 240 and 2.5 < values["record_kb_p50"] < 11.2
