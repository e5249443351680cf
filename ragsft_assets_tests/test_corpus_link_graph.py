"""Link graph (enumeration rule, in-degree cap first, splits, bridges) and bridge pairs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets.corpus import link_graph as G
from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA, AbstractsConfig
from ragsft_assets.corpus.bridge_pairs import BridgePairsConfig, draw_bridge_pairs, pair_key
from ragsft_assets.corpus.build import build_abstracts
from ragsft_assets.corpus.enumeration import alias_only_in_enumeration
from ragsft_assets.ids import doc_id
from ragsft_assets_tests.corpus_fixtures import interlinked_records, write_jsonl


@pytest.mark.parametrize(
    ("sentence", "alias", "expected"),
    [
        ("Il a connu des peintres tels que Monet, Renoir et Degas.", "Monet", True),
        ("Il a connu des peintres tels que Monet, Renoir et Degas.", "Renoir", True),
        ("Il a connu des peintres tels que Monet, Renoir et Degas.", "Degas", True),
        ("Elle traverse Castelmaure, Valrenne et Lanvière avant de rejoindre l'océan.", "Valrenne", True),
        ("Elle traverse Castelmaure, Valrenne et Lanvière avant de rejoindre l'océan.", "océan", False),
        (
            "La ville compte trois ponts : le Pont-Vieux, le pont Delcros et le pont suspendu.",
            "pont Delcros",
            True,
        ),
        ("Il expose notamment à Paris et à Londres.", "Londres", True),
        ("He painted France, Italy and Spain.", "Italy", True),
        ("He visited countries such as France and Spain.", "France", True),
        ("Il peint Paris et Rome.", "Paris", False),  # two items, no trigger
        ("Valrenne, chef-lieu de l'Orbelle, est une ville.", "Valrenne", False),  # apposition
        ("Né à Lyon, il étudie la peinture à Paris et s'installe à Rome.", "Lyon", False),
        ("Il est l'élève de Monet à Paris, puis de Degas.", "Monet", False),
        ("Monet est un peintre.", "Monet", False),
        # An alias with one occurrence outside the list keeps its edge.
        ("Monet admire des peintres tels que Monet, Renoir et Degas.", "Monet", False),
        ("Le musée expose Louise Ravenel.", "Absent", False),
    ],
)
def test_enumeration_rule(sentence: str, alias: str, expected: bool) -> None:
    assert alias_only_in_enumeration(sentence, alias) is expected


def _abstracts(
    rows: list[tuple[str, str, list[tuple[str, int]]]], sentences: dict[str, list[str]]
) -> pa.Table:
    """A hand-made abstracts table: (title, split, [(target title, sentence)])."""
    out = []
    for title, split, links in rows:
        sents = sentences.get(title, ["Phrase une.", "Phrase deux."])
        out.append(
            {
                "id": doc_id(title),
                "title": title,
                "identifier": 1,
                "url": None,
                "revision": None,
                "qid": None,
                "text": " ".join(sents),
                "sentences": sents,
                "links": [
                    {"target_title": t, "target_id": doc_id(t), "anchor": t, "sentence": s} for t, s in links
                ],
                "split": split,
            }
        )
    return pa.Table.from_pylist(sorted(out, key=lambda r: r["id"]), schema=ABSTRACTS_SCHEMA)


def test_in_degree_cap_counts_sources_over_the_whole_corpus() -> None:
    # Hub is cited by 2 train sources and 1 test source: 3 > cap 2 over the corpus, though 2 within train.
    table = _abstracts(
        [
            ("A", "train", [("Hub", 0), ("B", 0)]),
            ("B", "train", [("Hub", 0)]),
            ("Hub", "train", []),
            ("T", "test", [("Hub", 0)]),
        ],
        {},
    )
    build = G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=2))
    assert {(r["source_title"], r["target_title"]) for r in build.table.to_pylist()} == {("A", "B")}
    assert build.funnel[G.CROSS_SPLIT] == 1 and build.funnel[G.IN_DEGREE_CAP] == 2
    kept = G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=3))
    assert kept.funnel[G.IN_DEGREE_CAP] == 0
    assert ("B", "Hub") in {(r["source_title"], r["target_title"]) for r in kept.table.to_pylist()}


def test_edges_in_corpus_same_split_and_cap_first() -> None:
    sentences = {
        "A": ["A cite Hub et B.", "Des peintres tels que C, D et E."],
        "B": ["B cite Hub.", "B cite A."],
        "C": ["C cite Hub.", "C cite Absent."],
        "T": ["T cite A."],
    }
    table = _abstracts(
        [
            ("A", "train", [("Hub", 0), ("B", 0), ("C", 1), ("D", 1), ("E", 1)]),
            ("B", "train", [("Hub", 0), ("A", 1)]),
            ("C", "train", [("Hub", 0), ("Absent", 1)]),
            ("D", "train", []),
            ("E", "train", []),
            ("Hub", "train", []),
            ("T", "test", [("A", 0)]),
        ],
        sentences,
    )
    build = G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=2))
    edges = {(r["source_title"], r["target_title"]) for r in build.table.to_pylist()}
    assert edges == {("A", "B"), ("B", "A")}
    assert build.funnel == {
        "links_read": 10,
        G.TARGET_NOT_IN_CORPUS: 1,
        G.CROSS_SPLIT: 1,
        G.IN_DEGREE_CAP: 3,  # Hub is cited by 3 sources > cap 2
        G.ENUMERATION: 3,
        G.EDGE_KEPT: 2,
        "bridges": 2,
    }
    # The cap counts sources before the enumeration rule drops anything: raising it keeps Hub.
    assert G.build_link_graph(table, G.LinkGraphConfig(in_degree_cap=3)).funnel[G.IN_DEGREE_CAP] == 0
    row = build.table.to_pylist()[0]
    assert row["sentence_text"] == sentences[row["source_title"]][row["sentence"]]
    keys = [(r["source_id"], r["target_id"], r["sentence"]) for r in build.table.to_pylist()]
    assert keys == sorted(keys)


def test_bridges_from_titles_or_top_k() -> None:
    table = _abstracts(
        [
            ("A", "train", [("X", 0), ("Y", 0)]),
            ("B", "train", [("X", 0)]),
            ("X", "train", []),
            ("Y", "train", []),
        ],
        {},
    )
    top1 = G.build_link_graph(table, G.LinkGraphConfig(bridge_top_k=1))
    assert {r["target_title"] for r in top1.table.to_pylist() if r["is_bridge"]} == {"X"}
    assert {r["target_title"]: r["target_in_degree"] for r in top1.table.to_pylist()} == {"X": 2, "Y": 1}
    listed = G.build_link_graph(table, G.LinkGraphConfig(bridge_titles=("Y",)))
    assert {r["target_title"] for r in listed.table.to_pylist() if r["is_bridge"]} == {"Y"}


@pytest.fixture(scope="module")
def ring_graph(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    path = write_jsonl(tmp_path_factory.mktemp("ring") / "dump.jsonl", interlinked_records(40))
    build = build_abstracts([Path(path)], AbstractsConfig(split_shares=(1.0, 0.0, 0.0)))
    return G.build_link_graph(build.table, G.LinkGraphConfig()).table


def test_bridge_pairs_reproducible_and_bounded(ring_graph: pa.Table) -> None:
    table, funnel, not_drawn = draw_bridge_pairs(ring_graph, BridgePairsConfig(seed=1, max_pairs=10))
    again, _, _ = draw_bridge_pairs(
        ring_graph.take(list(range(ring_graph.num_rows))[::-1]), BridgePairsConfig(1, 10)
    )
    assert table.equals(again)  # input order does not matter
    assert table.num_rows == 10 and funnel["not_drawn"] == len(not_drawn) == funnel["pairs"] - 10
    assert table.column("id").to_pylist() == sorted(table.column("id").to_pylist())
    for r in table.to_pylist():
        assert r["id"] == pair_key(r["a_id"], r["b_id"])
    bigger, _, _ = draw_bridge_pairs(ring_graph, BridgePairsConfig(seed=1, max_pairs=20))
    assert set(table.column("id").to_pylist()) <= set(bigger.column("id").to_pylist())
    other_seed, _, _ = draw_bridge_pairs(ring_graph, BridgePairsConfig(seed=2, max_pairs=10))
    assert other_seed.column("id").to_pylist() != table.column("id").to_pylist()


def test_parallel_enumeration_gives_the_same_graph(
    ring_graph: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentences = [
        "Il a connu des peintres tels que Monet, Renoir et Degas.",
        "Il peint Paris et Rome.",
    ] * 30
    rows = [(f"S{i}", "train", [("Monet", 0), ("Paris", 1)]) for i in range(30)] + [
        ("Monet", "train", []),
        ("Paris", "train", []),
    ]
    table = _abstracts(rows, {f"S{i}": sentences[:2] for i in range(30)})
    serial = G.build_link_graph(table, G.LinkGraphConfig())
    monkeypatch.setattr(G, "PARALLEL_MIN_EDGES", 0)
    parallel = G.build_link_graph(table, G.LinkGraphConfig(), workers=2)
    assert parallel.table.equals(serial.table) and parallel.funnel == serial.funnel
    assert serial.funnel[G.ENUMERATION] == 30 and serial.funnel[G.EDGE_KEPT] == 30


def test_bridge_pairs_are_drawn_bridge_first() -> None:
    """Algorithm 1: a popular bridge (20 sources) gets no more pairs per round than a rare one (1 source)."""
    edges = [(f"S{i}", "Popular") for i in range(20)] + [("R1", "Rare1"), ("R2", "Rare2")]
    graph = pa.Table.from_pylist(
        [
            {
                "source_id": doc_id(a),
                "source_title": a,
                "target_id": doc_id(b),
                "target_title": b,
                "alias": b,
                "sentence": 0,
                "split": "train",
                "is_bridge": True,
            }
            for a, b in edges
        ]
    )
    for seed in range(5):
        table, funnel, _ = draw_bridge_pairs(graph, BridgePairsConfig(seed=seed, max_pairs=3))
        assert sorted(table.column("b_title").to_pylist()) == ["Popular", "Rare1", "Rare2"]
        assert funnel["bridges"] == 3 and funnel["pairs"] == 22
        more, _, _ = draw_bridge_pairs(graph, BridgePairsConfig(seed=seed, max_pairs=5))
        assert set(table.column("id").to_pylist()) < set(more.column("id").to_pylist())
        assert more.column("b_title").to_pylist().count("Popular") == 3
    # the source is drawn among the articles linking to the bridge: the seed changes which one
    sources = {
        r["a_title"]
        for s in range(8)
        for r in draw_bridge_pairs(graph, BridgePairsConfig(seed=s, max_pairs=3))[0].to_pylist()
        if r["b_title"] == "Popular"
    }
    assert len(sources) > 1 and all(t.startswith("S") for t in sources)
