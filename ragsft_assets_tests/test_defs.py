"""The whole code location loads, with the asset graph, checks and jobs we expect."""

from __future__ import annotations

import dagster as dg

from ragsft_assets.definitions import defs

EXPECTED_ASSETS = [
    "ablation_verdicts",
    "abstracts",
    "bridge_judge",
    "bridge_pairs",
    "claim_audit",
    "claims",
    "corpus_filtered_qwen_v2",
    "criteria_annotation",
    "dataset_card",
    "descriptor_check",
    "distractors",
    "first_hop",
    "known_claims",
    "language_judge",
    "link_graph",
    "long_context/clustered",
    "long_context/examples",
    "long_context/neighbours",
    "long_context/passage_embeddings",
    "long_context/raft",
    "long_context/raft_syntactic",
    "long_context/raft_translated",
    "long_context/release",
    "mechanical_rules",
    "multihop_audit",
    "multihop_filtered",
    "multihop_filtered_qwen",
    "multihop_filtered_qwen_v2",
    "multihop_questions",
    "oasst_pairs",
    "plan_forecast",
    "probe_answers",
    "probe_labels",
    "probes",
    "publishability_score",
    "qa/questions",
    "qa/rag_prompts",
    "qa/rag_responses",
    "qa/rag_sft",
    "qa/rag_verdicts",
    "qa/release",
    "question_checks",
    "question_drafts",
    "rag_prompts",
    "rag_responses",
    "rag_sft",
    "rag_verdicts",
    "recall_release",
    "release",
    "release_diff",
    "release_manifest",
    "review_labels",
    "rewrites",
    "snapshot_files",
]


def test_asset_keys() -> None:
    repo = defs.get_repository_def()
    keys = sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys())
    assert keys == EXPECTED_ASSETS


def test_jobs_and_automation() -> None:
    repo = defs.get_repository_def()
    jobs = {j.name for j in repo.get_all_jobs()}
    assert {"corpus_job", "multihop_job", "rag_sft_job", "release_job", "full_job", "recall_job"} <= jobs
    # full_job covers the snapshot families only; recall runs on the base_model partitions
    full = {k.to_user_string() for k in repo.get_job("full_job").asset_layer.executable_asset_keys}
    assert "release" in full and not full & {"claims", "rewrites", "recall_release"}
    assert not any(k.startswith("qa/") for k in full)  # the QA chain runs on qa_source, in qa_sft_job
    # review_labels needs a sample path in its run config: no job selects it (Dagster's implicit
    # __ASSET_JOB holds every asset)
    assert not any("review_labels" in {k.to_user_string() for k in j.asset_layer.executable_asset_keys}
                   for j in repo.get_all_jobs() if not j.name.startswith("__"))  # fmt: skip
    qa = {k.to_user_string() for k in repo.get_job("qa_sft_job").asset_layer.executable_asset_keys}
    assert qa == {k for k in EXPECTED_ASSETS if k.startswith("qa/")}
    lc = {k.to_user_string() for k in repo.get_job("long_context_job").asset_layer.executable_asset_keys}
    assert lc == {k for k in EXPECTED_ASSETS if k.startswith("long_context/")}
    assert not full & lc
    assert repo.get_sensor_def("new_snapshot_sensor") is not None
    assert repo.schedule_defs, "a schedule is defined"


def test_every_asset_is_partitioned_and_versioned() -> None:
    repo = defs.get_repository_def()
    # Recall Rewrite: the model-independent stages unpartitioned, the rest per base model.
    recall_shared = {"oasst_pairs", "claims", "claim_audit", "probes"}
    for key in repo.asset_graph.get_all_asset_keys():
        node = repo.asset_graph.get(key)
        name = key.to_user_string()
        if name in recall_shared:
            assert node.partitions_def is None, key
        else:
            assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition), key
            expected = {"recall": "base_model", "qa_sft": "qa_source", "long_context": "qa_source"}.get(
                node.group_name, "snapshot"
            )
            assert node.partitions_def.name == expected, key
        assert node.code_version, f"{key.to_user_string()} has no code version"


def test_llm_assets_run_in_gpu_pool() -> None:
    repo = defs.get_repository_def()
    llm_assets = {
        "question_drafts", "ablation_verdicts", "first_hop", "criteria_annotation", "bridge_judge",
        "language_judge", "rag_responses", "rag_verdicts"
    }  # fmt: skip
    embedding_assets = ["long_context/passage_embeddings", "long_context/clustered"]
    embedding_assets.append("long_context/raft_translated")  # the generator role translates
    for name in [*llm_assets, "qa/rag_responses", "qa/rag_verdicts", *embedding_assets]:
        node = repo.asset_graph.get(dg.AssetKey.from_user_string(name))
        assert node.pools == {"gpu"} or "gpu" in (node.pools or set()), name


def test_blocking_checks_exist() -> None:
    repo = defs.get_repository_def()
    check_keys = repo.asset_graph.asset_check_keys
    checked_assets = {k.asset_key.to_user_string() for k in check_keys}
    assert {
        "abstracts", "link_graph", "multihop_questions", "multihop_filtered", "multihop_filtered_qwen", "rag_sft"
    } <= checked_assets  # fmt: skip


def test_llm_assets_versions_follow_their_prompts() -> None:
    # derived from the templates and the recipe (issue 38; test_lineage_versions edits them)
    from ragsft_assets.defs.multihop.common import stage_version
    from ragsft_assets.multihop.ablations import PROMPT_TASKS

    repo = defs.get_repository_def()
    expected = {
        "question_drafts": stage_version("question_drafts", ("multihop_question",)),
        "ablation_verdicts": stage_version("ablation_verdicts", PROMPT_TASKS),
    }
    for name, version in expected.items():
        assert repo.asset_graph.get(dg.AssetKey(name)).code_version == version, name
    assert expected["question_drafts"] != expected["ablation_verdicts"]
