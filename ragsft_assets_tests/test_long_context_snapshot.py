"""This project's own corpus as long-context input: ``ragsft sources add KEY --from-snapshot SNAP``.

The sample snapshot's ``multihop_questions`` are built in process with the oracle double (every
stage keeps rows), exported as a ``qa_source`` and run through ``long_context_job`` with the hash
embedder double behind the real ``EmbeddingResource`` and a chat backend that must never be called.
"""

from __future__ import annotations

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.definitions import build_definitions
from ragsft_assets.defs.partitions import snapshot_partitions
from ragsft_assets.ids import sha256_hex
from ragsft_assets.llm import engines
from ragsft_assets.long_context.build import join_sentences
from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests import embedder_double
from ragsft_assets_tests.llm_double import ScriptedBackend, ScriptedChatModel
from ragsft_assets_tests.oracle_double import Oracle

SNAP = "sample.fr"
KEY = "samplewiki.fr"  # a source key of its own: a key belongs to one partition set only
CHAT = "lc-snapshot-no-chat"
BUDGET = 3000
CONFIGS = ("samplewiki_clustered", "samplewiki_raft", "samplewiki_raft_syntactic")


class NoChat(ScriptedBackend):
    """A chat backend that must never be called (the long-context job makes no chat call here)."""

    NAME = CHAT


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def snapshot_runs(tmp_path_factory: pytest.TempPathFactory):
    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()  # the default token counter is the embedded chat model's tokenizer
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSFT_HOME", str(home))
    mp.setenv("RAGSFT_GIT_COMMIT", "0" * 40)
    mp.delenv("DAGSTER_HOME", raising=False)
    install_snapshot(SNAP, sample_folder(), home)
    oracle = ScriptedChatModel(Oracle(), model_id="oracle-double")
    engines.register_backend(CHAT, NoChat)
    cache = str(home / "llm_cache")
    snapshot_resources = {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        **dict.fromkeys(("generator", "judge", "annotator", "base_model"), oracle),
        "embedder": EmbeddingResource(backend=embedder_double.BACKEND, cache_dir=cache),
    }
    inputs = dg.define_asset_job(
        "lc_snapshot_inputs",
        selection=dg.AssetSelection.assets("multihop_filtered").upstream(),  # multihop_questions too
        partitions_def=snapshot_partitions,
    )
    defs = dg.Definitions.merge(build_definitions(snapshot_resources), dg.Definitions(jobs=[inputs]))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [SNAP])
    built = defs.resolve_job_def("lc_snapshot_inputs").execute_in_process(
        partition_key=SNAP, instance=instance
    )
    missing = _cli("sources", "add", "other.fr", "--from-snapshot", "nosuch.fr")
    added = _cli("sources", "add", KEY, "--from-snapshot", SNAP)
    filtered = _cli(
        "sources", "add", "samplefilt.fr", "--from-snapshot", SNAP, "--questions", "multihop_filtered"
    )
    listed = _cli("sources", "list")
    lc_resources = {
        **snapshot_resources,
        **{r: LLMResource(backend=CHAT, model=r, cache_dir=cache, role=r) for r in ("generator", "judge")},
    }
    job = build_definitions(lc_resources).get_job_def("long_context_job")
    instance.add_dynamic_partitions("qa_source", [KEY])
    cfg = {
        "config": {"overrides": {"budget_tokens": BUDGET}}
    }  # variants: the first three, for any other source
    run_config = {"ops": {f"long_context__{n}": cfg for n in ("raft", "raft_syntactic", "clustered")}}
    NoChat.calls = 0
    result = job.execute_in_process(partition_key=KEY, instance=instance, run_config=run_config)
    yield {
        "home": home,
        "built": built,
        "missing": missing,
        "added": added,
        "filtered": filtered,
        "listed": listed,
        "lc": result,
    }
    mp.undo()


