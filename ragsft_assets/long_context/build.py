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

Variant 2's "passage" (what the five questions count over) is the context's documents, their texts
joined by a blank line in the order shown, without the ``Document N:`` headers. So that the
questions fit, its context is built under the budget minus ``reserve_tokens``; a row that still
exceeds the budget is a counted rejection (``over_budget``), never cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.ids import derived_id
from ragsft_assets.long_context import raft, syntactic
from ragsft_assets.long_context.raft import QAExample

SYNTACTIC_VARIANT = "raft_syntactic"
CLUSTERED_VARIANT = "clustered"
TRANSLATED_VARIANT = "raft_translated"  # = translate.VARIANT
ALL_VARIANTS = (raft.VARIANT, SYNTACTIC_VARIANT, CLUSTERED_VARIANT, TRANSLATED_VARIANT)
# The card's configs per source (synthetic_convqa_raft / _raft_syntactic, narrativeqa_clustered,
# rag_tge_raft / _raft_zh); any other source builds the three untranslated variants.
DEFAULT_VARIANTS = {
    "synthetic_convqa": (raft.VARIANT, SYNTACTIC_VARIANT),
    "narrativeqa": (CLUSTERED_VARIANT,),
    "rag_tge": (raft.VARIANT, TRANSLATED_VARIANT),
}
DEFAULT_RESERVE = 96  # tokens kept free in variant 2's context for the syntactic question and answer

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
ROW_FIELDS = [
    ("id", pa.string()),
    ("variant", pa.string()),
    ("source_id", pa.string()),
    ("messages", pa.list_(MESSAGE)),
    ("oracle_positions", pa.list_(pa.int64())),
    ("distractor_ids", pa.list_(pa.string())),
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
        ("id", pa.string()),
        ("config", pa.string()),
        ("source_id", pa.string()),
        ("passage_ids", pa.list_(pa.string())),
        ("oracle_passage_ids", pa.list_(pa.string())),
        ("embedding_keys", pa.list_(pa.string())),
        ("oracle_kept", pa.bool_()),
        ("qa_source_ids", pa.list_(pa.string())),  # the examples whose QA pairs the row asks
        ("question_embedding_keys", pa.list_(pa.string())),  # clustered: their questions' vectors
    ]
)
EXAMPLES_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("passages", pa.list_(pa.string())),
        ("passage_ids", pa.list_(pa.string())),
        ("history", pa.list_(MESSAGE)),  # a conversational source's turns before the question
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


def examples_from_source(rows: Sequence[Mapping[str, Any]]) -> tuple[list[QAExample], list[dict[str, str]]]:
    """QA examples from HotpotQA-layout source rows, and the rows rejected (``no_oracle_passage``).

    The oracle passages of a row are its context paragraphs named by a supporting fact, each once,
    in context order. Examples come out sorted by id (the source's, or its derived one).
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
        out.append(QAExample(r["id"], passages, r["question"], r["answer"], history))
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


def context_text(passages: Sequence[str]) -> str:
    """What variant 2's questions count over: the documents' texts in context order, blank-line joined."""
    return "\n\n".join(passages)


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
        (row["id"], context_text([texts_by_id[p] for p in lineage_by_id[row["id"]]["passage_ids"]]))
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


def source_name(partition: str) -> str:
    """``narrativeqa.en`` -> ``narrativeqa``: the release config names start with it."""
    return partition.split(".", 1)[0]


def config_names(partition: str, language: str = "zh") -> dict[str, str]:
    """Release config names of a partition, by variant (``narrativeqa_raft``, ``rag_tge_raft_zh``)."""
    src = source_name(partition)
    return {
        raft.VARIANT: f"{src}_raft",
        SYNTACTIC_VARIANT: f"{src}_raft_syntactic",
        CLUSTERED_VARIANT: f"{src}_clustered",
        TRANSLATED_VARIANT: f"{src}_raft_{language}",
    }


def default_variants(partition: str) -> tuple[str, ...]:
    """The variants a source builds unless configured: the card's for its three sources."""
    return DEFAULT_VARIANTS.get(source_name(partition), (raft.VARIANT, SYNTACTIC_VARIANT, CLUSTERED_VARIANT))


