"""The streaming build path gives the same bytes as the simple one, whatever the workers and chunks."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragsft_assets import storage
from ragsft_assets.corpus import abstracts as A
from ragsft_assets.corpus import enumeration as E
from ragsft_assets.corpus import sentences as S
from ragsft_assets.corpus.build import build_abstracts, merge_chunks, run_task
from ragsft_assets.corpus.link_graph import ENUMERATION as ENUMERATION_REASON
from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph
from ragsft_assets_tests.corpus_fixtures import FILLER, interlinked_records, make_record, write_jsonl

CFG = A.AbstractsConfig()


def _records() -> list[dict]:
    """Interlinked towns, plus duplicated titles (one pair tied on revision, identifier and text)."""
    records = interlinked_records(40)
    text = "Lanvière est un village de l'Orbelle, près de Ville001 et de Ville002. " + FILLER
    records.append(make_record("Lanvière", text, [("Ville001", "Ville001")], identifier=7, revision=5))
    records.append(make_record("Lanvière", text, [("Ville002", "Ville002")], identifier=3, revision=9))
    tied = "Castelmaure est un bourg sur l'Orbelle. " + FILLER
    first = make_record("Castelmaure", tied, [("Orbelle", "Orbelle (rivière)")], identifier=4, qid="Q1")
    second = make_record("Castelmaure", tied, [], identifier=4, qid="Q2")  # same keys: input order decides
    records[5:5] = [first]
    records.append(second)
    records.append(make_record("Trop court", "Court. Bref."))
    return records


def _digest(table: pa.Table, tmp_path: Path, name: str) -> str:
    """The SHA-256 of the Parquet files the asset would write (one per split)."""
    paths = storage.write_split_asset(table, "p", name, root=tmp_path)
    return hashlib.sha256(b"".join(paths[s].read_bytes() for s in sorted(paths))).hexdigest()


def _reference(records: list[dict]) -> tuple[pa.Table, list]:
    """The simple path: every row as a dict, ``from_pylist``, then ``deduplicate_titles``."""
    rows = [A.process_record(r, CFG, Counter()) for r in records]
    table = pa.Table.from_pylist([r for r in rows if isinstance(r, dict)], schema=A.ABSTRACTS_SCHEMA)
    return A.deduplicate_titles(table)


def test_workers_and_chunk_sizes_give_byte_identical_files(tmp_path: Path) -> None:
    dump = write_jsonl(tmp_path / "dump.jsonl", _records())
    one = build_abstracts([dump], CFG)
    expected_table, expected_dropped = _reference(_records())
    assert one.table.equals(expected_table)
    assert sorted(expected_dropped) == [r for r in one.rejected if r[1] == A.DUPLICATE_TITLE]
    digest = _digest(one.table, tmp_path / "one", "abstracts")
    assert digest == _digest(expected_table.combine_chunks(), tmp_path / "ref", "abstracts")
    graph = build_link_graph(one.table, LinkGraphConfig())
    for workers, chunk_bytes in ((1, 2500), (2, 2500), (2, 9000)):
        other = build_abstracts([dump], CFG, workers=workers, chunk_bytes=chunk_bytes)
        assert _digest(other.table, tmp_path / f"w{workers}-{chunk_bytes}", "abstracts") == digest
        assert (other.funnel, other.link_funnel, other.rejected) == (
            one.funnel,
            one.link_funnel,
            one.rejected,
        )
        assert build_link_graph(other.table, LinkGraphConfig(), workers=workers).table.equals(graph.table)
        # The pool's workers report their CPU; chunks run in this process are on its own clock.
        assert (other.worker_cpu_s > 0) if workers > 1 else (other.worker_cpu_s == 0)
    # The tie on every key is broken by input order: the first Castelmaure (with its link) is kept.
    castel = one.table.filter(pc.equal(one.table.column("title"), "Castelmaure"))
    assert castel.column("qid").to_pylist() == ["Q1"]


def test_the_table_is_in_split_then_id_order_and_the_split_files_are_its_slices(tmp_path: Path) -> None:
    """The order of the asset read back split file after split file; the files are unchanged by it."""
    cfg = A.AbstractsConfig(split_shares=A.normalise_shares((1, 1, 1)))
    records = [*_records(), *interlinked_records(40)]
    table = build_abstracts([write_jsonl(tmp_path / "dump.jsonl", records)], cfg, workers=2).table
    splits = table.column("split").to_pylist()
    assert set(splits) == set(A.SPLIT_NAMES)
    assert [A.SPLIT_NAMES.index(s) for s in splits] == sorted(A.SPLIT_NAMES.index(s) for s in splits)
    by_id = table.sort_by("id")  # what the files held when the table was sorted by id alone
    for split, part in zip(storage.SPLITS, storage.split_parts(table), strict=True):
        assert part.column("id").to_pylist() == sorted(part.column("id").to_pylist())
        assert part.equals(by_id.filter(pc.equal(by_id.column("split"), split)))
        base = table.column("text").chunk(0).buffers()[2].address
        assert part.column("text").chunk(0).buffers()[2].address == base  # a slice, not a copy


def test_merge_chunks_equals_dedup_of_the_concatenation(tmp_path: Path) -> None:
    records = _records()
    lines = [orjson.dumps(r) for r in records]
    paths = []
    for n, start in enumerate(range(0, len(lines), 7)):
        res = run_task(("lines", lines[start : start + 7]), CFG, str(tmp_path / f"c{n}.arrow"))
        assert res.table.num_rows == 0 and res.path is not None
        paths.append(res.path)
    table, dropped = merge_chunks(paths)
    expected, expected_dropped = _reference(records)
    assert table.equals(expected) and dropped == expected_dropped
    assert merge_chunks([])[0].num_rows == 0


def test_rows_to_table_equals_from_pylist() -> None:
    records = [*_records(), make_record("Sans liens", "Un bourg sans liens. " + FILLER, revision=None)]
    rows = [A._process_record(r, CFG, Counter()) for r in records]
    dicts = [A.process_record(r, CFG, Counter()) for r in records]
    kept = [r for r in rows if not isinstance(r, str)]
    assert A.rows_to_table(kept).equals(
        pa.Table.from_pylist([d for d in dicts if isinstance(d, dict)], schema=A.ABSTRACTS_SCHEMA)
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://fr.wikipedia.org/wiki/Valrenne",
        "https://FR.Wikipedia.org/wiki/X",
        "https://fr.wikipedia.org",
        "https://fr.wikipedia.org?x=1/y",
        "https://user@fr.wikipedia.org:443/wiki/X",
        "https://fr.wikipedia.org#frag/x",
        "http://fr.wikipedia.org/wiki/X",
        "/wiki/Valrenne",
        "",
    ],
)
def test_cached_host_and_link_resolution_match_urlsplit(url: str) -> None:
    for _ in range(2):  # the second call is served by the cache
        assert A.wiki_host(url) == (urlsplit(url).netloc.lower() if url else "")
        title, reason, target_id = A._resolve_cached(url, "fr.wikipedia.org")
        assert (title, reason) == A.resolve_link(url, "fr.wikipedia.org")
        assert target_id == (A.doc_id(title) if title else None)


def test_enumeration_flags_equal_the_rule_per_pair() -> None:
    sentences = [
        "Il peint Paris, Rome et Venise.",
        "Des villes comme Lyon et Nantes sont proches.",
        "Il peint Paris et Rome.",
        "Valrenne est proche de Lyon.",
    ]
    pairs = [(s, a) for s in sentences for a in ("Paris", "Rome", "Lyon", "Nantes", "Valrenne", "")]
    assert E.enumeration_flags(pairs) == [E.alias_only_in_enumeration(s, a) for s, a in pairs]
    assert any(E.enumeration_flags(pairs))


def _old_is_abbreviation(text: str, end: int, abbreviations: frozenset[str]) -> bool:
    """The rule before its fast path (kept here as the reference)."""
    import re

    word = text[text.rfind(" ", 0, end) + 1 : end]
    for sep in "'’(":
        if sep in word:
            word = word.rsplit(sep, 1)[1]
    if not word:
        return False
    if len(word) == 1 and word.isalpha():
        return True
    if word in abbreviations or word.lower() in abbreviations:
        return True
    parts = [p for p in re.split(r"[.\-]", word) if p]
    return len(parts) > 1 and all(len(p) <= 2 and p.isalpha() for p in parts)


def test_abbreviation_fast_path_matches_the_rule() -> None:
    rng = random.Random(3)
    words = [
        "av",
        "Av",
        "M",
        "env",
        "d'env",
        "J.-C",
        "U.S",
        "ville",
        "Mgr",
        "x",
        "",
        "(cf",
        "Été",
        "ÉD",
        "1er",
    ]
    abbreviations = S.ABBREVIATIONS["fr"]
    for _ in range(300):
        text = " ".join(rng.choices(words, k=rng.randint(1, 4)))
        assert S._is_abbreviation(text, len(text), abbreviations) == _old_is_abbreviation(
            text, len(text), abbreviations
        )


def test_has_hint_equals_the_hint_regex() -> None:
    """The literal comma/colon check before the regex changes no answer."""
    rng = random.Random(7)
    pieces = ["et", "ET", "ou", "que", "like", "ſuch", "dont", "comme", "x", " ", ",", ":", "Paris", "é"]
    sentences = ["".join(rng.choices(pieces, k=rng.randint(0, 6))) for _ in range(3000)]
    got = [E._has_hint(s) for s in sentences]
    assert got == [E._FAST_HINT.search(s) is not None for s in sentences]
    assert any(got) and not all(got)


def test_run_task_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """A chunk runs with the cyclic collector off (speed), and the caller's setting comes back."""
    import gc

    lines = [orjson.dumps(r) for r in interlinked_records(5)]
    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            res = run_task(("lines", lines), CFG, str(tmp_path / f"c{state}.arrow"))
            assert gc.isenabled() is state
            assert res.path is not None
    finally:
        (gc.enable if was else gc.disable)()


