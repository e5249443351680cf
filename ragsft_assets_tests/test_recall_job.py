"""recall_job in process on the repository's 100 OASST1 trees, with a cached test double of every role.

The double answers through the real ``ChatClient`` and its SQLite cache, so the rerun is served from
the cache like a real run: zero model calls, byte-identical stage files and release.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.definitions import build_definitions
from ragsft_assets.defs.partitions import BASE_MODEL_PARTITIONS_NAME
from ragsft_assets.defs.recall.assets import TREES_ENV, RecallConfig, model_partition, read_pairs
from ragsft_assets.defs.resources import default_resources
from ragsft_assets.ledger import LEDGER_DIR
from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.recall import registry
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.test_recall_stages import TREES, responder

KEY = "qwen3-4b-base"
HF_ID = "Qwen/Qwen3-4B-Base"
STAGES = ("oasst_pairs", "claims", "claim_audit", "probes")
MODEL_STAGES = ("probe_answers", "probe_labels", "known_claims", "rewrites")


class ResponderBackend:
    """A backend over the scripted responder: chats and raw completions (cut at the stop strings)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.calls = 0
        self.batches = 0  # generate() calls: the batches the client handed the engine

    def identity(self) -> dict[str, str]:
        return {"backend": "double", "model": self.model, "weights_sha256": "0" * 64}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        self.batches += 1
        for i, r in enumerate(requests):
            self.calls += 1
            messages = [{"role": "user", "content": r.prompt}] if r.is_completion else r.messages
            text = responder(messages)
            for stop in r.params.stop if r.is_completion else ():
                if stop and stop in text:
                    text = text[: text.index(stop)]
            on_result(i, Completion(text=text, completion_tokens=len(text.split())))

    def close(self) -> None:
        pass


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _recall_job(home: Path, store: ArtifactStore | None = None):
    """recall_job over ``home`` with both doubles behind one cache there, the store ``store`` (one
    over ``home``), and a fresh instance."""
    cache = LLMCache(home / "llm_cache")
    chat, base = ResponderBackend("chat-double"), ResponderBackend(HF_ID)
    resources = {
        **default_resources(),
        "store": store or ArtifactStore(home=str(home)),
        "judge": ChatClient(chat, cache, name="judge"),
        "generator": ChatClient(chat, cache, name="generator"),
        "base_model": ChatClient(base, cache, name="base_model"),
    }
    job = build_definitions(resources).resolve_job_def("recall_job")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(BASE_MODEL_PARTITIONS_NAME, [KEY])
    return job, instance, chat, base


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    job, instance, chat, base = _recall_job(home)
    run_config = {"ops": {"oasst_pairs": {"config": {"trees_path": str(TREES)}}}}
    first = job.execute_in_process(run_config=run_config, instance=instance, partition_key=KEY)
    calls = (chat.calls, base.calls)
    batches = (chat.batches, base.batches)
    store = ArtifactStore(home=str(home))
    release = home / "releases" / "recall"
    before = {"assets": _snapshot(store.root), "release": _snapshot(release)}
    second = job.execute_in_process(run_config=run_config, instance=instance, partition_key=KEY)
    after = {"assets": _snapshot(store.root), "release": _snapshot(release)}
    rerun_calls = (chat.calls - calls[0], base.calls - calls[1])
    return first, second, store, release, calls, rerun_calls, before, after, batches


