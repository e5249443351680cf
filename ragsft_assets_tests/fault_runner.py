"""Test-only: the graph's stages run in a subprocess that the fault-injection tests SIGKILL.

``python -m ragsft_assets_tests.fault_runner HOME DELAY_S MAX_PAIRS MODE [MODEL]`` materializes, for the sample
snapshot into HOME, in ``$DAGSTER_HOME``'s instance, the way the CLI runs (dead-run clean-up, process
tags, stoppable):

- ``reference``: ``question_drafts`` and everything upstream (the corpus build included), then, in a
  second run, the release (``release``, ``dataset_card``, ``release_manifest``): the uninterrupted run;
- ``stage``: ``question_drafts`` alone; DELAY_S slows each model call, so a kill lands mid-batch;
- ``release``: the release alone; DELAY_S is slept after each data file the release writes into its
  staging folder, so a kill lands while it writes the folder;
- ``corpus``: ``abstracts`` alone; DELAY_S is slept once the chunk files are written and before
  they are merged, so a kill lands while they exist.

The model (MODEL) is ``oracle``, the oracle double behind a registered backend, or ``embedded``, the
real embedded vLLM model (DELAY_S then slows each result handed back by the engine loop). Either way
every call goes through the real ``LLMResource`` client and its cache (HOME/llm_cache): the parent
counts cache entries. :func:`run` is also called in process by the tests (the session's engine).
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


RELEASE_ASSETS = ("release", "dataset_card", "release_manifest")
MODES = ("reference", "stage", "release", "corpus")
MODELS = ("oracle", "embedded")


class _CountedVLLM:
    """Counts (and, with ``delay_s``, slows) the results the embedded engine loop hands back."""

    calls = 0

    @classmethod
    def install(cls, delay_s: float) -> None:
        from ragsft_assets.llm.backends import vllm_backend

        generate = vllm_backend.VLLMBackend.generate
        if getattr(generate, "_fault_counted", False):  # in process: installed once per test session
            cls.delay_s = delay_s
            return
        cls.delay_s = delay_s

        def counted(self, requests, on_result):  # noqa: ANN001, ANN202 - VLLMBackend.generate's signature
            def slow(i, completion):  # noqa: ANN001, ANN202
                on_result(i, completion)  # committed to the cache first: the kill lands after a commit
                cls.calls += 1
                time.sleep(cls.delay_s)

            return generate(self, requests, slow)

        counted._fault_counted = True
        vllm_backend.VLLMBackend.generate = counted


def _slow_down(mode: str, delay_s: float) -> None:
    """Make the step that ``mode`` kills slow at the point the kill must land (test-only patches)."""
    if delay_s <= 0:
        return
    if mode == "release":
        from ragsft_assets.release import stream

        write = stream.write_batches

        def slow_write(batches, path, schema, rows):  # noqa: ANN001, ANN202 - stream.write_batches' signature
            out = write(batches, path, schema, rows)
            time.sleep(delay_s)
            return out

        stream.write_batches = slow_write  # the data files (and lineage) streamed into the staging folder
    elif mode == "corpus":
        from ragsft_assets.corpus import build

        merge, merge_to_files = build.merge_chunks, build.merge_chunks_to_files

        def slow_merge(paths):  # noqa: ANN001, ANN202 - same signature as build.merge_chunks
            time.sleep(delay_s)
            return merge(paths)

        def slow_merge_to_files(paths, out_paths):  # noqa: ANN001, ANN202 - build.merge_chunks_to_files'
            time.sleep(delay_s)  # the assets' out-of-core path: chunks written, no split file yet
            return merge_to_files(paths, out_paths)

        build.merge_chunks = slow_merge
        build.merge_chunks_to_files = slow_merge_to_files


def run(home: Path, delay_s: float, max_pairs: int, mode: str = "reference", model: str = "oracle") -> bool:
    """Run ``mode``'s stages into ``home`` the way the CLI does; True when every run succeeded."""
    from ragsft_assets.cli.runs import clean_before_run
    from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.resources import LLM_ROLES
    from ragsft_assets.defs.runs import execute_in_process_stoppable, process_tags
    from ragsft_assets.resources.catalog import CatalogResource
    from ragsft_assets.resources.embedder import EmbeddingResource
    from ragsft_assets.resources.llm import LLMResource
    from ragsft_assets.resources.snapshots import SnapshotSource
    from ragsft_assets.resources.store import ArtifactStore

    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}, not {mode!r}")
    if model not in MODELS:
        raise SystemExit(f"model must be one of {MODELS}, not {model!r}")
    # the delay is not in the options: the engine registry keys on them, the cache on identity()
    backends: list[OracleBackend] = []

    def factory(model: str) -> OracleBackend:
        backends.append(OracleBackend(model, delay_s if mode == "stage" else 0.0))
        return backends[-1]

    engines.register_backend(BACKEND, factory)
    _slow_down(mode, delay_s)
    install_snapshot(KEY, sample_folder(), home)

    def llm(role: str) -> LLMResource:
        if model == "embedded":
            return LLMResource(backend="embedded", cache_dir=str(home / "llm_cache"), role=role)
        return LLMResource(backend=BACKEND, model="oracle", cache_dir=str(home / "llm_cache"), role=role)

    if model == "embedded":
        _CountedVLLM.install(delay_s if mode == "stage" else 0.0)
    calls_before = _CountedVLLM.calls

    resources = {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        **{role: llm(role) for role in LLM_ROLES},
        # long_context's assets need the role to be bound; no stage run here embeds anything
        "embedder": EmbeddingResource(cache_dir=str(home / "llm_cache")),
    }
    selections = {
        "chain": dg.AssetSelection.assets(STAGE).upstream(),
        "stage": dg.AssetSelection.assets(STAGE),
        "release": dg.AssetSelection.assets(*RELEASE_ASSETS),
        "corpus": dg.AssetSelection.assets("abstracts"),
    }
    jobs = [dg.define_asset_job(f"fault_{name}_job", selection=sel) for name, sel in selections.items()]
    defs = dg.Definitions.merge(build_definitions(resources), dg.Definitions(jobs=jobs))
    instance = dg.DagsterInstance.get()
    if not instance.has_dynamic_partition("snapshot", KEY):
        instance.add_dynamic_partitions("snapshot", [KEY])
    ok = True
    for name in ("chain", "release") if mode == "reference" else (mode,):
        clean_before_run()
        ops: dict[str, dict] = {}
        if name in ("chain", "stage"):
            ops[STAGE] = {"config": {"max_pairs": max_pairs}}
        if name in ("chain", "corpus"):
            # One worker (the output does not depend on it): no fork server to start, seconds of CI.
            ops["abstracts"] = {"config": {"workers": 1}}
        config = {"ops": ops} if ops else {}
        result = execute_in_process_stoppable(
            defs.resolve_job_def(f"fault_{name}_job"),
            instance,
            partition_key=KEY,
            run_config=config,
            tags=process_tags(),
        )
        ok = ok and result.success
    # the parent checks that a rerun makes only the missing calls
    print(f"backend calls: {sum(b.calls for b in backends) + _CountedVLLM.calls - calls_before}", flush=True)
    return ok


if __name__ == "__main__":
    from ragsft_assets.defs.runs import RunInterrupted

    try:
        ok = run(
            Path(sys.argv[1]),
            float(sys.argv[2]),
            int(sys.argv[3]),
            sys.argv[4] if len(sys.argv) > 4 else "reference",
            sys.argv[5] if len(sys.argv) > 5 else "oracle",
        )
    except RunInterrupted as exc:  # as the CLI: 130 after Ctrl-C, 143 after SIGTERM
        print(f"ragsft: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    sys.exit(0 if ok else 1)
