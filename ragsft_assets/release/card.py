"""The generated dataset card (README body) and its PNG histograms.

Everything in the card is computed from the released files and the decision ledger: row counts,
the funnel of final decisions per product, schema tables, per-family statistics, the limitations
that can be measured (the audit's AUC when the multihop audit recorded one), the license and a
citation block. No timestamps: the same release gives the same bytes.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets.release import decisions as decisions_mod
from ragsft_assets.release.layout import CONFIGS_BY_NAME, PLOTS, PROVENANCE
from ragsft_assets.release.lineage import FILENAME_RE
from ragsft_assets.table_stats import markdown_table

# Metadata keys of multihop_audit that the card renders as sentences (see defs/multihop/assets.py).
AUDIT_AUC_KEY = "surface_auc_mean"
AUDIT_AUC_BAR_KEY = "surface_auc_bar"
LONGEST_RATE_KEY = "gold_longest_rate"
LONGEST_CHANCE_KEY = "gold_longest_chance"
AUDIT_KEYS = {AUDIT_AUC_KEY, AUDIT_AUC_BAR_KEY, LONGEST_RATE_KEY, LONGEST_CHANCE_KEY}


def _words(text: str | None) -> int:
    return len((text or "").split())


def _summary(values: Sequence[float]) -> tuple[object, object, object, object]:
    """(median, mean, p90, max) of a list, rounded; dashes when empty."""
    if not values:
        return ("-", "-", "-", "-")
    s = sorted(values)
    p90 = s[min(len(s) - 1, int(0.9 * len(s)))]
    return (round(statistics.median(s), 1), round(statistics.fmean(s), 1), p90, s[-1])


def _hf_feature(t: pa.DataType) -> str:
    try:
        from datasets import Features

        return str(Features.from_arrow_schema(pa.schema([("x", t)]))["x"])
    except Exception:  # the card never fails on a type `datasets` cannot name
        return "-"


def load_config(folder: Path, files: Mapping[str, str]) -> pa.Table:
    """All splits of one config, concatenated (split order of ``files``)."""
    return pa.concat_tables(
        [pq.read_table(folder / rel) for rel in files.values()], promote_options="default"
    )


def config_stats(
    family: str, table: pa.Table
) -> tuple[list[tuple[str, object, object, object, object]], dict]:
    """Statistics rows ``(measure, median, mean, p90, max)`` and raw series for the plots."""
    rows: list[tuple[str, object, object, object, object]] = []
    series: dict[str, list[float]] = {}
    data = table.to_pylist()
    if family == "corpus":
        series["abstract words"] = [_words(r.get("text")) for r in data]
        rows.append(("words per abstract", *_summary(series["abstract words"])))
        rows.append(("sentences per abstract", *_summary([len(r.get("sentences") or []) for r in data])))
        rows.append(("links per abstract", *_summary([len(r.get("links") or []) for r in data])))
    elif family == "multihop":
        series["documents per question"] = [len((r.get("context") or {}).get("title") or []) for r in data]
        series["question words"] = [_words(r.get("question")) for r in data]
        rows.append(("documents per question", *_summary(series["documents per question"])))
        rows.append(("question words", *_summary(series["question words"])))
        rows.append(("answer words", *_summary([_words(r.get("answer")) for r in data])))
    else:
        docs, total, resp = [], [], []
        answerable = 0
        for r in data:
            msgs = r.get("messages") or []
            prompt = " ".join(m.get("content") or "" for m in msgs if m.get("role") != "assistant")
            answer = " ".join(m.get("content") or "" for m in msgs if m.get("role") == "assistant")
            n_docs = r.get("chunks_total")
            docs.append(n_docs if n_docs is not None else len(FILENAME_RE.findall(prompt)))
            total.append(_words(prompt) + _words(answer))
            resp.append(_words(answer))
            answerable += bool(r.get("supporting_facts_titles"))
        series["documents per prompt"] = docs
        series["prompt + response words"] = total
        rows.append(("documents per prompt", *_summary(docs)))
        rows.append(("prompt + response words", *_summary(total)))
        rows.append(("response words", *_summary(resp)))
        share = round(answerable / len(data), 3) if data else "-"
        rows.append(("answerable share", share, "-", "-", "-"))
    return rows, series


def write_histograms(folder: Path, config: str, series: Mapping[str, Sequence[float]]) -> list[str]:
    """One PNG histogram per series under ``plots/``; returns their relative paths.

    Matplotlib's Agg backend, no ``Software`` metadata, fixed size and DPI: deterministic bytes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    (folder / PLOTS).mkdir(parents=True, exist_ok=True)
    for name, values in series.items():
        if not values:
            continue
        rel = f"{PLOTS}/{config}_{name.replace(' ', '_').replace('+', 'plus')}.png"
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        lo, hi = min(values), max(values)
        bins = min(40, max(1, int(hi - lo) + 1))
        ax.hist(values, bins=bins, color="#4a78b5", edgecolor="white")
        ax.set_xlabel(name)
        ax.set_ylabel("rows")
        ax.set_title(f"{config}: {name} (n={len(values)})")
        fig.tight_layout()
        fig.savefig(folder / rel, format="png", metadata={"Software": None})
        plt.close(fig)
        out.append(rel)
    return out