def test_both_configs_verify_and_load(runs) -> None:
    first, _, store, release, calls, *_ = runs
    assert first.success
    assert calls[0] > 0 and calls[1] > 0
    assert verify_release(release).ok, verify_release(release).lines()
    cli = CliRunner().invoke(main, ["verify", str(release)])
    assert cli.exit_code == 0, cli.output
    assert sorted(p.name for p in release.iterdir() if p.is_dir()) == sorted(
        [f"{KEY}-full", f"{KEY}-sft", "provenance"]
    )
    import datasets

    rows = store.read(model_partition(KEY), "rewrites").num_rows
    assert rows > 80  # 94 pairs less the few undecodable decompositions of the double
    full = datasets.load_dataset(str(release), f"{KEY}-full", split="train")
    sft = datasets.load_dataset(str(release), f"{KEY}-sft", split="train")
    assert full.column_names == FULL_SCHEMA.names and sft.column_names == SFT_SCHEMA.names
    assert full.num_rows == sft.num_rows == rows
    # "Files are plain JSONL (gzip-compressed where large), so jq or pandas.read_json(lines=True)
    # work as well." (003)
    import pandas as pd

    data = sorted(p.relative_to(release).as_posix() for p in release.glob(f"{KEY}-*/*") if p.is_file())
    assert data == [f"{KEY}-full/train.jsonl", f"{KEY}-sft/train.jsonl"]
    assert not list(release.rglob("*.parquet"))
    frame = pd.read_json(release / f"{KEY}-sft" / "train.jsonl", lines=True)
    assert list(frame.columns) == SFT_SCHEMA.names and len(frame) == rows
    man = orjson.loads((release / "provenance" / f"{KEY}-full" / "manifest.json").read_bytes())
    assert man["rows_total"] == rows and man["files"][f"{KEY}-full/train.jsonl"]["rows"] == rows
    assert man["review_sample"] == f"provenance/{KEY}-full/review_sample.jsonl"
    assert set(full["base_model"]) == {HF_ID}
    # the release's -full config re-derives offline: same thresholds, same verdicts, nothing stale
    rule = CliRunner().invoke(main, ["recall", "rule", str(release), "--thresholds", "2/1/2/1"])
    assert rule.exit_code == 0, rule.output
    counts = orjson.loads(rule.output.strip().splitlines()[-1])
    assert counts["records"] == rows and counts["rewrite_stale"] == 0
    assert counts["known"] == sum(full["num_known_claims"]) and counts["unknown"] == sum(
        full["num_unknown_claims"]
    )
    md = first.asset_materializations_for_node("oasst_pairs")[0].metadata
    assert md["dagster/row_count"].value == 94 and md["trees"].value == 100


def test_each_stage_hands_the_engine_one_batch(runs) -> None:
    """claims, claim_audit, probes, probe_labels and rewrites: one chat batch each; probe_answers:
    one completion batch, every answer with its own seed."""
    assert runs[-1] == (5, 1)


def test_recipe_recorded_and_license_in_card_and_manifests(runs) -> None:
    first, _, store, release, *_ = runs
    from ragsft_assets import recipes

    recs = recipes.read_records(store.root / model_partition(KEY))
    assert recs["known_claims"]["recipe"] == "recall_oasst1" and recs["known_claims"]["changed"] == {}
    assert recs["known_claims"]["values"]["j_e"] == 2
    readme = (release / "README.md").read_text()
    # "The dataset is released under CC BY-SA 4.0." (003, License)
    assert readme.startswith("---\nlicense: cc-by-sa-4.0\n")
    assert "The dataset is released under CC BY-SA 4.0." in readme.split("## License", 1)[1]
    assert "Recipe `recall_oasst1`: as the card." in readme
    man = orjson.loads((release / "provenance" / f"{KEY}-sft" / "manifest.json").read_bytes())
    assert man["license"] == "cc-by-sa-4.0" and man["recipe"]["recipe"] == "recall_oasst1"
    md = first.asset_materializations_for_node("known_claims")[0].metadata
    assert md["recipe"].value["recipe"] == "recall_oasst1"


def test_ledger_rows_per_stage(runs) -> None:
    _, _, store, *_ = runs
    for stage in STAGES:
        assert store.read("recall", LEDGER_DIR, stage).num_rows > 0, stage
    for stage in MODEL_STAGES:
        assert store.read(model_partition(KEY), LEDGER_DIR, stage).num_rows > 0, stage
    claims = store.read("recall", LEDGER_DIR, "claims").to_pylist()
    assert len(claims) == 94 and any(r["reason"] == "claims_unreadable" for r in claims)
    # the 6 skipped trees are ledger rows too (5 with synthetic replies only, 1 with no ranks)
    pairs = store.read("recall", LEDGER_DIR, "oasst_pairs").to_pylist()
    skipped = [r for r in pairs if r["reason"].startswith("skipped/")]
    assert len(pairs) == 100 and len(skipped) == 6
    assert {r["verdict"] for r in skipped} == {"dropped"}
    assert len({r["candidate_id"] for r in skipped}) == 6


def test_rerun_makes_no_model_call_and_is_byte_identical(runs) -> None:
    _, second, _, _, _, rerun_calls, before, after, _ = runs
    assert second.success
    assert rerun_calls == (0, 0)
    assert before["release"] == after["release"]
    assert before["assets"].keys() == after["assets"].keys()
    changed = [k for k in before["assets"] if before["assets"][k] != after["assets"][k]]
    assert not changed


def test_no_input_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TREES_ENV, raising=False)
    with pytest.raises(ValueError, match=r"trees_path.*RAGSFT_OASST_TREES"):
        read_pairs(RecallConfig())


def test_partitions_name_matches_registry() -> None:
    assert BASE_MODEL_PARTITIONS_NAME == registry.PARTITIONS_NAME


