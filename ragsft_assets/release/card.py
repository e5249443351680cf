"""The generated dataset card (README body) and its PNG histograms.

Everything in the card is computed from the released files and the decision ledger: row counts,
the funnel of final decisions per product, schema tables, per-family statistics, the limitations
that can be measured (the audit's AUC when the multihop audit recorded one), the license and a
citation block. No timestamps: the same release gives the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragsft_assets import published_configs
from ragsft_assets.release import decisions as decisions_mod
from ragsft_assets.release.card_notes import condense_notes, provenance_link_counts
from ragsft_assets.release.layout import PLOTS, PROVENANCE, default_name, read_configs
from ragsft_assets.release.lineage import FILENAME_SQL, whitespace_class
from ragsft_assets.release.stream import unified_schema
from ragsft_assets.sql import sql_list, sql_literal
from ragsft_assets.storage import atomic_write_bytes
from ragsft_assets.table_stats import markdown_table

# Metadata keys of multihop_audit that the card renders as sentences (see defs/multihop/assets.py).
AUDIT_AUC_KEY = "surface_auc_mean"
AUDIT_AUC_BAR_KEY = "surface_auc_bar"
LONGEST_RATE_KEY = "gold_longest_rate"
LONGEST_CHANCE_KEY = "gold_longest_chance"
AUDIT_KEYS = {AUDIT_AUC_KEY, AUDIT_AUC_BAR_KEY, LONGEST_RATE_KEY, LONGEST_CHANCE_KEY}


def _words_sql(text: str) -> str:
    """``len((text or "").split())`` in DuckDB: runs of characters Python does not call whitespace."""
    return f"len(regexp_extract_all(coalesce({text}, ''), '[^{whitespace_class()}]+'))"


def _summary(values: Sequence[int]) -> tuple[object, object, object, object]:
    """(median, mean, p90, max) of integer measures, rounded; dashes when empty.

    The numbers of ``statistics.median``/``statistics.fmean`` over the same integers (a median of
    an odd count is an int, of an even count the float mean of the middle two), from a NumPy sort.
    """
    s = np.sort(np.asarray(values, dtype=np.int64))
    n = len(s)
    if n == 0:
        return ("-", "-", "-", "-")
    median = int(s[n // 2]) if n % 2 else (int(s[n // 2 - 1]) + int(s[n // 2])) / 2
    mean = int(s.sum()) / n  # fsum of ints / n: the exact sum, one rounding
    return (round(median, 1), round(mean, 1), int(s[min(n - 1, int(0.9 * n))]), int(s[-1]))


def _hf_feature(t: pa.DataType) -> str:
    try:
        from datasets import Features

        return str(Features.from_arrow_schema(pa.schema([("x", t)]))["x"])
    except Exception:  # the card never fails on a type `datasets` cannot name
        return "-"


def config_stats(
    family: str, files: Sequence[Path], provenance: Path | None = None
) -> tuple[list[tuple[str, object, object, object, object]], dict]:
    """Statistics rows ``(measure, median, mean, p90, max)`` and raw series for the plots.

    The per-row measures are computed by DuckDB over the config's Parquet files (all splits) and
    come back as integer columns: the rows themselves never become Python objects.
    """
    names = set(unified_schema(files).names)

    def col(name: str, expr: str | None = None, empty: str = "NULL") -> str:
        return (expr or f'"{name}"') if name in names else empty

    if family == "corpus":
        measures = {
            "words": _words_sql(col("text")),
            "sentences": f"coalesce(len({col('sentences')}), 0)",
            "links": f"coalesce(len({col('links')}), 0)",
        }
    elif family == "multihop":
        measures = {
            "docs": f"coalesce(len({col('context', 'context.title')}), 0)",
            "question": _words_sql(col("question")),
            "answer": _words_sql(col("answer")),
        }
    else:

        def joined(keep: str) -> str:
            msgs = col("messages", empty="[]::STRUCT(role VARCHAR, content VARCHAR)[]")
            return (
                f"array_to_string(list_transform(list_filter(coalesce({msgs}, []), lambda m: {keep}), "
                "lambda m: coalesce(m.content, '')), ' ')"
            )

        prompt, answer = joined("m.role IS DISTINCT FROM 'assistant'"), joined("m.role = 'assistant'")
        found = f"len(regexp_extract_all({prompt}, {sql_literal(FILENAME_SQL)}, 1))"
        measures = {
            "docs": f"coalesce({col('chunks_total')}, {found})",
            "total": f"{_words_sql(prompt)} + {_words_sql(answer)}",
            "resp": _words_sql(answer),
            "answerable": f"coalesce(len({col('supporting_facts_titles')}), 0) > 0",
        }
    select = ", ".join(f"{expr} AS {name}" for name, expr in measures.items())
    with duckdb.connect() as con:
        t = con.sql(
            f"SELECT {select} FROM read_parquet({sql_list(files)}, union_by_name=true)"
        ).to_arrow_table()
    v = {name: t[name].to_numpy() for name in measures}
    if family == "corpus" and "links" not in names and provenance is not None:
        v["links"] = provenance_link_counts(provenance, v["links"])  # the links ship in provenance
    rows: list[tuple[str, object, object, object, object]] = []
    series: dict[str, Any] = {}
    if family == "corpus":
        series["abstract words"] = v["words"]
        rows.append(("words per abstract", *_summary(v["words"])))
        rows.append(("sentences per abstract", *_summary(v["sentences"])))
        rows.append(("links per abstract", *_summary(v["links"])))
    elif family == "multihop":
        series["documents per question"] = v["docs"]
        series["question words"] = v["question"]
        rows.append(("documents per question", *_summary(v["docs"])))
        rows.append(("question words", *_summary(v["question"])))
        rows.append(("answer words", *_summary(v["answer"])))
    else:
        series["documents per prompt"] = v["docs"]
        series["prompt + response words"] = v["total"]
        rows.append(("documents per prompt", *_summary(v["docs"])))
        rows.append(("prompt + response words", *_summary(v["total"])))
        rows.append(("response words", *_summary(v["resp"])))
        share = round(int(v["answerable"].sum()) / t.num_rows, 3) if t.num_rows else "-"
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
        if len(values) == 0:
            continue
        rel = f"{PLOTS}/{config}_{name.replace(' ', '_').replace('+', 'plus')}.png"
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        lo, hi = int(min(values)), int(max(values))
        bins = min(40, max(1, int(hi - lo) + 1))
        ax.hist(values, bins=bins, color="#4a78b5", edgecolor="white")
        ax.set_xlabel(name)
        ax.set_ylabel("rows")
        ax.set_title(f"{config}: {name} (n={len(values)})")
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png", metadata={"Software": None})
        plt.close(fig)
        # atomic: a card killed mid-plot leaves no truncated PNG in the live release folder
        atomic_write_bytes(folder / rel, png.getvalue())
        out.append(rel)
    return out


# Notes the card gives per filtered config (issue 13): how ours differs from the HotpotQA-fr card's.
FILTER_NOTES = {c.name: c.card_note for c in published_configs.configs() if c.card_note}
# Every step and figure of the four seed cards, with where it lives in ragsft or why it differs.
CARDS_DOC = "docs/cards.md"
CARDS_DOC_LINE = (
    f"How each step and figure of the dataset cards this release follows is built, or why it differs: "
    f"`{CARDS_DOC}` in the ragsft repository."
)
CRITERIA_FILTER = "criteria_annotation"
NOT_ANNOTATED = "not_annotated"


def _criteria_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The share of failures per criterion among annotated questions, and the never-annotated apart.

    Over the view ``v`` (the config's verdict rows, ``rn`` their file order); criteria in the order
    they first appear.
    """
    total, skipped = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE verdict = {sql_literal(NOT_ANNOTATED)}) FROM v "
        f"WHERE filter = {sql_literal(CRITERIA_FILTER)}"
    ).fetchone()
    if not total:
        return []
    prefix = CRITERIA_FILTER + "/"
    per = con.execute(
        f"SELECT filter[{len(prefix) + 1}:], count(*) FILTER (WHERE verdict = 'fails'), count(*) FROM v "
        f"WHERE starts_with(filter, {sql_literal(prefix)}) GROUP BY filter ORDER BY min(rn)"
    ).fetchall()
    table = [(f"`{c}`", f, n, round(f / n, 4) if n else "-") for c, f, n in per]
    shares = [
        "Share of failures per criterion (of the annotated questions; a question can fail several):",
        "",
        markdown_table(["criterion", "fails", "annotated", "failure share"], table),
        "",
    ]
    return [
        *(shares if table else []),
        f"{skipped} of {total} questions were never annotated (`not_annotated`: interrupted run, "
        "budget, failed call or unreadable reply): excluded from the config and not counted as rejected.",
        "",
    ]


