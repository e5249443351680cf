"""Jobs, one per family and one for everything, each over the ``snapshot`` partitions."""

from __future__ import annotations

import dagster as dg

from ragsft_assets.defs.partitions import base_model_partitions, qa_source_partitions, snapshot_partitions

corpus_job = dg.define_asset_job(
    "corpus_job",
    selection=dg.AssetSelection.groups("corpus"),
    partitions_def=snapshot_partitions,
    description="Abstracts, link graph and bridge pairs of one snapshot.",
)
multihop_job = dg.define_asset_job(
    "multihop_job",
    selection=dg.AssetSelection.groups("multihop"),
    partitions_def=snapshot_partitions,
    description="Multi-hop questions: generation, checks, distractors, ablations, release format, audit.",
)
rag_sft_job = dg.define_asset_job(
    "rag_sft_job",
    selection=dg.AssetSelection.groups("rag_sft"),
    partitions_def=snapshot_partitions,
    description="RAG SFT with verified citations.",
)
release_job = dg.define_asset_job(
    "release_job",
    selection=dg.AssetSelection.groups("release"),
    partitions_def=snapshot_partitions,
    description="Release folder, manifests, decision ledger, dataset card.",
)
qa_sft_job = dg.define_asset_job(
    "qa_sft_job",
    selection=dg.AssetSelection.groups("qa_sft"),
    partitions_def=qa_source_partitions,
    description="The QA chain on an outside question set (qa_source): questions, RAG SFT, release.",
)
full_job = dg.define_asset_job(
    "full_job",
    # Only the snapshot-partitioned families: recall (base_model partitions) has its own job.
    selection=dg.AssetSelection.groups("corpus", "multihop", "rag_sft", "release"),
    partitions_def=snapshot_partitions,
    description="Everything, from the snapshot to the release.",
)
recall_job = dg.define_asset_job(
    "recall_job",
    selection=dg.AssetSelection.groups("recall"),
    partitions_def=base_model_partitions,
    description="Recall Rewrite: OASST1 claims, probes, base-model answers, rewrites, releases/recall/.",
)
long_context_job = dg.define_asset_job(
    "long_context_job",
    selection=dg.AssetSelection.groups("long_context"),
    partitions_def=qa_source_partitions,
    description="Long-context SFT on an outside QA set: embeddings, neighbours, RAFT, syntactic, release.",
)

ALL_JOBS = [
    qa_sft_job,
    long_context_job,
    corpus_job,
    multihop_job,
    rag_sft_job,
    release_job,
    full_job,
    recall_job,
]
