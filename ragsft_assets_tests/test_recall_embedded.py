"""recall_job end to end with the embedded model in every role, on 2 OASST1 pairs (kept short for CI).

SmolLM2-135M-Instruct is an instruct model, not a base model: its claims, labels and rewrites are
poor (on these two trees it repeats one claim until the schema's item bound; the greeting's
decomposition is dropped with a reason, the other example reaches the release). The test checks the plumbing: real chat
through vLLM, every stage tolerating the model's output, and the release verifying and loading when
anything is kept; the double-backed ``test_recall_job`` covers the loaded release.
"""

from __future__ import annotations

import dagster as dg
import orjson
import pytest

from ragsft_assets.definitions import build_definitions
from ragsft_assets.defs.partitions import BASE_MODEL_PARTITIONS_NAME
from ragsft_assets.defs.recall.assets import model_partition
from ragsft_assets.defs.resources import default_resources
from ragsft_assets.recall.schema import FULL_SCHEMA
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.test_recall_stages import TREES

pytestmark = pytest.mark.integration
KEY = "smollm2-135m"
# oasst1-0025 (days until Christmas: a fact to probe) and oasst1-0045 (a greeting), in the 100 trees
SHORT = {"4d1e7e40-c695-4fe3-b7b3-72b434eacf80", "9290c267-45c3-4fb1-bcd1-a1a2ed6b1e25"}


def test_recall_job_embedded_two_examples(embedded_model, tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    roles = {role: embedded_model for role in ("judge", "generator", "base_model")}
    job = build_definitions({**default_resources(), "store": store, **roles}).resolve_job_def("recall_job")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(BASE_MODEL_PARTITIONS_NAME, [KEY])
    # Two trees with short replies (few claims, so few probes and answers) keep the CPU run short.
    trees = tmp_path / "two_trees.jsonl"
    lines = TREES.read_bytes().splitlines()
    trees.write_bytes(
        b"\n".join(line for line in lines if orjson.loads(line)["message_tree_id"] in SHORT) + b"\n"
    )
    run_config = {
        "ops": {
            "oasst_pairs": {"config": {"trees_path": str(trees)}},
            # a short decomposition keeps the CPU run short (a recipe override, as a user would)
            "claims": {"config": {"overrides": {"claims_max_tokens": 512}}},
        }
    }
    result = job.execute_in_process(
        run_config=run_config, instance=instance, partition_key=KEY, raise_on_error=False
    )
    failed = [e.step_key for e in result.all_events if e.is_step_failure]
    md = result.asset_materializations_for_node("claims")[0].metadata
    assert md["llm/judge/requests"].value == 2  # one decomposition per example
    # the engine really answered (a broken engine errors every call, and every example would drop)
    assert md["llm/judge/errors"].value == 0 and md["llm/judge/completion_tokens"].value > 0
    kept = store.read(model_partition(KEY), "rewrites").num_rows
    assert kept <= 2  # an example may be dropped with a reason, never crash the run
    release_md = result.asset_materializations_for_node("recall_release")
    folder = tmp_path / "releases" / "recall"
    if kept == 0:
        # SmolLM2 left nothing readable: only the release fails, loudly (nothing to release),
        # instead of writing an empty split that `datasets` cannot load.
        assert failed == ["recall_release"] and not release_md
        return
    assert failed == [] and result.success
    assert release_md[0].metadata["empty_base_models"].value == []
    assert verify_release(folder).ok, verify_release(folder).lines()
    import datasets

    full = datasets.load_dataset(str(folder), f"{KEY}-full", split="train")
    assert full.column_names == FULL_SCHEMA.names
    assert full.num_rows == kept
    assert set(full["base_model"]) <= {embedded_model.model_identity()["model"]}