@dataclass(slots=True)
class VariantOutput:
    """What every variant produces: rows, lineage, rejections (empty for a variant not built)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)


def card_body(
    partition: str,
    stats: Mapping[str, Mapping[str, Any]],
    notes: Sequence[str] = (),
    *,
    license: str = "",  # noqa: A002 (the card's word)
    translation_license: str = "",
    language: str = "zh",
) -> str:
    """The dataset card: what each config is, the length distribution and the oracle positions.

    Args:
        partition: the ``qa_source`` key.
        stats: ``{config: {"rows", "length": length_stats, "positions": histogram, "budget",
            "rejections": {reason: n}}}``.
        notes: lines to add at the end (e.g. skipped question types).
        license: the card's license line ("" = the texts keep their source's license).
        translation_license: the translated config's license (a translation can carry its
            model's license); "" = the same as the others.
        language: the translated config's language code.
    """
    names = config_names(partition, language)
    lines = [
        f"# Long-context SFT from `{partition}` (RAFT augmentation)",
        "",
        "Each row is one chat example: the system message holds the documents (the oracle passage"
        " and its nearest passages by embedding, in a seeded random order), the user message the"
        " question, the assistant message the answer. `oracle_positions` says where the oracle is"
        " (0-based); `distractor_ids`/`distractor_scores` are the distractors' passage ids and inner"
        " products; `num_tokens` is the whole conversation under the trained model's chat template."
        " `provenance/<config>/lineage.parquet` maps each row to its source example, passages and"
        " embedding cache keys.",
        "",
        f"- `{names[raft.VARIANT]}`: RAFT, the source question and answer.",
        f"- `{names[SYNTACTIC_VARIANT]}`: the same kind of context with five exact"
        " syntactic questions per example (word occurs / count, phrase occurs / count, word position),"
        " counted over the documents' texts; each its own row.",
        f"- `{names[CLUSTERED_VARIANT]}`: one context per example from its passage"
        " and question k-means clusters: the other members' passages and QA pairs, as many as fit, so"
        " several QA pairs train on one context (`qa_source_ids`, in the order asked).",
        f"- `{names[TRANSLATED_VARIANT]}`: `{names[raft.VARIANT]}` translated into `{language}` by the"
        " generator role, document by document and turn by turn, recounted (least similar distractors"
        " dropped while over the budget).",
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
    lines += [
        "",
        "## License",
        "",
        license or "The texts keep their source's license (see the source's card); the layout is ragsft's.",
    ]
    if translation_license:
        lines += ["", f"`{names[TRANSLATED_VARIANT]}`: {translation_license}"]
    return "\n".join(lines) + "\n"


def _asset_of(suffix: str) -> str:
    """The asset of a config suffix (raft, raft_syntactic, clustered; raft_<lang> is the translation)."""
    return suffix if suffix in (raft.VARIANT, SYNTACTIC_VARIANT, CLUSTERED_VARIANT) else TRANSLATED_VARIANT


def write_release(
    target: Path,
    partition: str,
    tables: Mapping[str, pa.Table],
    lineage: Mapping[str, pa.Table],
    ledger: Sequence[Path],
    body: str,
    *,
    source: Mapping[str, Any],
    run_config: Mapping[str, Any],
    resources: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Write the release folder (one ``train`` split per non-empty config), built aside and swapped in.

    Layout as every ragsft release (``release.layout``): README with the configs header and the
    card, ``<config>/train-00000-of-00001.parquet``, ``provenance/decisions.parquet`` (final
    decision per candidate of these ``ledger`` files), ``provenance/<config>/lineage.parquet`` and
    ``manifest.json``, ``provenance/release.json``, and ``plots/<config>_num_tokens.png`` /
    ``plots/<config>_oracle_position.png`` linked from the card. Returns ``{config: rows}``.

    Raises:
        ValueError: no config has a row (an empty split does not load with ``datasets``).
    """
    from ragsft_assets.release import layout, manifest, stream
    from ragsft_assets.release.build import lineage_path
    from ragsft_assets.release.card import write_histograms
    from ragsft_assets.release.decisions import write_final_decisions
    from ragsft_assets.storage import write_parquet

    kept = {c: t for c, t in tables.items() if t.num_rows}
    if not kept:
        raise ValueError(f"nothing to release for {partition}: every config is empty")
    staging = layout.staging_dir(target)
    try:
        files = layout.write_data_files(staging, {c: {"train": t} for c, t in kept.items()})
        with stream.connect() as con:
            write_final_decisions(con, list(ledger), staging / layout.PROVENANCE / manifest.DECISIONS)
        for config in kept:
            write_parquet(lineage[config], staging / lineage_path(config))
        plots = []
        for config, table in kept.items():  # deterministic PNGs (release.card's histograms)
            positions = [float(p) for ps in table["oracle_positions"].to_pylist() for p in ps]
            tokens = [float(n) for n in table["num_tokens"].to_pylist()]
            plots += write_histograms(staging, config, {"num_tokens": tokens, "oracle position": positions})
        if plots:
            body = body.rstrip("\n") + "\n\n## Plots\n\n" + "".join(f"![{p}]({p})\n\n" for p in plots)
        layout.write_readme(staging, files, body, f"ragsft {partition} long-context")
        prompts = {k: v for k, v in manifest.prompt_hashes().items() if k.startswith("long_context")}
        for config, splits in files.items():
            doc = manifest.build_manifest(
                staging,
                config=config,
                asset=f"long_context/{_asset_of(config[len(source_name(partition)) + 1 :])}",
                partition=partition,
                data_files=splits,
                source=source,
                run_config=run_config,
                llm_roles={},
                extra_files={"lineage": lineage_path(config)},
                prompts=prompts,
                resources=resources,
            )
            manifest.write_manifest(staging, doc)
        manifest.write_release_index(staging, list(files))
        layout.swap_into_place(staging, target)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {c: t.num_rows for c, t in kept.items()}
