"""The QA chain's ends: ``qa/questions`` (an installed outside set) and ``qa/release``.

The middle (``qa/rag_prompts`` ... ``qa/rag_sft``) is the SFT chain of ``assets.build_sft_chain``.
The release reuses the release package's plain functions (data files, decisions, lineage, card,
manifests, verification) on the ``qa_source`` partition, into ``releases/<key>/``.
"""

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.defs.check_results import check_result, verify_failures
from ragsft_assets.defs.metadata import funnel_metadata, table_metadata
from ragsft_assets.defs.partitions import qa_source_partitions
from ragsft_assets.defs.rag_sft.assets import (
    QA_GROUP,
    QA_INPUT_ASSET,
    QA_PREFIX,
    qa_rag_sft,
)
from ragsft_assets.defs.rag_sft.card import card_statistics
from ragsft_assets.rag_sft import licenses, multi_answer
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE
from ragsft_assets.release.layout import RAG_SFT_COLUMNS, ReleaseConfig
from ragsft_assets.release.notes_log import notes_line
from ragsft_assets.resources.store import ArtifactStore


class QaQuestionsConfig(dg.Config):
    """Which splits of the source feed the chain: the training split only, by default (the
    official dev set stays for evaluation); every kept question goes to the output split ``train``."""

    splits: list[str] = ["train"]


@dg.asset(
    partitions_def=qa_source_partitions,
    group_name=QA_GROUP,
    key_prefix=[QA_PREFIX],
    code_version="1",
    kinds={"parquet"},
)
def questions(
    context: dg.AssetExecutionContext, config: QaQuestionsConfig, store: ArtifactStore
) -> dg.MaterializeResult:
    """The questions of an installed source (``ragsft sources add``), in the HotpotQA layout."""
    from ragsft_assets.sources.read import read_source_folder

    partition = context.partition_key
    folder = store.home_path / "sources" / partition
    read = read_source_folder(folder)
    table = read.table
    counts = {
        s: int(pc.sum(pc.equal(table["split"], s)).as_py() or 0)
        for s in sorted(set(table["split"].to_pylist()))
    }
    if multi_answer.is_multi_answer(partition):
        # trust_align's card: train, and a validation split made of the source's test split (its
        # questions shared with train already removed by the reader), names kept.
        table = table.filter(pc.is_in(table["split"], value_set=pa.array([*config.splits, "validation"])))
    else:
        table = table.filter(pc.is_in(table["split"], value_set=pa.array(config.splits)))
        # One output split: the chain's `train`, whatever the source called the kept splits.
        table = table.set_column(
            table.schema.get_field_index("split"), "split", pa.array(["train"] * table.num_rows)
        )
    path = store.write(table, partition, QA_INPUT_ASSET)
    context.log.info(f"{partition}: {table.num_rows} question(s) kept of {read.table.num_rows} in {folder}")
    return dg.MaterializeResult(
        metadata={
            **table_metadata([path], table.schema, preview_columns=["id", "type", "level", "question"]),
            **funnel_metadata({f"source split {s}": n for s, n in counts.items()}, key="source_splits"),
            "splits_used": dg.MetadataValue.json(config.splits),
            "source_files": dg.MetadataValue.json(read.rows_per_file),
        }
    )


TRUST_ALIGN_CONFIG = ReleaseConfig(
    multi_answer.PRODUCT,
    "rag_sft",
    "rag_sft",
    "Multi-answer RAG SFT chat examples (Trust-Align ASQA/QAMPARI) with verified inline citations and refusals.",
    RAG_SFT_COLUMNS,  # the card: "Same three fields as" the citation config (HOTPOTQA_CITE)
)

# The QA chain's assets whose effective run config and model roles go into the manifests.
QA_UPSTREAM = [
    dg.AssetKey([QA_PREFIX, n])
    for n in (QA_INPUT_ASSET, "rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
]


@dg.asset(
    partitions_def=qa_source_partitions,
    group_name=QA_GROUP,
    key_prefix=[QA_PREFIX],
    code_version="qa-release-2",
    deps=[qa_rag_sft],
    kinds={"parquet", "huggingface"},
    check_specs=[
        dg.AssetCheckSpec("release_verifies", asset=dg.AssetKey([QA_PREFIX, "release"]), blocking=True)
    ],
)
def release(context: dg.AssetExecutionContext, store: ArtifactStore):  # noqa: ANN201
    """``releases/<key>/``: the citation config (the published config of the ``rag_sft`` rows;
    ``trust_align`` for a trust_align source) with its card, decisions, lineage, manifests."""
    from ragsft_assets.defs.release.assets import write_run_manifests
    from ragsft_assets.rag_sft.statistics import card_section
    from ragsft_assets.release import build
    from ragsft_assets.release.verify import verify_release

    partition = context.partition_key
    target = store.home_path / "releases" / partition
    multi = multi_answer.is_multi_answer(partition)
    # trust_align ships the chain's rag_sft under its own config name (the card's), alone.
    configs = [TRUST_ALIGN_CONFIG] if multi else None
    built = build.build_release(store.root, partition, target, configs=configs)
    if line := notes_line(built.notes):  # one line for the run log, not one per empty split
        context.log.info(line)
    stats = card_statistics(store, partition)
    sections = card_section(stats, multi_answer.PRODUCT if multi else HOTPOTQA_CITE)
    if multi:
        stats[multi_answer.PRODUCT] = multi_answer.card_statistics(
            store.read(partition, "rag_sft").to_pylist(),
            store.read(partition, "rag_prompts").select(["id", "question_id", "kind"]).to_pylist(),
            store.read(partition, QA_INPUT_ASSET)
            .select(["id", "type", "gold_answers", "answers_present", "label_origin"])
            .to_pylist(),
            store.read(partition, "rag_verdicts").select(["id", "kept"]).to_pylist(),
        )
        sections = [*sections, *multi_answer.card_section(stats[multi_answer.PRODUCT])]
    # The card's "Source data and licenses" of the product: not the Wikipedia abstracts' license.
    product = multi_answer.PRODUCT if multi else HOTPOTQA_CITE
    build.write_card(target, partition, sections=sections, license_lines=licenses.license_lines(product))
    # The same provenance as the snapshot release: each QA stage's effective config (Dagster's
    # config resolution, defaults included) and {stage: {role: {backend, model, ...}}}.
    manifests = write_run_manifests(context, store, target, "sources", QA_UPSTREAM)
    from ragsft_assets.defs.release.assets import record_digest

    digest, _ = record_digest(context, target, store.home_path, partition)  # logged, and kept outside
    report = verify_release(target, expected_digest=digest)
    rows = {f"{c}/{s}": n for c, splits in built.rows.items() for s, n in splits.items()}
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(rows.values()),
            "path": dg.MetadataValue.path(str(target)),
            "configs": dg.MetadataValue.json(sorted(manifests)),
            **funnel_metadata(rows, key="rows_per_split"),
            "decisions": built.decisions,
            "root_digest": digest,
            "statistics": dg.MetadataValue.json(stats),
            "llm_stages": dg.MetadataValue.json(sorted(next(iter(manifests.values()))["llm_roles"]))
            if manifests
            else dg.MetadataValue.json([]),
        }
    )
    yield check_result(
        check_name="release_verifies",
        passed=report.ok,
        failures=verify_failures(report),
        metadata={"report": dg.MetadataValue.md("\n".join(f"- {x}" for x in report.lines()))},
    )
