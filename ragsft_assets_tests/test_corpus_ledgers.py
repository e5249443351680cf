"""The columnar corpus ledgers equal the Decision-built ones, row for row and byte for byte."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragsft_assets.corpus.ledgers import abstracts_ledger, edge_ids, link_graph_ledger, record_candidates
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=True, use_dictionary=True)
    return buf.getvalue()


# Ids out of order, non-ASCII ones (Arrow sorts UTF-8 bytes, Python code points: the same order), an
# id both kept and dropped, the same (id, reason) twice (the stable sort keeps their input order).
KEPT_IDS = ["b", "é", "a", "Z", "\u4e2d", "ab", "dup"]
REJECTED = [
    ("zz", "too_short", "Zèbre"),
    ("dup", "duplicate_title", "Dup (1)"),
    ("a", "list_page", "Liste des « x »"),
    ("dup", "duplicate_title", "Dup (2)"),
    ("\U0001f600", "too_short", ""),
    ("dup", "a_reason", 'quote " and \\'),
]


@pytest.mark.parametrize(
    ("kept", "rejected"),
    [(KEPT_IDS, REJECTED), (KEPT_IDS, []), ([], REJECTED), ([], [])],
    ids=["both", "kept_only", "dropped_only", "empty"],
)
def test_abstracts_ledger_equals_the_decision_ledger(kept: list[str], rejected: list) -> None:
    table = pa.table({"id": pa.chunked_array([kept[:3], kept[3:]], pa.string())})
    named = record_candidates(table.column("id"), rejected)  # a dropped id that is also kept: its own name
    decisions = [Decision(i, DROPPED, reason, {"title": title}) for i, reason, title in named]
    decisions += [Decision(i, KEPT) for i in kept]
    expected = ledger_table("20240916.fr", "corpus", "abstracts", decisions)
    got = abstracts_ledger("20240916.fr", "corpus", table, rejected)
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist()
    assert _parquet(got) == _parquet(expected)


def test_no_abstract_is_both_kept_and_dropped() -> None:
    """Issue 40: a duplicate title's loser had the winner's id, so a shipped abstract read as dropped."""
    table = pa.table({"id": pa.array(KEPT_IDS, pa.string())})
    got = abstracts_ledger("p", "corpus", table, REJECTED).to_pylist()
    kept = {r["candidate_id"] for r in got if r["verdict"] == KEPT}
    dropped = [r["candidate_id"] for r in got if r["verdict"] == DROPPED]
    assert kept == set(KEPT_IDS) and not kept & set(dropped)
    assert len(dropped) == len(set(dropped)) == len(REJECTED)  # every record a candidate of its own
    assert sorted(c for c in dropped if c.startswith("dup~")) == [
        "dup~a_reason",
        "dup~duplicate_title",
        "dup~duplicate_title~2",
    ]
    assert "zz" in dropped  # an id that nothing kept keeps its name


def test_link_graph_ledger_equals_the_decision_ledger() -> None:
    table = pa.table(
        {
            "source_id": ["s2", "s1", "s1", "é"],
            "target_id": ["t1", "t2", "t1", "t9"],
            "sentence": pa.array([0, 12, 3, 1], pa.int32()),
        }
    )
    dropped = [("s1", "t1", "Paris", 10, "enumeration"), ("s0", "t3", "Rome", 2, "in_degree_cap")]
    decisions = [
        Decision(f"{s}>{t}#{n}", DROPPED, reason, {"alias": alias}) for s, t, alias, n, reason in dropped
    ]
    decisions += [
        Decision(f"{s}>{t}#{n}", KEPT)
        for s, t, n in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
    ]
    expected = ledger_table("p", "corpus", "link_graph", decisions)
    got = link_graph_ledger("p", "corpus", table, dropped)
    assert got.to_pylist() == expected.to_pylist()
    assert _parquet(got) == _parquet(expected)
    assert (
        edge_ids(table.column("source_id"), table.column("target_id"), table.column("sentence")).to_pylist()[
            1
        ]
        == "s1>t2#12"
    )
