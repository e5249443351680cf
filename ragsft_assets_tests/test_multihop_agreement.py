"""``ragsft agreement`` against hand-checked tables (values worked out by hand, then compared)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.multihop.agreement import AgreementInputError, agreement_report

Z95 = 1.959963984540054


def _wilson(k: int, n: int) -> tuple[float, float]:
    # The textbook formula, to check scipy's interval against an independent computation.
    p = k / n
    denom = 1 + Z95**2 / n
    center = (p + Z95**2 / (2 * n)) / denom
    half = Z95 / denom * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
    return center - half, center + half


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _run(*args: str) -> dict:
    res = CliRunner().invoke(main, ["agreement", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_kept_vs_rejected_hand_table(tmp_path: Path) -> None:
    # kept: 8 valid of 10; rejected: 1 valid of 10 -> odds ratio (8*9)/(2*1) = 36.
    ids = [f"q{i:02d}" for i in range(20)]
    key = [{"id": i, "group": "kept" if n < 10 else "rejected"} for n, i in enumerate(ids)]
    valid = set(ids[:8]) | {ids[10]}
    labels = [{"id": i, "valid": i in valid} for i in ids]
    out = _run(_write(tmp_path / "a.jsonl", labels), "--key", _write(tmp_path / "key.jsonl", key))
    assert out["n"] == 20
    assert out["table"] == [[8, 2], [1, 9]]
    assert out["odds_ratio"] == pytest.approx(36.0)
    # Fisher two-sided p by hand: hypergeometric over tables with 10 per row, 9 valid in all, summing
    # those no more likely than the observed one.
    probs = [math.comb(10, k) * math.comb(10, 9 - k) / math.comb(20, 9) for k in range(10)]
    expected_p = sum(p for p in probs if p <= probs[8] * (1 + 1e-7))
    assert out["fisher_p"] == pytest.approx(expected_p, rel=1e-9)
    kept = out["groups"]["kept"]
    assert kept["valid_share"] == pytest.approx(0.8)
    assert (kept["wilson_low"], kept["wilson_high"]) == pytest.approx(_wilson(8, 10), rel=1e-9)
    rej = out["groups"]["rejected"]
    assert rej["valid_share"] == pytest.approx(0.1)
    assert (rej["wilson_low"], rej["wilson_high"]) == pytest.approx(_wilson(1, 10), rel=1e-9)
    assert "kappa" not in out  # one label set only


def test_zero_cell_gives_null_odds_ratio(tmp_path: Path) -> None:
    # [[3, 0], [0, 3]]: the sample odds ratio is infinite -> null; Fisher p = 2 / C(6, 3) = 0.1.
    key = {f"k{i}": "kept" for i in range(3)} | {f"r{i}": "rejected" for i in range(3)}
    labels = {i: g == "kept" for i, g in key.items()}
    out = agreement_report(labels, key=key)
    assert out["table"] == [[3, 0], [0, 3]]
    assert out["odds_ratio"] is None
    assert out["fisher_p"] == pytest.approx(0.1)
    assert out["groups"]["rejected"]["valid_share"] == 0.0
    assert out["groups"]["rejected"]["wilson_low"] == pytest.approx(0.0, abs=1e-12)
    assert out["groups"]["kept"]["wilson_high"] == pytest.approx(1.0)
    # One zero cell only ([[3, 0], [1, 2]]): the sample ratio would be inf as well.
    labels["r0"] = True
    out = agreement_report(labels, key=key)
    assert out["table"] == [[3, 0], [1, 2]] and out["odds_ratio"] is None
    assert out["fisher_p"] == pytest.approx(0.4)  # P(k=1) + P(k=3) = 3/15 + 3/15 by hand


def test_two_labelings_kappa_and_mcnemar(tmp_path: Path) -> None:
    # both valid: 0,1; A only: 2; B only: 3..7; both invalid: 8,9.
    ids = [f"q{i}" for i in range(10)]
    a = {i: n in (0, 1, 2) for n, i in enumerate(ids)}
    b = {i: n in (0, 1, 3, 4, 5, 6, 7) for n, i in enumerate(ids)}
    pa = _write(tmp_path / "a.jsonl", [{"id": i, "valid": v} for i, v in a.items()])
    # B has one extra id that A lacks: statistics use the shared ids only.
    pb = _write(
        tmp_path / "b.jsonl", [{"id": i, "valid": v} for i, v in b.items()] + [{"id": "x", "valid": True}]
    )
    out = _run(pa, pb)
    assert out["n"] == 10 and out["ids_only_in"] == {"labels_a": 0, "labels_b": 1}
    assert (out["a_only"], out["b_only"], out["agree"]) == (1, 5, 4)
    # exact McNemar: 2 * P(X <= 1), X ~ Bin(6, 1/2) = 2 * 7 / 64.
    assert out["mcnemar_p"] == pytest.approx(14 / 64)
    # kappa: po = 0.4, pe = 0.3 * 0.7 + 0.7 * 0.3 = 0.42 -> (0.4 - 0.42) / 0.58.
    assert out["kappa"] == pytest.approx(-0.02 / 0.58)
    assert "odds_ratio" not in out  # no key


def test_two_labelings_with_key_and_no_discordance(tmp_path: Path) -> None:
    ids = [f"q{i}" for i in range(4)]
    key = {i: ("kept" if n < 2 else "rejected") for n, i in enumerate(ids)}
    a = {i: n != 3 for n, i in enumerate(ids)}
    out = agreement_report(a, dict(a), key)
    assert (out["a_only"], out["b_only"], out["mcnemar_p"]) == (0, 0, 1.0)
    assert out["kappa"] == pytest.approx(1.0)
    assert out["labels_b"]["table"] == out["table"] == [[2, 0], [1, 1]]
    # all valid in both: kappa is undefined -> null, not a crash
    out = agreement_report(dict.fromkeys(ids, True), dict.fromkeys(ids, True))
    assert out["kappa"] is None


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "valid": 1}\n', encoding="utf-8")
    res = CliRunner().invoke(main, ["agreement", str(bad)])
    assert res.exit_code != 0 and "bad.jsonl:1" in res.output and "valid=1" in res.output
    with pytest.raises(AgreementInputError, match="share no id"):
        agreement_report({"a": True}, {"b": False})
    key = _write(tmp_path / "k.jsonl", [{"id": "q1", "group": "dropped"}])
    ok = _write(tmp_path / "a.jsonl", [{"id": "q1", "valid": True}])
    res = CliRunner().invoke(main, ["agreement", ok, "--key", key])
    assert res.exit_code != 0 and "group='dropped'" in res.output