def test_enumeration_prefilter_is_a_superset_of_the_python_hint() -> None:
    """Wherever the Python hint (hence the rule) can be True, the C++ prefilter says "maybe"."""
    rng = random.Random(5)
    pieces = ["et", "ET", "Et", "ou", "or", "like", "liKe", "ſuch", "lıke", "İet", "dont", "comme", "COMMEnt"]
    pieces += ["é", "œ", "x", "_", "2", " ", " ", ",", ":", "«", "»", "'", "-", "Paris", "rivière"]
    sentences = ["".join(rng.choices(pieces, k=rng.randint(1, 8))) for _ in range(3000)]
    maybe = E.may_hold_enumeration(pa.array(sentences)).to_pylist()
    hint = [E._FAST_HINT.search(s) is not None for s in sentences]
    assert all(m for m, h in zip(maybe, hint, strict=True) if h)
    assert not all(maybe)  # and it does filter


def test_bench_closing_line_names_cores_and_versions() -> None:
    """Every bench ends with the machine's cores and the library versions (one helper)."""
    from importlib import metadata

    from ragsft_assets.bench import machine_values
    from ragsft_assets.cli.bench import format_line

    line = format_line("corpus", {"ratio": 0.7, **machine_values("rank-bm25", "no-such-dist")})
    fields = dict(part.split("=", 1) for part in line.split(" "))
    assert int(fields["cores"]) >= 1 and int(fields["cpu_count"]) >= int(fields["cores"])
    versions = fields["versions"].split(",")
    assert f"pyarrow-{metadata.version('pyarrow')}" in versions
    assert f"rank-bm25-{metadata.version('rank-bm25')}" in versions
    assert "no-such-dist-absent" in versions and versions[0].startswith("python-")
    assert line.split(" ")[-1].startswith("versions=")