# Notes the card gives per filtered config (issue 13): how ours differs from the HotpotQA-fr card's.
FILTER_NOTES = {
    "filtered_qwen": (
        "In the HotpotQA-fr card `filtered_qwen` comes from a larger, later production; here it is a "
        "subset of `default` from the same production."
    ),
    "filtered_qwen_v2": (
        "The HotpotQA-fr card lists two train-only steps it does not describe (a publishability score "
        "and a descriptor check); they are left out here."
    ),
}
CRITERIA_FILTER = "criteria_annotation"
NOT_ANNOTATED = "not_annotated"


def _criteria_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The share of failures per criterion among annotated questions, and the never-annotated apart."""
    per: dict[str, list[int]] = {}
    for r in rows:
        if r["filter"].startswith(CRITERIA_FILTER + "/"):
            fails_total = per.setdefault(r["filter"].split("/", 1)[1], [0, 0])
            fails_total[0] += r["verdict"] == "fails"
            fails_total[1] += 1
    overall = [r for r in rows if r["filter"] == CRITERIA_FILTER]
    if not overall:
        return []
    skipped = sum(r["verdict"] == NOT_ANNOTATED for r in overall)
    table = [(f"`{c}`", f, n, round(f / n, 4) if n else "-") for c, (f, n) in per.items()]
    shares = [
        "Share of failures per criterion (of the annotated questions; a question can fail several):",
        "",
        markdown_table(["criterion", "fails", "annotated", "failure share"], table),
        "",
    ]
    return [
        *(shares if table else []),
        f"{skipped} of {len(overall)} questions were never annotated (`not_annotated`: interrupted run, "
        "budget, failed call or unreadable reply): excluded from the config and not counted as rejected.",
        "",
    ]


def _topic_lines(rows: Sequence[Mapping[str, Any]], kept_ids: set[str]) -> list[str]:
    """Keep rate by topic (the bridge's category) of the questions the config's filters saw."""
    topic_of = {r["id"]: r.get("topic") for r in rows}
    seen: dict[str, list[int]] = {}
    for qid, topic in topic_of.items():
        if topic is None:
            continue
        kept_total = seen.setdefault(topic, [0, 0])
        kept_total[0] += qid in kept_ids
        kept_total[1] += 1
    if not seen:
        return ["Keep rate by topic: no topic categories are known for this snapshot.", ""]
    unknown = sum(t is None for t in topic_of.values())
    table = [(t, k, n, round(k / n, 4)) for t, (k, n) in sorted(seen.items())]
    return [
        "Keep rate by topic (the bridge document's category):",
        "",
        markdown_table(["topic", "kept", "questions", "keep rate"], table),
        "",
        *([f"{unknown} questions have no known topic.", ""] if unknown else []),
    ]


def filter_sections(folder: Path, files: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Per filtered config (``provenance/<config>/verdicts.parquet``): the verdict table of every
    filter, the share of failures per criterion, the keep rate by topic where topics are known, and
    the notes on how the config differs from the HotpotQA-fr card's."""
    parts: list[str] = []
    for config, splits in files.items():
        path = folder / "provenance" / config / "verdicts.parquet"
        if not path.is_file():
            continue
        table = pq.read_table(path)
        rows = table.select(
            [c for c in ("id", "filter", "verdict", "kept", "topic") if c in table.schema.names]
        )
        data = rows.to_pylist()
        counts: dict[tuple[str, str, bool], int] = {}
        order: dict[str, int] = {}
        for r in data:
            order.setdefault(r["filter"], len(order))
            k = (r["filter"], r["verdict"], r["kept"])
            counts[k] = counts.get(k, 0) + 1
        if not parts:
            parts += ["## Filters", ""]
        parts += [f"### `{config}`: verdicts of each filter, in the order they ran", ""]
        if config in FILTER_NOTES:
            parts += [FILTER_NOTES[config], ""]
        table_rows = [
            (f, v, "kept" if kept else "dropped", n)
            for (f, v, kept), n in sorted(
                counts.items(), key=lambda kv: (order[kv[0][0]], not kv[0][2], kv[0][1])
            )
        ]
        parts += [markdown_table(["filter", "verdict", "outcome", "questions"], table_rows), ""]
        parts += _criteria_lines(data)
        kept_ids = {
            i
            for rel in splits.values()
            for i in pq.read_table(folder / rel, columns=["id"])["id"].to_pylist()
        }
        parts += _topic_lines(data, kept_ids)
    return parts


def render_card(
    folder: Path,
    partition: str,
    files: Mapping[str, Mapping[str, str]],
    decisions: pa.Table,
    *,
    limitations: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
    plots: bool = True,
    sections: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """The card's markdown body for a built release, and the plots it wrote.

    Args:
        folder: the release folder (data files already in place).
        partition: the snapshot key.
        files: ``{config: {split: rel path}}`` (from the README header).
        decisions: final decisions per candidate (``decisions.final_decisions``).
        limitations: measured numbers worth a warning, e.g. the multihop_audit keys
            ``{"surface_auc_mean": 0.71, "surface_auc_bar": 0.62, "gold_longest_rate": 0.4}``.
        notes: release notes (configs skipped, empty splits).
        plots: write the PNG histograms.
        sections: markdown lines a family adds under Statistics (the QA release's citation and
            question-mix tables, ``rag_sft.statistics.card_section``).
    """
    lim = dict(limitations or {})
    parts = [f"# ragsft release `{partition}`", ""]
    parts += [
        "Retrieval-augmented training data built from the Wikipedia snapshot "
        f"`{partition}` by [ragsft](https://github.com/) (a Dagster asset graph). Every row has an "
        "`id`; `provenance/<config>/lineage.parquet` maps it to its question, bridge pair, "
        "documents and article revisions, and `provenance/<config>/manifest.json` lists the "
        "SHA-256 of every file (`ragsft verify FOLDER`).",
        "",
        "## Configs",
        "",
    ]
    overview = []
    tables: dict[str, pa.Table] = {}
    for config, splits in files.items():
        tables[config] = t = load_config(folder, splits)
        counts = ", ".join(f"{s}: {pq.ParquetFile(folder / p).metadata.num_rows}" for s, p in splits.items())
        desc = CONFIGS_BY_NAME[config].description if config in CONFIGS_BY_NAME else ""
        overview.append((f"`{config}`", desc, counts, t.num_rows))
    parts += [markdown_table(["config", "what", "rows per split", "rows"], overview), ""]
    parts += ["```python", "from datasets import load_dataset", ""]
    parts += [f'{c} = load_dataset("path/to/this/folder", "{c}")' for c in files]
    parts += ["```", ""]
    if notes:
        parts += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]

    parts += ["## How it was built", ""]
    funnel = decisions_mod.funnel(decisions)
    if not funnel:
        parts += ["No decision ledger was recorded for this snapshot.", ""]
    for product, rows in funnel.items():
        kept = sum(n for _, v, _, n in rows if v == "kept")
        total = sum(n for *_, n in rows)
        parts += [f"### {product}: {kept} kept of {total} candidates", ""]
        parts += [markdown_table(["deciding stage", "verdict", "reason", "candidates"], rows), ""]

    parts += filter_sections(folder, files)

    parts += ["## Schema", ""]
    for config, t in tables.items():
        parts += [f"### `{config}`", ""]
        parts += [
            markdown_table(
                ["column", "Arrow type", "datasets feature"],
                [(f"`{f.name}`", f"`{f.type}`", f"`{_hf_feature(f.type)}`") for f in t.schema],
            ),
            "",
        ]

    parts += ["## Statistics", ""]
    written: list[str] = []
    for config, t in tables.items():
        family = CONFIGS_BY_NAME[config].family if config in CONFIGS_BY_NAME else "corpus"
        rows, series = config_stats(family, t)
        parts += [f"### `{config}` ({t.num_rows} rows)", ""]
        parts += [markdown_table(["measure", "median", "mean", "p90", "max"], rows), ""]
        if plots:
            for rel in write_histograms(folder, config, series):
                written.append(rel)
                parts += [f"![{rel}]({rel})", ""]
    parts += list(sections)
    parts += ["Lengths are whitespace-separated words, not model tokens.", ""]

    parts += ["## Known limitations", ""]
    # The keys multihop_audit really writes; -1.0 there means "not computed" (too few questions).
    auc = lim.get(AUDIT_AUC_KEY)
    if auc is not None and float(auc) >= 0:
        bar = lim.get(AUDIT_AUC_BAR_KEY, 0.62)
        verdict = "above" if float(auc) > float(bar) else "within"
        parts.append(
            f"- Surface-feature classifier AUC (finding the gold paragraphs from length, "
            f"in-degree, ranks...): **{float(auc):.3f}**, {verdict} the {bar} bar."
        )
    longest = lim.get(LONGEST_RATE_KEY)
    if longest is not None and float(longest) >= 0:
        chance = lim.get(LONGEST_CHANCE_KEY, -1.0)
        # Per question, either of the two golds being the longest: chance is 2/k (the card: 6.09% vs 20%).
        chance_text = f"{float(chance):.3f}" if float(chance) >= 0 else "2/k"
        parts.append(
            f"- A gold paragraph (either of the two) is the longest of its context in "
            f"{float(longest):.3f} of questions (chance: {chance_text}, for k paragraphs)."
        )
    for key, value in sorted(lim.items()):
        if key not in AUDIT_KEYS and not key.startswith("surface_auc"):
            parts.append(f"- {key}: {value}")
    parts += [
        "- Questions and responses are written by language models and filtered by model judges and "
        "deterministic checks; judges err, so some rows may be wrong or rely on one document only.",
        "- Abstracts only: facts outside the lead section of an article are out of reach.",
        "",
        "## License",
        "",
        "The text is derived from Wikipedia and is licensed under "
        "[CC BY-SA 4.0](https://creativecommons.org/licenses/by-sa/4.0/). Attribution: the article "
        "URLs and revision ids of every document are in `provenance/<config>/lineage.parquet`.",
        "",
        "## Citation",
        "",
        "```bibtex",
        "@misc{ragsft_" + partition.replace(".", "_").replace("-", "_") + ",",
        "  title = {ragsft: verified RAG training data from the Wikipedia snapshot " + partition + "},",
        "  note = {Dataset release; provenance and SHA-256 manifests in provenance/},",
        "}",
        "```",
        "",
        f"Provenance: `{PROVENANCE}/decisions.parquet` (final decision per candidate), "
        f"`{PROVENANCE}/<config>/manifest.json`, `{PROVENANCE}/<config>/lineage.parquet`.",
    ]
    return "\n".join(parts) + "\n", written