def test_a_model_with_no_example_left_is_named_not_released(runs, tmp_path: Path) -> None:
    from ragsft_assets.defs.recall.assets import build_recall_release

    store = runs[2]
    home = tmp_path / "home"
    copy = ArtifactStore(home=str(home))
    full = store.read(model_partition(KEY), "rewrites")
    copy.write(full, model_partition(KEY), "rewrites")
    copy.write(full.slice(0, 0), model_partition("empty-model"), "rewrites")
    target = home / "releases" / "recall"
    rows, keys, empty = build_recall_release(copy, target)
    assert keys == [KEY] and empty == ["empty-model"]
    assert set(rows) == {f"{KEY}-sft", f"{KEY}-full"}
    assert verify_release(target).ok
    assert (
        "Left out (every example dropped, nothing to load): `empty-model`"
        in (target / "README.md").read_text()
    )
    only_empty = ArtifactStore(home=str(tmp_path / "other"))
    only_empty.write(full.slice(0, 0), model_partition("empty-model"), "rewrites")
    with pytest.raises(ValueError, match="every example was dropped for empty-model"):
        build_recall_release(only_empty, tmp_path / "other" / "releases" / "recall")


def test_new_thresholds_rewrite_only_the_changed_records(runs, tmp_path: Path) -> None:
    """Under other thresholds only the records whose removed claims changed reach the rewriter;
    every probe answer and label comes from the cache; the same thresholds again make no call."""
    import shutil

    from ragsft_assets.recall.rule import Thresholds, rederive

    store = runs[2]
    home = tmp_path / "home"
    shutil.copytree(store.home_path, home)
    t = Thresholds.parse("3/1/1/1")
    stale = sum(
        rederive(r, t)["rewrite_stale"] for r in store.read(model_partition(KEY), "rewrites").to_pylist()
    )
    assert stale > 0
    job, instance, chat, base = _recall_job(home)
    run_config = {
        "ops": {
            "oasst_pairs": {"config": {"trees_path": str(TREES)}},
            "known_claims": {
                "config": {"overrides": {"j_e": t.j_e, "k_e": t.k_e, "j_c": t.j_c, "k_c": t.k_c}}
            },
        }
    }
    assert job.execute_in_process(run_config=run_config, instance=instance, partition_key=KEY).success
    assert base.calls == 0  # probe answers: all cached
    assert 0 < chat.calls <= stale  # only rewrites of records whose removed claims changed
    first = chat.calls
    assert job.execute_in_process(run_config=run_config, instance=instance, partition_key=KEY).success
    assert (chat.calls, base.calls) == (first, 0)


def test_headless_recall_run_for_two_base_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ragsft recall run KEY... --trees FILE --override j_e=3` builds the release headless in the
    project's instance; both base models hold the same example ids and the card says so."""
    import ragsft_assets.definitions as definitions

    home = tmp_path / "home"
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    # the command points DAGSTER_HOME at the project's instance: set here, so it is undone after
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    cache = LLMCache(home / "llm_cache")
    chat = ResponderBackend("chat-double")
    resources = {
        **default_resources(),
        "store": ArtifactStore(home=str(home)),
        "judge": ChatClient(chat, cache, name="judge"),
        "generator": ChatClient(chat, cache, name="generator"),
        "base_model": ChatClient(ResponderBackend(HF_ID), cache, name="base_model"),
    }
    monkeypatch.setattr(definitions, "defs", build_definitions(resources))
    args = ["recall", "run", KEY, "olmo-2-7b", "--trees", str(TREES), "--max-examples", "12"]
    res = CliRunner().invoke(main, [*args, "--override", "j_e=3"])
    assert res.exit_code == 0, res.output
    release = home / "releases" / "recall"
    assert verify_release(release).ok
    configs = sorted(p.name for p in release.iterdir() if p.is_dir() and p.name != "provenance")
    assert configs == [f"{k}-{v}" for k in sorted([KEY, "olmo-2-7b"]) for v in ("full", "sft")]
    readme = (release / "README.md").read_text()
    assert "Every base model's `-sft` holds the same" in readme
    assert "differing from the card in: `j_e` 3 (card: 2)" in readme
    man = orjson.loads((release / "provenance" / "olmo-2-7b-full" / "manifest.json").read_bytes())
    assert man["recipe"]["changed"] == {"j_e": {"card": 2, "run": 3}}
    bad = CliRunner().invoke(main, [*args, "--override", "nope=1"])
    assert bad.exit_code != 0 and "unknown recipe field" in bad.output
