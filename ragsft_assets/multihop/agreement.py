"""Statistics that validate a filter: validity among kept vs rejected, and agreement of two labelings.

The card validates each filter by annotating a blind sample (half kept, half rejected), comparing
validity between the two groups, and comparing two annotators or two regimes. Every statistic comes
from scipy / scikit-learn (no hand-written tests): Fisher's exact test and its sample odds ratio
(``scipy.stats.fisher_exact``), Wilson 95% intervals (``binomtest(...).proportion_ci("wilson")``),
the exact McNemar test as a binomial test on the discordant pairs (``scipy.stats.binomtest``), and
Cohen's kappa (``sklearn.metrics.cohen_kappa_score``).

Inputs are JSON lines: a label file holds ``{"id", "valid": true|false}``, a key file holds
``{"id", "group": "kept"|"rejected"}``. Only the ids that all the given files share are used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragsft_assets.json_lines import parse_json_lines

GROUPS = ("kept", "rejected")


class AgreementInputError(ValueError):
    """A label or key file that cannot be read as the protocol says."""


def _read_jsonl(path: Path, field: str, allowed: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with path.open("rb") as fh:
        for lineno, row in parse_json_lines(fh, path, AgreementInputError):
            if not isinstance(row, dict) or not isinstance(row.get("id"), str) or field not in row:
                raise AgreementInputError(f'{path}:{lineno}: expected {{"id": str, "{field}": ...}}')
            value = row[field]
            # bool is a subclass of int: compare types exactly so 1/0 are not taken for true/false.
            if not any(type(value) is type(a) and value == a for a in allowed):
                raise AgreementInputError(f"{path}:{lineno}: {field}={value!r}, expected one of {allowed}")
            if row["id"] in out and out[row["id"]] != value:
                raise AgreementInputError(
                    f"{path}:{lineno}: id {row['id']} appears twice with different {field}"
                )
            out[row["id"]] = value
    return out


def read_labels(path: str | Path) -> dict[str, bool]:
    """Read a label file: id -> valid."""
    return _read_jsonl(Path(path), "valid", (True, False))


def read_key(path: str | Path) -> dict[str, str]:
    """Read a key file: id -> group (``kept`` or ``rejected``)."""
    return _read_jsonl(Path(path), "group", GROUPS)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def share_with_wilson(valid: int, n: int) -> dict[str, Any]:
    """The valid share of ``n`` items with its Wilson 95% interval (``None`` when ``n`` is 0)."""
    from scipy.stats import binomtest

    if n == 0:
        return {"n": 0, "valid": 0, "valid_share": None, "wilson_low": None, "wilson_high": None}
    ci = binomtest(valid, n).proportion_ci(confidence_level=0.95, method="wilson")
    return {
        "n": n,
        "valid": valid,
        "valid_share": valid / n,
        "wilson_low": float(ci.low),
        "wilson_high": float(ci.high),
    }


def kept_vs_rejected(labels: Mapping[str, bool], key: Mapping[str, str], ids: list[str]) -> dict[str, Any]:
    """Validity among kept vs rejected for one label set, over ``ids``.

    Returns:
        ``groups`` (per group ``n``, ``valid``, ``valid_share``, ``wilson_low``, ``wilson_high``),
        ``table`` (``[[kept valid, kept invalid], [rejected valid, rejected invalid]]``),
        ``odds_ratio`` (the sample ratio scipy's ``fisher_exact`` returns; ``None`` when a cell is
        zero, where that ratio is 0, infinite or undefined) and ``fisher_p`` (two-sided).
    """
    from scipy.stats import fisher_exact

    table = [[0, 0], [0, 0]]
    for i in ids:
        table[GROUPS.index(key[i])][0 if labels[i] else 1] += 1
    groups = {g: share_with_wilson(table[r][0], sum(table[r])) for r, g in enumerate(GROUPS)}
    if min(sum(row) for row in table) == 0:
        # One group is empty: there is nothing to compare.
        return {"groups": groups, "table": table, "odds_ratio": None, "fisher_p": None}
    res = fisher_exact(table, alternative="two-sided")
    odds = None if min(min(row) for row in table) == 0 else _finite(res.statistic)
    return {"groups": groups, "table": table, "odds_ratio": odds, "fisher_p": float(res.pvalue)}


def between_labelings(a: Mapping[str, bool], b: Mapping[str, bool], ids: list[str]) -> dict[str, Any]:
    """Agreement of two label sets over ``ids``: Cohen's kappa and the exact McNemar test.

    Returns:
        ``kappa`` (``None`` when undefined, e.g. both sets constant and equal), ``mcnemar_p`` (two-sided
        binomial test of ``a_only`` among the ``a_only + b_only`` discordant pairs at p = 1/2; 1.0 with
        no discordant pair), ``a_only`` (valid in A only), ``b_only`` (valid in B only), ``agree``.
    """
    from scipy.stats import binomtest
    from sklearn.metrics import cohen_kappa_score

    ya = [bool(a[i]) for i in ids]
    yb = [bool(b[i]) for i in ids]
    a_only = sum(x and not y for x, y in zip(ya, yb, strict=True))
    b_only = sum(y and not x for x, y in zip(ya, yb, strict=True))
    discordant = a_only + b_only
    mcnemar_p = float(binomtest(a_only, discordant, 0.5).pvalue) if discordant else 1.0
    kappa = None
    if ids:
        import warnings

        with warnings.catch_warnings():
            # sklearn warns and returns nan when kappa is undefined (a single label in both sets).
            warnings.simplefilter("ignore")
            kappa = _finite(float(cohen_kappa_score(ya, yb, labels=[False, True])))
    return {
        "kappa": kappa,
        "mcnemar_p": mcnemar_p,
        "a_only": a_only,
        "b_only": b_only,
        "agree": len(ids) - discordant,
    }


def agreement_report(
    labels_a: Mapping[str, bool],
    labels_b: Mapping[str, bool] | None = None,
    key: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The one JSON object ``ragsft agreement`` prints.

    Args:
        labels_a: id -> valid, the first labeling.
        labels_b: id -> valid, a second labeling (another annotator or regime), optional.
        key: id -> ``kept``/``rejected``, optional.

    Returns:
        ``n`` (the ids all inputs share) and ``ids_only_in`` (per input, the ids left out). With a key:
        ``groups``, ``table``, top-level ``odds_ratio`` and ``fisher_p`` of LABELS_A, and, with
        LABELS_B, ``labels_b`` holding the same for B. With LABELS_B: top-level ``kappa``,
        ``mcnemar_p``, ``b_only``, ``a_only``, ``agree``. Without a key and without LABELS_B: the
        overall ``valid_share`` of A with its Wilson interval.

    Raises:
        AgreementInputError: when the inputs share no id.
    """
    inputs: dict[str, Mapping[str, Any]] = {"labels_a": labels_a}
    if labels_b is not None:
        inputs["labels_b"] = labels_b
    if key is not None:
        inputs["key"] = key
    shared = set(labels_a)
    for m in inputs.values():
        shared &= set(m)
    ids = sorted(shared)
    if not ids:
        raise AgreementInputError("the files share no id")
    out: dict[str, Any] = {
        "n": len(ids),
        "ids_only_in": {name: len(set(m) - shared) for name, m in inputs.items()},
    }
    if key is not None:
        out.update(kept_vs_rejected(labels_a, key, ids))
        if labels_b is not None:
            out["labels_b"] = kept_vs_rejected(labels_b, key, ids)
    if labels_b is not None:
        out.update(between_labelings(labels_a, labels_b, ids))
    if key is None and labels_b is None:
        out.update(share_with_wilson(sum(bool(labels_a[i]) for i in ids), len(ids)))
    return out
