"""The long-context family from a ``qa_source`` partition: examples, variant 2 rows, tables, release.

Dagster-free; the assets of ``defs/long_context`` call these in order:

1. ``examples_from_source``: the HotpotQA-layout rows of an installed source (``ragsft sources
   add``) as ``QAExample``s, the oracle passages being the supporting paragraphs (a ``passage``
   source such as NarrativeQA has exactly one: its summary).
2. ``raft.passage_rows`` / the embedder / ``neighbours.nearest_neighbours`` / ``raft.raft_examples``
   (variant 1).
3. ``syntactic_examples`` (variant 2): the RAFT context of each example with the five syntactic
   QA pairs of ``long_context.syntactic``, each pair its own row over the same context.
4. ``write_release``: the release folder (``release.layout`` + ``release.manifest``), verified with
   ``release.verify``.

Variant 2's questions name "the documents" and count over the context's documents, their texts in
the order shown, without the ``Document N:`` headers; a phrase (4-gram) is counted within one
document, never across two. So that the questions fit, its context is built under the budget minus
``reserve_tokens``; a row that still exceeds the budget is a counted rejection (``over_budget``),
never cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.arrow_schemas import MESSAGES, STRING_LIST, columns, strings
from ragsft_assets.ids import derived_id
from ragsft_assets.long_context import raft, syntactic
from ragsft_assets.long_context.raft import QAExample

SYNTACTIC_VARIANT = "raft_syntactic"
CLUSTERED_VARIANT = "clustered"
TRANSLATED_VARIANT = "raft_translated"  # = translate.VARIANT
ALL_VARIANTS = (raft.VARIANT, SYNTACTIC_VARIANT, CLUSTERED_VARIANT, TRANSLATED_VARIANT)
# Which variants a source builds, and with which values: long_context.recipes (the card's configs).

ROW_FIELDS = [
    *strings("id", "variant", "source_id"),
    ("messages", MESSAGES),
    ("oracle_positions", pa.list_(pa.int64())),
    ("distractor_ids", STRING_LIST),
    ("distractor_scores", pa.list_(pa.float64())),
    ("num_tokens", pa.int64()),
]
RAFT_SCHEMA = pa.schema(ROW_FIELDS)
SYNTACTIC_SCHEMA = pa.schema([*ROW_FIELDS, ("question_type", pa.string()), ("target", pa.string())])
CLUSTERED_SCHEMA = pa.schema(
    [
        *ROW_FIELDS,
        ("qa_source_ids", pa.list_(pa.string())),  # the example of each QA pair, in the order asked
        ("passage_cluster", pa.int64()),
        ("question_cluster", pa.int64()),
    ]
)
LINEAGE_SCHEMA = pa.schema(
    [
        *strings("id", "config", "source_id"),
        *columns(STRING_LIST, "passage_ids", "oracle_passage_ids", "embedding_keys"),
        ("oracle_kept", pa.bool_()),
        ("qa_source_ids", STRING_LIST),  # the examples whose QA pairs the row asks
        ("question_embedding_keys", STRING_LIST),  # clustered: their questions' vectors
    ]
)
EXAMPLES_SCHEMA = pa.schema(
    [
        *strings("id", "question", "answer"),
        *columns(STRING_LIST, "passages", "passage_ids"),
        ("history", MESSAGES),  # a conversational source's turns before the question
        ("cites", pa.bool_()),  # the answer cites its passages as [n] (renumbered where shown)
    ]
)


def join_sentences(sentences: Sequence[str]) -> str:
    """A paragraph's text from its sentences: as they are when they carry their own spacing
    (HotpotQA's do), else one space between them; a one-sentence paragraph is its text, unchanged."""
    out = ""
    for s in sentences:
        if out and not out[-1].isspace() and not s[:1].isspace():
            out += " "
        out += s
    return out


def examples_from_source(
    rows: Sequence[Mapping[str, Any]], cites: bool = False
) -> tuple[list[QAExample], list[dict[str, str]]]:
    """QA examples from HotpotQA-layout source rows, and the rows rejected (``no_oracle_passage``).

    The oracle passages of a row are its context paragraphs named by a supporting fact, each once,
    in context order. Examples come out sorted by id (the source's, or its derived one). ``cites``:
    the answers cite their oracle passages as ``[n]`` in that order (a RAG-TGE source).
    """
    out: list[QAExample] = []
    rejected: list[dict[str, str]] = []
    for r in sorted(rows, key=lambda r: r["id"]):
        facts = set(r["supporting_facts"]["title"])
        ctx = r["context"]
        passages = tuple(
            join_sentences(sents)
            for title, sents in zip(ctx["title"], ctx["sentences"], strict=True)
            if title in facts
        )
        passages = tuple(dict.fromkeys(p for p in passages if p.strip()))
        if not passages:
            rejected.append(
                {"id": r["id"], "reason": "no_oracle_passage", "detail": "no supporting paragraph"}
            )
            continue
        history = tuple((t["role"], t["content"]) for t in r.get("history") or ())
        out.append(QAExample(r["id"], passages, r["question"], r["answer"], history, cites))
    return out, rejected


def examples_table(examples: Sequence[QAExample]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "id": e.id,
                "question": e.question,
                "answer": e.answer,
                "passages": list(e.passages),
                "passage_ids": [raft.passage_id(p) for p in e.passages],
                "history": [{"role": r, "content": c} for r, c in e.history],
                "cites": e.cites,
            }
            for e in examples
        ],
        schema=EXAMPLES_SCHEMA,
    )


