"""``ragsft bench release`` at a small size, and the SQL that replaced the release's Python rows.

The release path computes card statistics, lineage and manifest digests in DuckDB; these tests
hold each SQL definition to the Python one it replaced (``str.split``/``str.strip`` whitespace,
``ids`` hashing, ``statistics`` medians) on inputs where they could differ.
"""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets import ids
from ragsft_assets.bench import release as bench_release
from ragsft_assets.cli.bench import format_line
from ragsft_assets.release import card, lineage

TRICKY = [
    "",
    "un",
    "  deux  mots ",
    "a\xa0b",  # no-break space (French typography: before ':' and '?')
    "a\u202fb\u2009c",  # narrow no-break and thin spaces
    "x\x1cy\x1dz\x1ew\x1fv",  # separators Python's split() splits on
    "tab\tnew\nline\r\nfeed\x0bvt\x0cff",
    "\u3000ideographic\u3000space\x85next",
    "zero\u200bwidth",  # not whitespace for Python: one word
    "\u00e9t\u00e9 \u2014 \u00ab citation \u00bb",
]


def test_words_sql_counts_what_str_split_counts() -> None:
    con = duckdb.connect()
    try:
        for text in [*TRICKY, None]:
            got = con.execute(f"SELECT {card._words_sql('$t')}", {"t": text}).fetchall()[0][0]
            assert got == len((text or "").split()), repr(text)
    finally:
        con.close()


def test_filename_titles_are_stripped_as_str_strip_does() -> None:
    con = duckdb.connect()
    try:
        for pad in ["", " ", "\xa0", "\u202f\t", "\x1f", " \u3000 "]:
            title = "Le Titre\xa0d'un article"
            prompt = f"intro\n* filename: {pad}{title}{pad}\n\ntext\n* filename: Autre{pad}"
            expected = [t.strip() for t in lineage.FILENAME_RE.findall(prompt)]
            sql = (
                f"SELECT list_transform(regexp_extract_all($p, '{lineage.FILENAME_SQL}', 1), "
                f"lambda t: trim(t, {lineage.whitespace_chars_sql()}))"
            )
            assert con.execute(sql, {"p": prompt}).fetchall()[0][0] == expected, repr(pad)
    finally:
        con.close()


def test_id_sql_is_the_python_id() -> None:
    con = duckdb.connect()
    try:
        row = con.execute(
            f"SELECT {lineage.doc_id_sql('$t')}, {lineage.derived_id_sql(chr(39) + 'question' + chr(39), '$a', '$b', '3')}, "
            f"{lineage.derived_id_sql(chr(39) + 'bridge_pair' + chr(39), '$a', 'NULL')}",
            {"t": "Île-de-France", "a": "ab" * 12, "b": "cd" * 12},
        ).fetchall()[0]
    finally:
        con.close()
    assert row[0] == ids.doc_id("Île-de-France")
    assert row[1] == ids.question_id("ab" * 12, "cd" * 12, 3)
    assert row[2] == ids.derived_id("bridge_pair", "ab" * 12, None)  # str(None), as Python joins it


@pytest.mark.parametrize("values", [[3], [1, 2], [5, 1, 4, 4], list(range(11)), [7] * 9 + [100]])
def test_summary_matches_statistics(values: list[int]) -> None:
    s = sorted(values)
    expected = (
        round(statistics.median(s), 1),
        round(statistics.fmean(s), 1),
        s[min(len(s) - 1, int(0.9 * len(s)))],
        s[-1],
    )
    got = card._summary(values)
    assert got == expected and [type(x) for x in got] == [type(x) for x in expected]
    assert [str(x) for x in got] == [str(x) for x in expected]  # "5" stays "5", "5.0" stays "5.0"


