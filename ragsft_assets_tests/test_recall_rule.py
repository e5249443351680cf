"""Recall Rewrite decision rule and ``ragsft recall rule`` against a hand-computed table."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.recall.rule import CONTRADICTS, ENTAILS, UNRELATED, Thresholds, is_known, rederive
from ragsft_assets.recall.schema import AUDIT_CHECKLIST

# (case, per-question (entailing, contradicting) counts of 2 answers, thresholds, known?)
# Counted by hand: E = questions with >= k_e entailing answers, C = questions with >= k_c contradicting.
TABLE = [
    ("E=2 at j_e, C=0", [(1, 0), (1, 0), (0, 0), (0, 0), (0, 0)], "2/1/2/1", True),
    ("E=1 below j_e", [(1, 0), (0, 0), (0, 0), (0, 0), (0, 0)], "2/1/2/1", False),
    ("E=2 below j_e=3", [(1, 0), (1, 0), (0, 0), (0, 0), (0, 0)], "3/1/1/1", False),
    ("E=3 at j_e=3", [(1, 0), (2, 0), (1, 0), (0, 0), (0, 0)], "3/1/1/1", True),
    ("E=3, C=2 at j_c", [(2, 0), (1, 1), (1, 1), (0, 0), (0, 0)], "2/1/2/1", True),
    ("E=3, C=3 above j_c", [(2, 0), (1, 1), (1, 1), (0, 1), (0, 0)], "2/1/2/1", False),
    ("E=3, C=2 above j_c=1", [(2, 0), (1, 1), (1, 1), (0, 0), (0, 0)], "3/1/1/1", False),
    ("E=3, C=1 at j_c=1", [(2, 0), (1, 1), (2, 0), (0, 0), (0, 0)], "3/1/1/1", True),
    ("k_e=2: single entailments do not count", [(1, 0)] * 5, "2/2/2/1", False),
    ("k_e=2: E=2 at j_e", [(2, 0), (2, 0), (1, 0), (0, 0), (0, 0)], "2/2/2/1", True),
    ("k_e=2: E=1 below j_e", [(2, 0), (1, 0), (1, 0), (1, 0), (0, 0)], "2/2/2/1", False),
    ("k_c=2: one contradiction per question does not count", [(1, 1), (1, 1), (0, 1)], "2/1/0/2", True),
    ("k_c=2: C=1 above j_c=0", [(0, 2), (1, 0), (1, 0)], "2/1/0/2", False),
    ("no probes", [], "2/1/2/1", False),
    ("k_c=0 counts every question", [(2, 0)] * 5, "2/1/4/0", False),
    ("k_c=0, C=5 at j_c=5", [(2, 0)] * 5, "2/1/5/0", True),
]


@pytest.mark.parametrize("case,counts,thresholds,expected", TABLE, ids=[t[0] for t in TABLE])
def test_rule_against_hand_table(case: str, counts: list, thresholds: str, expected: bool) -> None:
    assert is_known(counts, Thresholds.parse(thresholds)) is expected


@pytest.mark.parametrize("bad", ["2/1/2", "2/1/2/x", "2/1/-2/1", "", "2/1/2/1/1"])
def test_thresholds_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="j_e/k_e/j_c/k_c"):
        Thresholds.parse(bad)


def _probes(counts: list[tuple[int, int]]) -> list[dict]:
    out = []
    for n, (e, c) in enumerate(counts):
        labels = [ENTAILS] * e + [CONTRADICTS] * c
        labels += [UNRELATED] * (2 - len(labels))
        out.append(
            {"question": f"q{n}", "answers": [{"text": f"a{n}{i}", "label": x} for i, x in enumerate(labels)]}
        )
    return out


def _full_record(rid: str, claims: list[tuple[bool, list[tuple[int, int]]]], t: Thresholds) -> dict:
    """A -full record whose is_known/is_removed were set under ``t``."""
    out = []
    for n, (kd, counts) in enumerate(claims):
        known = is_known(counts, t) if kd else None
        out.append(
            {
                "claim_id": n,
                "text": f"claim {n}",
                "is_knowledge_dependent": kd,
                "knowledge_dependence_reason": "",
                "audit_checklist": dict.fromkeys(AUDIT_CHECKLIST, "Yes"),
                "is_known": known,
                "is_removed": bool(kd and not known),
                "probes": _probes(counts) if kd else [],
            }
        )
    return {"id": rid, "prompt": "p", "claims": out, "rewritten_response": "r", "is_refusal": False}


def test_recall_rule_cli(tmp_path) -> None:
    default = Thresholds()
    records = [
        # claim 0 known under 2/1/2/1 (E=2) but not under 3/1/1/1: stale under 3/1/1/1
        _full_record("oasst1-0000", [(True, TABLE[0][1]), (False, [])], default),
        # known under both (E=3, C=1): not stale
        _full_record("oasst1-0001", [(True, TABLE[7][1])], default),
        # unknown under both (E=1): removed under both, not stale
        _full_record("oasst1-0002", [(True, TABLE[1][1]), (True, TABLE[3][1])], default),
    ]
    src = tmp_path / "qwen3-4b-base-full.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    out = tmp_path / "rederived.jsonl"
    res = CliRunner().invoke(main, ["recall", "rule", str(src), "--thresholds", "3/1/1/1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    last = orjson.loads(res.output.strip().splitlines()[-1])
    totals = {
        "records": 3,
        "claims": 5,
        "knowledge_dependent": 4,
        "known": 2,
        "unknown": 2,
        "rewrite_stale": 1,
    }
    assert last == {"thresholds": "3/1/1/1", **totals, "base_models": {"": totals}}
    rows = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [r["rewrite_stale"] for r in rows] == [True, False, False]
    assert {r["filter"] for r in rows} == {"3/1/1/1"}
    assert [(c["is_known"], c["is_removed"]) for c in rows[0]["claims"]] == [(False, True), (None, False)]
    assert [(c["is_known"], c["is_removed"]) for c in rows[2]["claims"]] == [(False, True), (True, False)]
    assert [r["num_unknown_claims"] for r in rows] == [1, 0, 1]

    # the default thresholds re-derive the published verdicts: nothing stale
    res = CliRunner().invoke(main, ["recall", "rule", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.output.strip().splitlines()[-1])["rewrite_stale"] == 0

    # the same records as Parquet give the same counts
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), tmp_path / "full.parquet")
    res = CliRunner().invoke(
        main, ["recall", "rule", str(tmp_path / "full.parquet"), "--thresholds", "3/1/1/1"]
    )
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.output.strip().splitlines()[-1]) == last

    res = CliRunner().invoke(main, ["recall", "rule", str(src), "--thresholds", "3/1"])
    assert res.exit_code != 0 and "j_e/k_e/j_c/k_c" in res.output


def test_rederive_non_dependent_claims_always_kept() -> None:
    rec = {"claims": [{"claim_id": "x", "is_knowledge_dependent": False, "is_removed": True, "probes": []}]}
    out = rederive(rec, Thresholds())
    assert out["claims"][0]["is_removed"] is False and out["rewrite_stale"] is True


def _records_for(model: str, t: Thresholds) -> list[dict]:
    rows = [
        _full_record("oasst1-0000", [(True, TABLE[0][1]), (False, [])], t),
        _full_record("oasst1-0001", [(True, TABLE[7][1])], t),
    ]
    return [{**r, "base_model": model} for r in rows]


def test_rule_reads_published_jsonl_gz_per_base_model_and_one_config(tmp_path) -> None:
    """The published -full files are gzipped JSON lines; one input may hold several base models;
    --config picks one config of a release folder."""
    import gzip

    default = Thresholds()
    folder = tmp_path / "recall-rewrite-oasst1"
    for key, model in (("qwen3-4b-base", "Qwen/Qwen3-4B-Base"), ("olmo-2-7b", "allenai/OLMo-2-1124-7B")):
        (folder / f"{key}-full").mkdir(parents=True)
        data = b"".join(orjson.dumps(r) + b"\n" for r in _records_for(model, default))
        (folder / f"{key}-full" / "train-00000-of-00001.jsonl.gz").write_bytes(gzip.compress(data))
    res = CliRunner().invoke(main, ["recall", "rule", str(folder), "--thresholds", "3/1/1/1"])
    assert res.exit_code == 0, res.output
    last = orjson.loads(res.output.strip().splitlines()[-1])
    assert last["records"] == 4 and set(last["base_models"]) == {
        "Qwen/Qwen3-4B-Base",
        "allenai/OLMo-2-1124-7B",
    }
    assert all(c["records"] == 2 and c["rewrite_stale"] == 1 for c in last["base_models"].values())
    assert "allenai/OLMo-2-1124-7B: thresholds 3/1/1/1: 2 records" in res.output

    res = CliRunner().invoke(
        main, ["recall", "rule", str(folder), "--config", "olmo-2-7b-full", "--thresholds", "3/1/1/1"]
    )
    assert res.exit_code == 0, res.output
    last = orjson.loads(res.output.strip().splitlines()[-1])
    assert last["records"] == 2 and list(last["base_models"]) == ["allenai/OLMo-2-1124-7B"]

    res = CliRunner().invoke(main, ["recall", "rule", str(folder), "--config", "nope-full"])
    assert res.exit_code != 0 and "no data file of config 'nope-full'" in res.output