def examples_from_table(table: pa.Table) -> list[QAExample]:
    return [
        QAExample(
            r["id"],
            tuple(r["passages"]),
            r["question"],
            r["answer"],
            tuple((t["role"], t["content"]) for t in r.get("history") or ()),
            bool(r.get("cites")),
        )
        for r in table.to_pylist()
    ]


@dataclass(slots=True)
class SyntacticOutput:
    """Variant 2's rows and lineage, the rejections, and the skipped question types (counted)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def syntactic_examples(
    contexts: raft.RaftOutput,
    texts_by_id: Mapping[str, str],
    counter: raft.ChatTokenCounter,
    budget_tokens: int,
    seed: int,
    config: syntactic.SyntacticConfig | None = None,
) -> SyntacticOutput:
    """Variant 2: five syntactic QA pairs over each RAFT context, each pair a row of its own.

    Args:
        contexts: ``raft_examples`` built under ``budget_tokens - reserve`` (its rows' system
            messages are the contexts; its lineage gives the documents in order).
        texts_by_id: passage id -> text.
        counter: the trained model's token counter (every row is counted exactly).
        budget_tokens: the hard limit: a longer row is rejected (``over_budget``), never cut.
        seed: the run seed (the draws come from (seed, stage, context id, type)).
        config: the syntactic draw settings.
    """
    out = SyntacticOutput()
    lineage_by_id = {x["id"]: x for x in contexts.lineage}
    passages = [
        (row["id"], [texts_by_id[p] for p in lineage_by_id[row["id"]]["passage_ids"]])
        for row in contexts.rows
    ]
    qas, skipped = syntactic.generate(passages, seed=seed, config=config)
    out.skipped = skipped
    by_context = {row["id"]: row for row in contexts.rows}
    conversations = [
        [
            dict(by_context[qa.id]["messages"][0]),
            {"role": "user", "content": qa.question},
            {"role": "assistant", "content": qa.answer},
        ]
        for qa in qas
    ]
    counts = counter.count_many(conversations)  # exact, whole conversation, one batch
    for qa, messages, n_tokens in zip(qas, conversations, counts, strict=True):
        base = by_context[qa.id]
        rid = derived_id(SYNTACTIC_VARIANT, base["source_id"], qa.type)
        if n_tokens > budget_tokens:
            out.rejections.append(
                {"id": rid, "reason": "over_budget", "detail": f"{n_tokens} > {budget_tokens} tokens"}
            )
            continue
        out.rows.append(
            {
                **base,
                "id": rid,
                "variant": SYNTACTIC_VARIANT,
                "messages": messages,
                "num_tokens": n_tokens,
                "question_type": qa.type,
                "target": qa.target,
            }
        )
        out.lineage.append({**lineage_by_id[qa.id], "id": rid})
    out.rows.sort(key=lambda r: r["id"])
    out.lineage.sort(key=lambda r: r["id"])
    return out


def rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows sorted by id in the variant's schema (an empty list gives an empty table)."""
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["id"]), schema=schema)


def lineage_table(lineage: Sequence[Mapping[str, Any]], config: str) -> pa.Table:
    rows = [
        {"qa_source_ids": [x["source_id"]], "question_embedding_keys": [], **x, "config": config}
        for x in sorted(lineage, key=lambda r: r["id"])
    ]
    return pa.Table.from_pylist(rows, schema=LINEAGE_SCHEMA)