def test_config_stats_counts_words_of_real_typography(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    texts = [t for t in TRICKY if t] * 3
    pq.write_table(
        pa.table(
            {
                "id": [str(i) for i in range(len(texts))],
                "text": texts,
                "sentences": [[t] * (i % 4) for i, t in enumerate(texts)],
            }
        ),
        path,
    )
    rows, series = card.config_stats("corpus", [path])
    words = [len(t.split()) for t in texts]
    assert list(series["abstract words"]) == words
    assert rows[0] == ("words per abstract", *card._summary(words))
    assert rows[2] == ("links per abstract", 0, 0.0, 0, 0)  # no links column: none


def test_bench_release_small(tmp_path: Path) -> None:
    """The whole bench at 3,000 abstracts: release verifies, lineage complete, RSS measured, line parses."""
    values = bench_release.run(size=3000, workdir=str(tmp_path / "home"))
    assert values["passed"] is True, values
    assert values["rows_corpus"] == 3000 and values["rows_default"] == values["questions"] == 375
    assert values["decisions"] == 2 * 375 and values["cache_entries"] == 6 * 375
    assert 50 < values["peak_rss_mb"] < bench_release.RSS_BAR_MB
    line = format_line("release", values)
    assert line.startswith("bench=release abstracts=3000 ") and " passed=true " in line
    assert line.split()[-1].startswith("versions=") and "cores=" in line
    # The bar can fail: a tighter one, a release that does not verify, a missing lineage row.
    assert not bench_release.verdict(values, rss_bar_mb=values["peak_rss_mb"] - 1)
    assert not bench_release.verdict({**values, "verify": False})
    assert not bench_release.verdict({**values, "lineage_complete": False})
    folder = tmp_path / "home" / "releases" / bench_release.PARTITION
    lin = pq.read_table(folder / "provenance" / "default" / "lineage.parquet").to_pylist()
    assert {r["resolution"] for r in lin} == {"question_drafts"}
    for r in lin[:50]:
        roles = [d["role"] for d in r["documents"]]
        assert sorted(roles).count("gold_a") == 1 and roles.count("gold_b") == 1 and len(roles) == 10
        assert all(d["url"] and d["revision"] for d in r["documents"])  # every document joined
        assert len(r["cache_keys"]) == 5  # the kept draft's generation + the 4 ablation calls
    # The rag_sft family at scale: an answerable example and its twin per question, every prompt's
    # filenames resolved to their documents (10 with both golds, 9 without gold a).
    assert values["rows_hotpotqa_cite"] == 2 * 375
    assert not bench_release.verdict({**values, "rows_hotpotqa_cite": 375})
    cite = pq.read_table(folder / "provenance" / "hotpotqa_cite" / "lineage.parquet").to_pylist()
    assert {r["resolution"] for r in cite} == {"question_drafts"}
    shapes = {tuple(sorted(d["role"] for d in r["documents"])) for r in cite}
    assert shapes == {("context",) * 8 + ("gold_a", "gold_b"), ("context",) * 8 + ("gold_b",)}
    assert all(d["url"] and d["revision"] for r in cite for d in r["documents"])
    assert {r["question_id"] for r in cite} == {r["id"] for r in lin}
    card_text = (folder / "README.md").read_text()
    assert "### `corpus` (3000 rows)" in card_text and "| words per abstract |" in card_text


def test_bench_release_unsorted_sorts_every_data_file_in_duckdb_and_ships_the_same_bytes(
    tmp_path: Path,
) -> None:
    """Every upstream file reversed: none streams through, DuckDB sorts each one, and the release's data
    files are byte for byte those of the sorted run."""
    from ragsft_assets.release.stream import plan_configs

    runs = {
        mode: bench_release.run(size=3000, workdir=str(tmp_path / mode), upstream_sorted=mode == "sorted")
        for mode in ("sorted", "unsorted")
    }
    values = runs["unsorted"]
    assert values["passed"] is True, values
    assert values["upstream_sorted"] is False and values["reversed_files"] >= 8
    assert runs["sorted"]["reversed_files"] == 0
    plan = plan_configs(tmp_path / "unsorted" / "assets", bench_release.PARTITION).configs
    sources = [src for splits in plan.values() for src in splits.values() if src.rows > 1]
    assert sources and not any(src.in_release_order() for src in sources)

    def data_files(mode: str) -> dict[str, str]:
        folder = tmp_path / mode / "releases" / bench_release.PARTITION
        return {
            str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in folder.rglob("*-00000-of-00001.parquet")
        }

    assert len(data_files("sorted")) >= 5 and data_files("unsorted") == data_files("sorted")
    assert format_line("release_unsorted", values).startswith("bench=release_unsorted abstracts=3000 ")


@pytest.mark.parametrize("shuffled", [False, True])
def test_streamed_data_files_equal_the_in_memory_release_table(tmp_path: Path, shuffled: bool) -> None:
    """Sorted upstream rows stream through; unsorted ones (duplicate ids too) are sorted by DuckDB.

    Either way the file has the bytes ``write_parquet`` gives the table ``read_config_tables``
    builds in memory (split column dropped, stable sort by id), in one row group or in several.
    """
    from ragsft_assets.release import stream
    from ragsft_assets.storage import write_parquet

    n = 3000
    order = list(range(n))
    if shuffled:
        order = sorted(order, key=lambda i: ids.doc_id(str(i)))
    rows_ids = [f"{i % 1500:05d}" for i in order]  # ids repeat within a split: ties keep file order
    table = pa.table(
        {
            "id": rows_ids,
            "messages": [[{"role": "user", "content": f"q{i}\xa0?"}] for i in order],
            "chunks_total": pa.array([i % 7 for i in order], pa.int32()),
            "split": [("train", "validation", "test")[i % 3] for i in order],
        }
    )
    if not shuffled:
        table = table.sort_by([("id", "ascending"), ("split", "ascending")])
    write_parquet(table, tmp_path / "x.fr" / "rag_sft" / "all.parquet")
    expected, _ = stream.read_config_tables(tmp_path, "x.fr")
    plan = stream.plan_configs(tmp_path, "x.fr")
    assert list(plan.configs) == ["hotpotqa_cite"]
    assert plan.configs["hotpotqa_cite"]["train"].in_release_order() is not shuffled
    with stream.connect() as con:
        files = stream.write_data_files(con, tmp_path / "out", plan.configs)
    for split, rel in files["hotpotqa_cite"].items():
        want = expected["hotpotqa_cite"][split]
        write_parquet(want, tmp_path / "want.parquet")
        got = pq.read_table(tmp_path / "out" / rel)
        assert got.equals(want), split
        assert (tmp_path / "out" / rel).read_bytes() == (tmp_path / "want.parquet").read_bytes(), split
    # Several row groups when the groups are small (here 256 rows): same rows, same order, and the same
    # bytes as DuckDB's own ORDER BY of the whole rows, whether the buckets are written in one pass over
    # the source or in passes of 2.
    src = plan.configs["hotpotqa_cite"]["train"]
    with stream.connect() as con:
        stream.write_query(
            con, f"{src.select_sql()} ORDER BY {src.order_sql}", tmp_path / "q.parquet", src.schema, 256
        )
        for max_open in (stream.MAX_OPEN_BUCKETS, 2):
            n_rows = stream.write_sorted(con, src, tmp_path / "g.parquet", 256, max_open=max_open)
            assert n_rows == src.rows
            assert pq.ParquetFile(tmp_path / "g.parquet").metadata.num_row_groups == 4
            assert pq.read_table(tmp_path / "g.parquet").equals(expected["hotpotqa_cite"]["train"])
            assert (tmp_path / "g.parquet").read_bytes() == (tmp_path / "q.parquet").read_bytes()


def test_a_data_file_has_the_same_bytes_whatever_order_its_upstream_rows_come_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups are sized from the split's first rows in release order: an upstream written in
    reverse (rows of other sizes first) gives the same row groups, the same bytes, as a sorted one."""
    from ragsft_assets.release import stream
    from ragsft_assets.storage import write_parquet

    monkeypatch.setattr(stream, "ROW_GROUP_BYTES", 1 << 18)  # about 1,800 rows a group here
    n = 6000
    table = pa.table(
        {
            "id": [f"{i:05d}" for i in range(n)],  # later rows are longer: the first rows decide the size
            "messages": [[{"role": "user", "content": "x" * (50 + i // 10)}] for i in range(n)],
            "chunks_total": pa.array([i % 7 for i in range(n)], pa.int32()),
            "split": ["train"] * n,
        }
    )
    out = {}
    for mode, t in (("sorted", table), ("reversed", table.take(pa.array(range(n - 1, -1, -1))))):
        write_parquet(t, tmp_path / mode / "x.fr" / "rag_sft" / "all.parquet")
        plan = stream.plan_configs(tmp_path / mode, "x.fr")
        assert plan.configs["hotpotqa_cite"]["train"].in_release_order() is (mode == "sorted")
        with stream.connect() as con:
            files = stream.write_data_files(con, tmp_path / mode / "out", plan.configs)
        out[mode] = tmp_path / mode / "out" / files["hotpotqa_cite"]["train"]
    assert pq.ParquetFile(out["sorted"]).metadata.num_row_groups > 2
    # the card's three fields ship (the ids stay in provenance), in id order all the same
    assert pq.read_table(out["sorted"]).equals(table.drop_columns(["split", "id"]))
    assert out["reversed"].read_bytes() == out["sorted"].read_bytes()


def test_lineage_by_id_ranges_is_the_lineage_in_one_query(tmp_path: Path) -> None:
    """Ranges of 3 rows (every family of the fixture: corpus, multihop, rag_sft) give the same bytes."""
    from ragsft_assets.release import stream
    from ragsft_assets.release.decisions import ledger_files
    from ragsft_assets.resources.store import ArtifactStore
    from ragsft_assets_tests.release_fixtures import PARTITION, write_world

    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    plan = stream.plan_configs(store.root, PARTITION)
    src = lineage.LineageSources(store.root, PARTITION, ledger_files(store.root, PARTITION))
    for config, splits in plan.configs.items():
        family = layout_family(config)
        with stream.connect() as con:
            src.register(con)
            assert len(lineage.id_ranges(con, list(splits.values()), 3)) > 3
            n_whole = lineage.write_lineage(
                con, config, family, list(splits.values()), tmp_path / "whole.parquet"
            )
            n_parts = lineage.write_lineage(
                con, config, family, list(splits.values()), tmp_path / "parts.parquet", range_rows=3
            )
        assert n_whole == n_parts == sum(s.rows for s in splits.values())
        assert (tmp_path / "whole.parquet").read_bytes() == (tmp_path / "parts.parquet").read_bytes(), config


def layout_family(config: str) -> str:
    from ragsft_assets.release.layout import CONFIGS_BY_NAME

    return CONFIGS_BY_NAME[config].family


def test_generated_inputs_do_not_depend_on_the_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Abstracts written 100,000 at a time or 300 at a time, rag_sft rows built 20,000 or 128 at a time:
    the same tables, sorted by id."""
    bench_release.generate(tmp_path / "whole", 2000, 250)
    monkeypatch.setattr(bench_release, "RAG_SFT_CHUNK", 128)
    monkeypatch.setattr(bench_release, "CHUNK", 300)
    bench_release.generate(tmp_path / "chunked", 2000, 250)
    part = bench_release.PARTITION
    files = sorted(f.relative_to(tmp_path / "whole") for f in (tmp_path / "whole").rglob("*.parquet"))
    assert {f.parts[2] for f in files} >= {"abstracts", "bridge_pairs", "multihop_questions", "rag_sft"}
    for rel in files:
        whole, chunked = pq.read_table(tmp_path / "whole" / rel), pq.read_table(tmp_path / "chunked" / rel)
        assert chunked.equals(whole), rel
    for asset in ("rag_prompts", "rag_sft"):
        for split in ("train", "validation", "test"):
            ids = pq.read_table(tmp_path / "whole" / "assets" / part / asset / f"{split}.parquet")["id"]
            assert ids.to_pylist() == sorted(ids.to_pylist())
    abstracts = tmp_path / "chunked" / "assets" / part / "abstracts" / "train.parquet"
    assert pq.ParquetFile(abstracts).metadata.num_row_groups > 1
    assert (
        pq.ParquetFile(
            tmp_path / "chunked" / "assets" / part / "rag_sft" / "train.parquet"
        ).metadata.num_row_groups
        > 1
    )
