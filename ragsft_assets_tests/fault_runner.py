"""Test-only: the graph up to an LLM stage, run in a subprocess that the fault-injection tests SIGKILL.

``python -m ragsft_assets_tests.fault_runner HOME DELAY_S MAX_PAIRS [stage-only]`` materializes
``question_drafts`` and (without a 4th argument) everything upstream (the corpus build included) for the sample snapshot into HOME, in
``$DAGSTER_HOME``'s instance, the way the CLI runs (dead-run clean-up, process tags, stoppable). The
model is the oracle double behind a registered backend, so every call goes through the real
``LLMResource`` client and its cache (HOME/llm_cache): the parent counts cache entries. DELAY_S slows
each call so that a kill lands mid-batch.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets_tests.oracle_double import Oracle

KEY = "sample.fr"
BACKEND = "fault-oracle"
STAGE = "question_drafts"


class OracleBackend:
    """The oracle double as a backend: answers each chat request, ``delay_s`` per call."""

    def __init__(self, model: str = "oracle", delay_s: float = 0.0) -> None:
        self.model, self.delay_s, self.oracle = model, delay_s, Oracle()
        self.calls = 0

    def identity(self) -> dict[str, str]:
        return {"backend": BACKEND, "model": self.model, "weights_sha256": "0" * 64}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, r in enumerate(requests):
            time.sleep(self.delay_s)
            self.calls += 1
            text = self.oracle(r.messages)
            on_result(i, Completion(text=text, prompt_tokens=1, completion_tokens=len(text.split())))

    def close(self) -> None:
        pass


def run(home: Path, delay_s: float, max_pairs: int, stage_only: bool = False) -> dg.ExecuteInProcessResult:
    """Run the stage (and its upstream unless ``stage_only``) into ``home`` the way the CLI does."""
    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.resources import LLM_ROLES
    from ragsft_assets.defs.runs import execute_in_process_stoppable, process_tags
    from ragsft_assets.resources.catalog import CatalogResource
    from ragsft_assets.resources.llm import LLMResource
    from ragsft_assets.resources.snapshots import SnapshotSource
    from ragsft_assets.resources.store import ArtifactStore

    # the delay is not in the options: the engine registry keys on them, the cache on identity()
    backends: list[OracleBackend] = []

    def factory(model: str) -> OracleBackend:
        backends.append(OracleBackend(model, delay_s))
        return backends[-1]

    engines.register_backend(BACKEND, factory)
    install_snapshot(KEY, sample_folder(), home)

    def llm(role: str) -> LLMResource:
        return LLMResource(backend=BACKEND, model="oracle", cache_dir=str(home / "llm_cache"), role=role)

    resources = {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        **{role: llm(role) for role in LLM_ROLES},
    }
    job = dg.define_asset_job(
        "fault_llm_job",
        selection=dg.AssetSelection.assets(STAGE)
        if stage_only
        else dg.AssetSelection.assets(STAGE).upstream(),
    )
    defs = dg.Definitions.merge(build_definitions(resources), dg.Definitions(jobs=[job]))
    instance = dg.DagsterInstance.get()
    if not instance.has_dynamic_partition("snapshot", KEY):
        instance.add_dynamic_partitions("snapshot", [KEY])
    clean_before_run()
    result = execute_in_process_stoppable(
        defs.resolve_job_def("fault_llm_job"),
        instance,
        partition_key=KEY,
        run_config={"ops": {STAGE: {"config": {"max_pairs": max_pairs}}}},
        tags=process_tags(),
    )
    # the parent checks that a rerun makes only the missing calls
    print(f"backend calls: {sum(b.calls for b in backends)}", flush=True)
    return result


if __name__ == "__main__":
    result = run(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), stage_only=len(sys.argv) > 4)
    sys.exit(0 if result.success else 1)