def _topic_lines(con: duckdb.DuckDBPyConnection, kept_files: Sequence[Path], has_topic: bool) -> list[str]:
    """Keep rate by topic (the bridge's category) of the questions the config's filters saw.

    A question's topic is that of its last verdict row; kept = its id is in the config's data files.
    """
    topics = "arg_max_null(topic, rn)" if has_topic else "NULL::VARCHAR"
    # the HotpotQA-fr configs ship their question key as `_id` (the card's Schéma)
    key = "_id" if kept_files and "_id" in pq.read_schema(kept_files[0]).names else "id"
    kept = f"id IN (SELECT {key} FROM read_parquet({sql_list(kept_files)}))" if kept_files else "false"
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW q AS SELECT id, {topics} AS topic, {kept} AS kept FROM v GROUP BY id"
    )
    seen = con.execute(
        "SELECT topic, count(*) FILTER (WHERE kept), count(*) FROM q WHERE topic IS NOT NULL "
        "GROUP BY topic ORDER BY topic"
    ).fetchall()
    if not seen:
        return ["Keep rate by topic: no topic categories are known for this snapshot.", ""]
    unknown = con.execute("SELECT count(*) FROM q WHERE topic IS NULL").fetchone()[0]
    table = [(t, k, n, round(k / n, 4)) for t, k, n in seen]
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
    the notes on how the config differs from the HotpotQA-fr card's.

    Counted in DuckDB over the Parquet files: the verdict rows (questions times filters) never
    become Python rows.
    """
    parts: list[str] = []
    shipped = read_configs(folder)
    for config, splits in files.items():
        path = folder / "provenance" / config / "verdicts.parquet"
        if not path.is_file():
            continue
        has_topic = "topic" in pq.read_schema(path).names
        con = duckdb.connect()
        try:
            con.execute(
                "CREATE TEMP VIEW v AS SELECT id, filter, verdict, kept"
                f"{', topic' if has_topic else ''}, file_row_number AS rn "
                f"FROM read_parquet({sql_literal(str(path))}, file_row_number=true)"
            )
            # filters in the order they ran (first appearance), kept before dropped, then verdict
            counts = con.execute(
                'SELECT c."filter", c.verdict, c.kept, c.n FROM '
                '(SELECT "filter", verdict, kept, count(*) AS n FROM v GROUP BY 1, 2, 3) c JOIN '
                '(SELECT "filter", min(rn) AS first FROM v GROUP BY 1) f USING ("filter") '
                "ORDER BY f.first, NOT c.kept, c.verdict"
            ).fetchall()
            if not parts:
                parts += ["## Filters", ""]
            parts += [f"### `{config}`: verdicts of each filter, in the order they ran", ""]
            note = FILTER_NOTES.get(default_name(shipped[config])) if config in shipped else None
            if note:  # the card's name (a renamed config keeps its note)
                parts += [note, ""]
            table_rows = [(f, v, "kept" if kept else "dropped", n) for f, v, kept, n in counts]
            parts += [markdown_table(["filter", "verdict", "outcome", "questions"], table_rows), ""]
            parts += _criteria_lines(con)
            kept_files = [folder / rel for rel in splits.values()]
            parts += _topic_lines(con, kept_files, has_topic)
        finally:
            con.close()
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
    license_lines: Sequence[str] | None = None,
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
        license_lines: the License section of a release not built from Wikipedia abstracts (an
            outside question set: its sources and licenses, ``rag_sft.licenses``); None: the
            snapshot's Wikipedia license, and the abstracts-only limitation.
    """
    lim = dict(limitations or {})
    parts = [f"# ragsft release `{partition}`", ""]
    parts += [
        "Retrieval-augmented training data built from the Wikipedia snapshot "
        f"`{partition}` by ragsft (a Dagster asset graph). Every row has an id: `id` in the "
        "corpus configs, `_id` in the HotpotQA-fr configs (as their card names it), and in "
        "`provenance/<config>/ids.parquet` (by split and row) for the RAG SFT configs, which "
        "ship the card's three fields only. `provenance/<config>/lineage.parquet` maps it to its "
        "question, bridge pair, documents and article revisions, and "
        "`provenance/<config>/manifest.json` lists the SHA-256 of every file "
        "(`ragsft verify FOLDER`).",
        "",
        CARDS_DOC_LINE,
        "",
        "## Configs",
        "",
    ]
    overview = []
    shipped = read_configs(folder)  # the names this release was built with (renamed configs included)
    # Schemas and row counts from the Parquet footers; the statistics are DuckDB queries (config_stats).
    schemas: dict[str, pa.Schema] = {}
    totals: dict[str, int] = {}
    for config, splits in files.items():
        schemas[config] = unified_schema([folder / p for p in splits.values()])
        per_split = {s: pq.ParquetFile(folder / p).metadata.num_rows for s, p in splits.items()}
        totals[config] = sum(per_split.values())
        counts = ", ".join(f"{s}: {n}" for s, n in per_split.items())
        desc = shipped[config].description if config in shipped else ""
        overview.append((f"`{config}`", desc, counts, totals[config]))
    parts += [markdown_table(["config", "what", "rows per split", "rows"], overview), ""]
    parts += ["```python", "from datasets import load_dataset", ""]
    parts += [f'{c} = load_dataset("path/to/this/folder", "{c}")' for c in files]
    parts += ["```", ""]
    if notes:
        parts += ["Notes:", ""] + [f"- {n}" for n in condense_notes(notes)] + [""]
    from ragsft_assets.release.diff import card_section  # "Changes since OLD" (issue 39), when recorded

    parts += card_section(folder)

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
    for config, schema in schemas.items():
        parts += [f"### `{config}`", ""]
        parts += [
            markdown_table(
                ["column", "Arrow type", "datasets feature"],
                [(f"`{f.name}`", f"`{f.type}`", f"`{_hf_feature(f.type)}`") for f in schema],
            ),
            "",
        ]

    parts += ["## Statistics", ""]
    written: list[str] = []
    for config, splits in files.items():
        family = shipped[config].family if config in shipped else "corpus"
        rows, series = config_stats(
            family, [folder / p for p in splits.values()], folder / PROVENANCE / config
        )
        parts += [f"### `{config}` ({totals[config]} rows)", ""]
        parts += [markdown_table(["measure", "median", "mean", "p90", "max"], rows), ""]
        if plots:
            for rel in write_histograms(folder, config, series):
                written.append(rel)
                parts += [f"![{rel}]({rel})", ""]
    parts += list(sections)
    parts += [
        "Lengths are whitespace-separated words, not model tokens, unless a row names its tokenizer.",
        "",
    ]

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
    ]
    if license_lines is None:
        parts.append("- Abstracts only: facts outside the lead section of an article are out of reach.")
    parts += ["", "## License", ""]
    parts += (
        list(license_lines)
        if license_lines is not None
        else [
            "The text is derived from Wikipedia and is licensed under "
            "[CC BY-SA 4.0](https://creativecommons.org/licenses/by-sa/4.0/). Attribution: the article "
            "URLs and revision ids of every document are in `provenance/<config>/lineage.parquet`."
        ]
    )
    parts += [
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
