"""``long_context_job`` with the real embedded embedder (vLLM pooling runner, all-MiniLM-L6-v2).

Three real NarrativeQA questions (three summaries) go in through ``ragsft sources add``; every
variant is built: ``raft``, ``raft_syntactic`` and ``clustered`` with the real vectors, and
``raft_translated`` with a scripted "translator" behind the real ``LLMResource`` and its cache (the
translation needs a chat model, not the embedder: a scripted one keeps the test short). The job
runs twice on the same home: each release config must load with ``datasets`` and verify, and the
rerun must embed nothing, call no chat model and write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.resources.embedder import EMBEDDED_EMBEDDER_NAME, EmbeddingResource
from ragsft_assets_tests.llm_double import ScriptedBackend
from ragsft_assets_tests.test_long_context_job import long_context_job

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data" / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl"
KEY = "narrativeqa.en"
ITEMS = 3  # three questions over three different summaries (238-414 words)
BUDGET = 4000  # each context can hold all three summaries, translated ones included
TRANSLATOR = "lc-embedded-translator"
CONFIGS = ("narrativeqa_raft", "narrativeqa_raft_syntactic", "narrativeqa_clustered", "narrativeqa_raft_zh")


class Translator(ScriptedBackend):
    """A chat backend that 'translates' by marking the text; counts its calls."""

    NAME = TRANSLATOR

    def respond(self, messages) -> str:  # noqa: ANN001
        from ragsft_assets_tests.test_long_context_sources import fake_zh

        return fake_zh(messages[-1]["content"], chars=1)  # read as Chinese by the language check


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    return next(
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == f"long_context/{asset}"
    )


def test_every_variant_with_the_embedded_embedder_loads_verifies_and_reruns_for_free(
    embedded_embedder: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()  # the default token counter is the embedded chat model's tokenizer
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    monkeypatch.setenv("RAGSFT_GIT_COMMIT", "0" * 40)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    lines = DATA.read_text(encoding="utf-8").splitlines()[:ITEMS]
    cut = tmp_path / "narrativeqa_3.jsonl"  # no "test" in the name: split train
    cut.write_text("\n".join(lines) + "\n", encoding="utf-8")
    added = _cli("sources", "add", KEY, "--from", str(cut))
    assert added.exit_code == 0 and f"{ITEMS} question(s)" in added.output, added.output

    # the session's engine (the fixture holds it): same options, so the same process-wide handle
    embedder = EmbeddingResource(backend="embedded", cache_dir=str(home / "llm_cache"))
    job, instance = long_context_job(home, Translator, [KEY], embedder)
    over = {"overrides": {"budget_tokens": BUDGET}}  # every variant, by the family recipes
    ops = ("raft", "raft_syntactic", "clustered", "raft_translated")
    run_config = {
        "ops": {f"long_context__{n}": {"config": {**over, "recipe": f"long_context_{n}"}} for n in ops}
    }
    folder = home / "releases" / "long_context" / KEY

    Translator.calls = 0
    first = job.execute_in_process(partition_key=KEY, instance=instance, run_config=run_config)
    assert first.success
    assert all(c.passed for c in first.get_asset_check_evaluations())
    emb, clu = _metadata(first, "passage_embeddings"), _metadata(first, "clustered")
    assert emb["embedder/embedded"] == ITEMS and emb["embedder/calls"] >= 1
    assert emb["embedder/model"]["model"] == EMBEDDED_EMBEDDER_NAME and emb["dim"] == 384
    assert clu["embedder_questions/embedded"] == ITEMS  # the questions' vectors, for their k-means
    translated_calls = Translator.calls
    assert translated_calls > 0
    first_tree = _tree(folder)

    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("narrativeqa")) == sorted(CONFIGS)
    verified = _cli("verify", str(folder))
    assert verified.exit_code == 0, verified.output
    hf_cache = str(tmp_path / "hf_datasets_cache")
    loaded = {c: datasets.load_dataset(str(folder), c, cache_dir=hf_cache)["train"] for c in CONFIGS}
    assert loaded["narrativeqa_raft"].num_rows == ITEMS
    assert loaded["narrativeqa_clustered"].num_rows == ITEMS
    assert loaded["narrativeqa_raft_zh"].num_rows == ITEMS
    assert loaded["narrativeqa_raft_syntactic"].num_rows >= 4 * ITEMS  # five types, a rare skip
    for row in loaded["narrativeqa_raft"]:
        # the other two summaries, scored by the real model: cosines of different texts
        assert len(row["distractor_ids"]) == ITEMS - 1 and len(row["oracle_positions"]) == 1
        assert all(0 < s < 1 for s in row["distractor_scores"])
    for config, rows in loaded.items():
        assert all(0 < n <= BUDGET for n in rows["num_tokens"]), config
    manifest = json.loads((folder / "provenance" / "narrativeqa_raft" / "manifest.json").read_text())
    assert manifest["source"]["embedder"]["model"] == EMBEDDED_EMBEDDER_NAME

    second = job.execute_in_process(partition_key=KEY, instance=instance, run_config=run_config)
    assert second.success
    emb, clu = _metadata(second, "passage_embeddings"), _metadata(second, "clustered")
    assert (emb["embedder/embedded"], emb["embedder/calls"], emb["embedder/cache_hits"]) == (0, 0, ITEMS)
    assert (clu["embedder_questions/embedded"], clu["embedder_questions/calls"]) == (0, 0)
    assert Translator.calls == translated_calls  # every translation from the chat cache
    assert _tree(folder) == first_tree
    shutil.rmtree(home, ignore_errors=True)
