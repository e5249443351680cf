"""Jobs, one per family and one for everything, each over the ``snapshot`` partitions."""

from __future__ import annotations

import dagster as dg

from ragsft_assets.defs.partitions import snapshot_partitions

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
full_job = dg.define_asset_job(
    "full_job",
    selection=dg.AssetSelection.all(),
    partitions_def=snapshot_partitions,
    description="Everything, from the snapshot to the release.",
)

ALL_JOBS = [corpus_job, multihop_job, rag_sft_job, release_job, full_job]