def test_a_snapshot_without_the_questions_is_refused(snapshot_runs) -> None:
    out = snapshot_runs["missing"]
    assert out.exit_code != 0 and "snapshot 'nosuch.fr' has no multihop_questions split file" in out.output


def test_sources_add_from_snapshot_copies_the_questions_and_names_their_origin(snapshot_runs) -> None:
    home, added = snapshot_runs["home"], snapshot_runs["added"]
    assert snapshot_runs["built"].success
    store = ArtifactStore(home=str(home))
    files = store.files(SNAP, "multihop_questions")
    n = sum(pq.read_metadata(f).num_rows for f in files)
    assert n > 0 and added.exit_code == 0 and f"{n} question(s)" in added.output, added.output
    folder = home / "sources" / KEY
    cfg = json.loads((folder / "source.json").read_text())
    assert cfg["preset"] == "hotpotqa" and sorted(p.name for p in folder.glob("*.parquet")) == sorted(
        f.name for f in files
    )
    origin = cfg["origin"]
    assert (origin["source"], origin["snapshot"], origin["asset"]) == ("snapshot", SNAP, "multihop_questions")
    assert origin["files_sha256"] == {f.name: sha256_hex(f.read_bytes()) for f in files}
    assert origin["revisions"]["articles"] > 0  # the snapshot's article revisions at export time
    assert f"snapshot {SNAP} multihop_questions" in snapshot_runs["listed"].output
    # a filtered configuration: its rows (the oracle keeps them all), its own origin
    kept = sum(pq.read_metadata(f).num_rows for f in store.files(SNAP, "multihop_filtered"))
    assert 0 < kept <= n and f"{kept} question(s)" in snapshot_runs["filtered"].output
    cfg = json.loads((home / "sources" / "samplefilt.fr" / "source.json").read_text())
    assert cfg["origin"]["asset"] == "multihop_filtered"
    assert f"snapshot {SNAP} multihop_filtered" in snapshot_runs["listed"].output


def test_long_context_job_on_the_snapshot_questions(snapshot_runs) -> None:
    import datasets

    home, result = snapshot_runs["home"], snapshot_runs["lc"]
    assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
    assert NoChat.calls == 0
    folder = home / "releases" / "long_context" / KEY
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("samplewiki")) == list(CONFIGS)
    verified = _cli("verify", str(folder))
    assert verified.exit_code == 0, verified.output
    train = ArtifactStore(home=str(home)).read(SNAP, "multihop_questions", "train").to_pylist()
    by_question = {r["question"]: r for r in train}
    cache = str(home / "hf_datasets_cache")
    rows = datasets.load_dataset(str(folder), "samplewiki_raft", cache_dir=cache)["train"]
    # the training split's questions, every one within the budget
    assert train and rows.num_rows == len(train)
    for row in rows:
        system, user, assistant = row["messages"]
        src = by_question[user["content"]]
        assert assistant["content"] == src["answer"]
        ctx, facts = src["context"], set(src["supporting_facts"]["title"])
        golds = [join_sentences(s) for t, s in zip(ctx["title"], ctx["sentences"], strict=True) if t in facts]
        docs = [
            d.split(":\n", 1)[1]
            for d in system["content"].split("Documents:\n\n", 1)[1].split("\n\nDocument ")
        ]
        # both gold abstracts are the oracles, whole, at the positions the row names
        assert sorted(docs[p] for p in row["oracle_positions"]) == sorted(golds) and len(golds) == 2
        assert 0 < row["num_tokens"] <= BUDGET
    for config in CONFIGS[::2]:
        assert datasets.load_dataset(str(folder), config, cache_dir=cache)["train"].num_rows > 0
    manifest = json.loads((folder / "provenance" / "samplewiki_raft" / "manifest.json").read_text())
    cfg = json.loads((home / "sources" / KEY / "source.json").read_text())
    assert manifest["source"]["origin"] == cfg["origin"]  # the snapshot, not "local"