@dataclass(slots=True)
class VariantOutput:
    """What every variant produces: rows, lineage, rejections (empty for a variant not built)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class BuiltConfig:
    """One config to release: its rows and lineage, the asset and recipe that built it, rejections."""

    table: pa.Table
    lineage: pa.Table
    asset: str  # long_context/raft, ...
    recipe: Any  # long_context.recipes.LongContextRecipe (resolved)
    record: Mapping[str, Any]  # recipes.record of it: what the manifest and the card show
    rejections: Mapping[str, int]


_WHAT = {
    raft.VARIANT: "RAFT, the source question and answer.",
    SYNTACTIC_VARIANT: "the same kind of context with five exact syntactic questions per example"
    ' (word occurs / count, phrase occurs / count, word position), asked about "the documents":'
    " words counted over all of them, phrases within one; each its own row.",
    CLUSTERED_VARIANT: "one context per example from its passage and question k-means clusters: the"
    " other members' passages and QA pairs, as many as fit, so several QA pairs train on one"
    " context (`qa_source_ids`, in the order asked).",
    TRANSLATED_VARIANT: "the RAFT rows translated by the generator role, the instruction, each"
    " document and each turn apart, each checked to be whole and in the target language, `[n]`"
    " citations following their documents, recounted (least similar distractors dropped while over"
    " the budget).",
}


def config_stats(config: BuiltConfig) -> dict[str, Any]:
    """The card's numbers of one config: rows, budget, length, oracle positions, rejections."""
    rows = config.table.select(["oracle_positions", "num_tokens"]).to_pylist()
    return {
        "rows": config.table.num_rows,
        "budget": config.recipe.budget_tokens,
        "length": raft.length_stats([r["num_tokens"] for r in rows]),
        "positions": raft.oracle_position_histogram(rows),
        "rejections": dict(config.rejections),
    }