def test_page_kind_equals_the_combined_title_search() -> None:
    """page_kind's match-then-"(" path gives what one search of the combined title rules gives."""
    assert A._TITLE_KINDS[0][0] == A.DISAMBIGUATION
    assert all(p.pattern.startswith("^") for _, p in A._TITLE_KINDS[1:])  # what the shortcut relies on
    rng = random.Random(13)
    pieces = ["Liste des ", "Index de la ", "1999", " av. J.-C.", "14 juillet", "Glossaire ", "Paris"]
    pieces += [
        " (homonymie)",
        "(disambiguation) ",
        "(",
        ")",
        " ",
        "XVe siècle",
        "Mai 68",
        "x",
        "Chronologie ",
    ]
    titles = ["".join(rng.choices(pieces, k=rng.randint(1, 4))) for _ in range(4000)]
    got = [A.page_kind(t) for t in titles]
    want = [m.lastgroup if (m := A._TITLE_KIND.search(t)) else None for t in titles]
    assert got == want
    assert A.DISAMBIGUATION in got and None in got and len(set(got)) >= 5


def test_crlf_lines_read_like_lf_lines(tmp_path: Path) -> None:
    """A CRLF dump gives the same lines as its LF copy (the per-line CR strip runs only when a CR is there)."""
    from ragsft_assets.corpus.build import _lines_of_range

    lines = [orjson.dumps(r) for r in interlinked_records(6)]
    lf, crlf, mixed = tmp_path / "lf.jsonl", tmp_path / "crlf.jsonl", tmp_path / "mixed.jsonl"
    lf.write_bytes(b"".join(ln + b"\n" for ln in lines))
    crlf.write_bytes(b"".join(ln + b"\r\n" for ln in lines))
    mixed.write_bytes(b"".join(ln + (b"\r\n" if i % 2 else b"\n") for i, ln in enumerate(lines)))
    for path in (lf, crlf, mixed):
        assert _lines_of_range(str(path), 0, path.stat().st_size) == lines
    assert build_abstracts([crlf], CFG).table.equals(build_abstracts([lf], CFG).table)


