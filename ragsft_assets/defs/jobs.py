"""Jobs: one per family over its partition set, and ``full_job`` for the snapshot families."""

from __future__ import annotations

import dagster as dg

from ragsft_assets.defs.partitions import base_model_partitions, qa_source_partitions, snapshot_partitions

# name -> (asset groups, partition set, description)
JOBS: dict[str, tuple[tuple[str, ...], dg.PartitionsDefinition, str]] = {
    "qa_sft_job": (
        ("qa_sft",),
        qa_source_partitions,
        "The QA chain on an outside question set (qa_source): questions, RAG SFT, release.",
    ),
    "long_context_job": (
        ("long_context",),
        qa_source_partitions,
        "Long-context SFT on an outside QA set: embeddings, neighbours, RAFT, syntactic, release.",
    ),
    "corpus_job": (
        ("corpus",),
        snapshot_partitions,
        "Abstracts, link graph and bridge pairs of one snapshot.",
    ),
    "multihop_job": (
        ("multihop",),
        snapshot_partitions,
        "Multi-hop questions: generation, checks, distractors, ablations, release format, audit.",
    ),
    "rag_sft_job": (("rag_sft",), snapshot_partitions, "RAG SFT with verified citations."),
    "release_job": (
        ("release",),
        snapshot_partitions,
        "Release folder, manifests, decision ledger, dataset card.",
    ),
    # Only the snapshot-partitioned families: recall (base_model partitions) has its own job.
    "full_job": (
        ("corpus", "multihop", "rag_sft", "release"),
        snapshot_partitions,
        "Everything, from the snapshot to the release.",
    ),
    "recall_job": (
        ("recall",),
        base_model_partitions,
        "Recall Rewrite: OASST1 claims, probes, base-model answers, rewrites, releases/recall/.",
    ),
}

# No partitions_def= (deprecated in Dagster 1.13, to go in 2.0): a job's partition set is inferred
# from its assets, every one of them on the set listed above (test_lineage_checks holds the two equal).
ALL_JOBS = [
    dg.define_asset_job(name, selection=dg.AssetSelection.groups(*groups), description=text)
    for name, (groups, _parts, text) in JOBS.items()
]
JOBS_BY_NAME = {job.name: job for job in ALL_JOBS}
full_job = JOBS_BY_NAME["full_job"]  # what the snapshot sensor and schedule request