def card_body(
    partition: str,
    configs: Mapping[str, BuiltConfig],
    stats: Mapping[str, Mapping[str, Any]],
    notes: Sequence[str] = (),
) -> str:
    """The dataset card: what each config is, its recipe and tokenizer, the length distribution,
    the oracle positions, the rejections and each config's license.

    Args:
        partition: the ``qa_source`` key.
        configs: the configs released, by name.
        stats: ``config_stats`` of each.
        notes: lines to add (variants not built, ...).
    """
    from ragsft_assets import recipes

    lines = [
        f"# Long-context SFT from `{partition}` (RAFT augmentation)",
        "",
        "Each row is one chat example: the system message holds the documents (the oracle passage"
        " and its nearest passages by embedding, in a seeded random order), the user message the"
        " question, the assistant message the answer. `oracle_positions` says where the oracle is"
        " (0-based); `distractor_ids`/`distractor_scores` are the distractors' passage ids and inner"
        " products; `num_tokens` is the whole conversation under the trained model's chat template."
        " An answer that cites its documents as `[n]` (RAG-TGE) has them renumbered to the order shown."
        " `provenance/<config>/lineage.parquet` maps each row to its source example, passages and"
        " embedding cache keys.",
        "",
    ]
    for name, c in configs.items():
        lines.append(f"- `{name}`: {_WHAT[c.recipe.variant]}")
    lines += ["", "## Recipes", ""]
    for name, c in configs.items():
        lines.append(
            f"- `{name}`: {recipes.card_sentence(c.record)} Tokens counted with the tokenizer of"
            f" `{c.recipe.tokenizer_dir}` (the trained model's)."
        )
    lines += [
        "",
        "## Length (tokens, whole conversation)",
        "",
        "| config | rows | budget | median | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for config, s in stats.items():
        ln = s["length"]
        lines.append(
            f"| `{config}` | {s['rows']} | {s['budget']} | {ln['median']} | {ln['p99']} | {ln['max']} |"
        )
    lines += ["", "## Oracle position (0-based document index)", ""]
    for config, s in stats.items():
        hist = s["positions"]
        lines += [f"`{config}`:", "", "| position | rows |", "|---|---|"]
        lines += [f"| {p} | {n} |" for p, n in hist.items()] or ["| - | 0 |"]
        lines.append("")
    lines += ["## Rejected", "", "| config | reason | examples |", "|---|---|---|"]
    rejected = [(c, r, n) for c, s in stats.items() for r, n in sorted(s["rejections"].items())]
    lines += [f"| `{c}` | {r} | {n} |" for c, r, n in rejected] or ["| - | - | 0 |"]
    lines += ["", *notes] if notes else []
    lines += ["", "## License", ""]
    for name, c in configs.items():
        lines += [f"- `{name}` (`{c.recipe.license}`): {c.recipe.license_notice}"]
    return "\n".join(lines) + "\n"


def set_header_license(folder: Path, licenses: Sequence[str]) -> None:
    """Put the configs' license(s) in the README's YAML header: one id, or the list of them."""
    import yaml

    from ragsft_assets.release import layout
    from ragsft_assets.storage import atomic_write_bytes

    readme = folder / layout.README
    _, header, body = readme.read_text(encoding="utf-8").split("---\n", 2)
    meta = yaml.safe_load(header)
    meta["license"] = licenses[0] if len(licenses) == 1 else list(licenses)
    text = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body
    atomic_write_bytes(readme, text.encode("utf-8"))


def write_release(
    target: Path,
    partition: str,
    configs: Mapping[str, BuiltConfig],
    ledger: Sequence[Path],
    notes: Sequence[str] = (),
    *,
    source: Mapping[str, Any],
    run_config: Mapping[str, Any],
    resources: Mapping[str, Any] | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """Write the release folder (one ``train`` split per non-empty config), built aside and swapped in.

    Layout as every ragsft release (``release.layout``): README with the configs header (its
    ``license``: the configs' licenses) and the card, ``<config>/train-00000-of-00001.parquet``,
    ``provenance/decisions.parquet`` (final decision per candidate of these ``ledger`` files),
    ``provenance/<config>/lineage.parquet`` and ``manifest.json`` (with the config's ``license``
    and ``recipe`` record), ``provenance/release.json``, and ``plots/<config>_num_tokens.png`` /
    ``plots/<config>_oracle_position.png`` linked from the card. Returns ``({config: rows},
    {config: config_stats})``.

    Raises:
        ValueError: no config has a row (an empty split does not load with ``datasets``).
    """
    from ragsft_assets.release import layout, manifest, stream
    from ragsft_assets.release.build import lineage_path
    from ragsft_assets.release.card import write_histograms
    from ragsft_assets.release.decisions import write_final_decisions
    from ragsft_assets.storage import write_parquet

    kept = {c: b for c, b in configs.items() if b.table.num_rows}
    if not kept:
        raise ValueError(f"nothing to release for {partition}: every config is empty")
    stats = {c: config_stats(b) for c, b in kept.items()}
    body = card_body(partition, kept, stats, notes)
    staging = layout.staging_dir(target)
    try:
        files = layout.write_data_files(staging, {c: {"train": b.table} for c, b in kept.items()})
        with stream.connect() as con:
            write_final_decisions(con, list(ledger), staging / layout.PROVENANCE / manifest.DECISIONS)
        for config, b in kept.items():
            write_parquet(b.lineage, staging / lineage_path(config))
        plots = []
        for config, b in kept.items():  # deterministic PNGs (release.card's histograms)
            positions = [float(p) for ps in b.table["oracle_positions"].to_pylist() for p in ps]
            tokens = [float(n) for n in b.table["num_tokens"].to_pylist()]
            plots += write_histograms(staging, config, {"num_tokens": tokens, "oracle position": positions})
        if plots:
            body = body.rstrip("\n") + "\n\n## Plots\n\n" + "".join(f"![{p}]({p})\n\n" for p in plots)
        layout.write_readme(staging, files, body, f"ragsft {partition} long-context")
        set_header_license(staging, sorted({b.recipe.license for b in kept.values()}))
        prompts = {k: v for k, v in manifest.prompt_hashes().items() if k.startswith("long_context")}
        for config, splits in files.items():
            doc = manifest.build_manifest(
                staging,
                config=config,
                asset=kept[config].asset,
                partition=partition,
                data_files=splits,
                source=source,
                run_config=run_config,
                llm_roles={},
                extra_files={"lineage": lineage_path(config)},
                prompts=prompts,
                resources=resources,
            )
            doc["license"] = kept[config].recipe.license
            doc["recipe"] = dict(kept[config].record)
            manifest.write_manifest(staging, doc)
        manifest.write_release_index(staging, list(files))
        layout.swap_into_place(staging, target)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {c: b.table.num_rows for c, b in kept.items()}, stats