def test_enumeration_pool_threshold_and_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm fork server lowers the pool threshold; the pool's flags equal the in-process ones."""
    import ragsft_assets.corpus.build as B
    import ragsft_assets.corpus.link_graph as LG

    assert not LG.use_pool(10**6, 1, True)  # one worker: never
    assert LG.use_pool(LG.WARM_PARALLEL_MIN_EDGES, 2, True) and not LG.use_pool(
        LG.WARM_PARALLEL_MIN_EDGES, 2, False
    )
    assert LG.use_pool(LG.PARALLEL_MIN_EDGES, 2, False)
    table = build_abstracts([write_jsonl(tmp_path / "d.jsonl", _records())], CFG).table
    serial = build_link_graph(table, LinkGraphConfig(), workers=1)
    assert serial.funnel[ENUMERATION_REASON] > 0
    pools = []
    real_context = B.worker_context
    monkeypatch.setattr(B, "worker_context", lambda: pools.append(1) or real_context())
    monkeypatch.setattr(LG, "PARALLEL_MIN_EDGES", 1)
    monkeypatch.setattr(LG, "WARM_PARALLEL_MIN_EDGES", 1)
    pooled = build_link_graph(table, LinkGraphConfig(), workers=2)
    assert pools and pooled.table.equals(serial.table) and pooled.dropped == serial.dropped
    assert pooled.worker_cpu_s > 0 and serial.worker_cpu_s == 0  # the pool's CPU is reported


def _resident_kb(path: Path) -> int:
    """Rss of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef" and "-" in line.split(" ", 1)[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads /proc/self/smaps (Linux)")
def test_a_mapped_chunk_gives_its_pages_back_and_stays_readable(tmp_path: Path) -> None:
    from ragsft_assets.corpus.build import _MappedChunk

    records = [make_record(f"Ville {i}", FILLER * 40, identifier=i) for i in range(200)]
    lines = [orjson.dumps(r) for r in records]
    res = run_task(("lines", lines), CFG, str(tmp_path / "c.arrow"))
    chunk = _MappedChunk(res.path)
    expected = chunk.table.column("text").to_pylist()  # every page of the column read
    assert _resident_kb(Path(res.path)) > 100
    chunk.drop_pages()
    assert _resident_kb(Path(res.path)) == 0
    assert chunk.table.column("text").to_pylist() == expected  # pages come back from the page cache
