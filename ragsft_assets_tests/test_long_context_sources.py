"""``long_context_job`` on the Synthetic-ConvQA and RAG-TGE presets (fixtures in their real schemas).

No row of either set is in reach offline: the fixtures are built here from the repository's real
texts (NarrativeQA summaries as ChatQA documents; HotpotQA distractor rows laid out as RAG-TGE
prompts, the way rag-tge's ``create_prompt`` writes them). The embedder is the hash double behind
the real ``EmbeddingResource``; the generator is a counting "translator" backend behind the real
``LLMResource`` and its cache, so a rerun must make no chat call.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.ids import item_uniform
from ragsft_assets.long_context import raft
from ragsft_assets.long_context.recipes import LLAMA_NOTICE
from ragsft_assets.long_context.translate import instruction_text
from ragsft_assets.sources.read import PRESETS, SourceError, read_source
from ragsft_assets_tests.llm_double import ScriptedBackend
from ragsft_assets_tests.test_long_context_job import long_context_job

DATA = Path(__file__).parent / "data"
TRANSLATOR = "lc-translator"
CONVQA = "synthetic_convqa.en"
TGE = "rag_tge.en"
BUDGET = 1500  # a few documents per context: the translation (twice as long) must drop some
P_ORACLE = 0.5
_HAN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理"


def fake_zh(text: str, chars: int = 3) -> str:
    """A deterministic stand-in for a Chinese translation: each word ``chars`` Han characters (three:
    the text grows), the [n] citations and numbers kept as they are."""
    import hashlib

    out = []
    for word in text.split():
        if word.strip(".,").startswith("[") or word.strip(".,").isdigit():
            out.append(word)
            continue
        h = hashlib.sha256(word.encode()).digest()
        out.append("".join(_HAN[b % len(_HAN)] for b in h[:chars]))
    return " ".join(out)


class TranslatorBackend(ScriptedBackend):
    """A chat backend that 'translates' into Han characters; counts its calls."""

    NAME = TRANSLATOR

    def respond(self, messages) -> str:  # noqa: ANN001
        text = messages[-1]["content"]
        assert "Chinese" in messages[0]["content"]  # the configured target language
        return fake_zh(text)


def convqa_rows() -> list[dict]:
    """ChatQA synthetic_convqa rows: {messages: [...user], document, answers} over real summaries."""
    lines = (DATA / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl").read_text(encoding="utf-8").splitlines()
    out = []
    for rec in [json.loads(x) for x in lines if x.strip()][:10]:
        doc = rec["passage"]
        out.append(
            {
                "messages": [
                    {"role": "user", "content": "What is this document about?"},
                    {"role": "assistant", "content": doc.split(". ")[0] + "."},
                    {"role": "user", "content": rec["question"]},
                ],
                "document": doc,
                "answers": [rec["answer"][0]],
            }
        )
    return out


def rag_tge_rows() -> list[dict]:
    """RAG-TGE finetuning rows: {prompt, answer} from real HotpotQA rows, the answer citing [n]."""
    rows = json.loads((DATA / "hotpotqa" / "hotpotqa_train_distractor_70.json").read_text(encoding="utf-8"))
    out = []
    for r in rows[:8]:
        titles = [t for t, _ in r["context"]]
        prompt = "".join(
            f"Document [{i + 1}](Title: {t}): {' '.join(s).strip()}\n"
            for i, (t, s) in enumerate(r["context"])
        )
        cited = sorted({titles.index(t) + 1 for t, _ in r["supporting_facts"] if t in titles})
        marks = "".join(f"[{n}]" for n in cited)
        out.append({"prompt": prompt + f"Question: {r['question']}", "answer": f"{r['answer']} {marks}."})
    return out


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_presets_read_their_fixtures(tmp_path: Path) -> None:
    conv = read_source(_write_jsonl(tmp_path / "convqa.jsonl", convqa_rows()), PRESETS["synthetic_convqa"])
    rows = conv.table.to_pylist()
    assert len(rows) == 10 and "history" in conv.table.column_names
    for row, src in zip(sorted(rows, key=lambda r: r["question"]), sorted(convqa_rows(), key=lambda r: r["messages"][-1]["content"]), strict=True):  # fmt: skip
        assert row["question"] == src["messages"][-1]["content"]  # the last user turn
        assert row["history"] == src["messages"][:-1]  # the earlier turns, in order
        assert row["context"]["sentences"] == [[src["document"]]] and row["answer"] == src["answers"][0]
    tge = read_source(_write_jsonl(tmp_path / "tge.jsonl", rag_tge_rows()), PRESETS["rag_tge"]).table
    for row in tge.to_pylist():
        assert len(row["context"]["title"]) == 10  # HotpotQA's ten documents
        # the citations stay, renumbered to the cited documents' order: [1] .. [m]
        m = len(row["supporting_facts"]["title"])
        assert "".join(f"[{n}]" for n in range(1, m + 1)) in row["answer"]
    src = rag_tge_rows()[0]
    (row,) = read_source(_write_jsonl(tmp_path / "one.jsonl", [src]), PRESETS["rag_tge"]).table.to_pylist()
    cited = {int(n) for n in src["answer"].rsplit(" ", 1)[1].strip(".").strip("[]").split("][")}
    assert row["supporting_facts"]["title"] == [row["context"]["title"][n - 1] for n in sorted(cited)]
    assert row["question"] == src["prompt"].rsplit("Question: ", 1)[1]
    bad = tmp_path / "bad.jsonl"
    _write_jsonl(bad, [{**convqa_rows()[0], "messages": convqa_rows()[0]["messages"][:2]}])
    with pytest.raises(SourceError, match=r"bad.jsonl, line 1: .*does not end with a user turn"):
        read_source(bad, PRESETS["synthetic_convqa"])
    _write_jsonl(bad, [{"prompt": "no documents here", "answer": "a"}])
    with pytest.raises(SourceError, match=r"line 1: field 'prompt' is not a RAG-TGE prompt"):
        read_source(bad, PRESETS["rag_tge"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
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
    added = [
        _cli(
            "sources",
            "add",
            CONVQA,
            "--from",
            str(_write_jsonl(home.parent / f"{home.name}-c.jsonl", convqa_rows())),
            "--preset",
            "synthetic_convqa",
        ),  # fmt: skip
        _cli(
            "sources",
            "add",
            TGE,
            "--from",
            str(_write_jsonl(home.parent / f"{home.name}-t.jsonl", rag_tge_rows())),
            "--preset",
            "rag_tge",
        ),  # fmt: skip
    ]
    job, instance = long_context_job(home, TranslatorBackend, [CONVQA, TGE])
    cfg = {"config": {"overrides": {"budget_tokens": BUDGET, "p_oracle": P_ORACLE}}}  # the card's configs
    ops = ("raft", "raft_syntactic", "clustered", "raft_translated")
    run_config = {"ops": {f"long_context__{n}": cfg for n in ops}}
    TranslatorBackend.calls = 0
    out = {"home": home, "added": added}
    for key in (CONVQA, TGE):
        out[key] = job.execute_in_process(partition_key=key, instance=instance, run_config=run_config)
    out["calls_first"] = TranslatorBackend.calls
    out["rerun"] = job.execute_in_process(partition_key=TGE, instance=instance, run_config=run_config)
    out["calls_rerun"] = TranslatorBackend.calls - out["calls_first"]
    yield out
    mp.undo()
    shutil.rmtree(home, ignore_errors=True)


def _load(runs, key: str, config: str):
    import datasets

    folder = runs["home"] / "releases" / "long_context" / key
    cache = str(runs["home"] / "hf_datasets_cache")
    return datasets.load_dataset(str(folder), config, cache_dir=cache)["train"]


def test_convqa_builds_the_cards_configs_with_the_conversation(runs) -> None:
    assert all(a.exit_code == 0 for a in runs["added"]), [a.output for a in runs["added"]]
    assert runs[CONVQA].success
    folder = runs["home"] / "releases" / "long_context" / CONVQA
    configs = sorted(p.name for p in folder.iterdir() if p.name.startswith("synthetic_convqa"))
    assert configs == ["synthetic_convqa_raft", "synthetic_convqa_raft_syntactic"]  # the card's two
    assert _cli("verify", str(folder)).exit_code == 0
    rows = _load(runs, CONVQA, "synthetic_convqa_raft")
    assert rows.num_rows == 10
    by_question = {r["messages"][-1]["content"]: r for r in convqa_rows()}
    for row in rows:
        system, *turns, user, assistant = row["messages"]
        src = by_question[user["content"]]
        assert [system["role"], user["role"], assistant["role"]] == ["system", "user", "assistant"]
        assert turns == src["messages"][:-1]  # the earlier turns between the documents and the question
        assert assistant["content"] == src["answers"][0]
        assert 0 < row["num_tokens"] <= BUDGET


def test_p_oracle_from_the_run_config(runs) -> None:
    home = runs["home"]
    lineage = pq.read_table(
        next((home / "assets" / CONVQA / "lc_raft_lineage").glob("*.parquet"))
    ).to_pylist()
    rows = {r["id"]: r for r in _load(runs, CONVQA, "synthetic_convqa_raft")}
    kept = [x["oracle_kept"] for x in lineage]
    # the draw is (seed, stage, example id) < P, recomputed here independently of the job
    assert kept == [
        item_uniform(raft.DEFAULT_SEED, raft.STAGE_ORACLE, x["source_id"]) < P_ORACLE for x in lineage
    ]
    assert 0 < sum(kept) < len(kept)  # P = 0.5 on 10 examples: some with, some without the oracle
    for x in lineage:
        assert bool(rows[x["id"]]["oracle_positions"]) == x["oracle_kept"]


def test_rag_tge_and_its_translation(runs) -> None:
    assert runs[TGE].success and runs["rerun"].success
    folder = runs["home"] / "releases" / "long_context" / TGE
    configs = sorted(p.name for p in folder.iterdir() if p.name.startswith("rag_tge"))
    assert configs == ["rag_tge_raft", "rag_tge_raft_zh"]
    assert _cli("verify", str(folder)).exit_code == 0
    src = _load(runs, TGE, "rag_tge_raft")
    zh = _load(runs, TGE, "rag_tge_raft_zh")
    assert runs["calls_first"] > 0 and runs["calls_rerun"] == 0  # every translation from the cache
    assert zh.num_rows >= 1
    by_source = {r["source_id"]: r for r in src}
    dropped = cites = 0
    for row in zh:
        base = by_source[row["source_id"]]
        *_, question, answer = row["messages"]
        assert question["content"] == fake_zh(base["messages"][1]["content"])  # turn by turn
        # the instruction is translated too; the Document N: markers stay
        assert row["messages"][0]["content"].startswith(fake_zh(instruction_text()))
        # the answer's [n] follow their documents: each names a document that holds its oracle
        cited = [int(n) for n in re.findall(r"\[(\d+)\]", answer["content"])]
        assert sorted(n - 1 for n in cited) == sorted(row["oracle_positions"])  # none without the oracle
        cites += bool(cited)
        assert 0 < row["num_tokens"] <= BUDGET  # recounted after translation
        assert set(row["distractor_ids"]) <= set(base["distractor_ids"])
        assert len(row["oracle_positions"]) == len(base["oracle_positions"])
        dropped += len(base["distractor_ids"]) - len(row["distractor_ids"])
    assert dropped > 0  # longer: some distractors had to go to keep the budget
    assert cites > 0
    for row in src:  # the source rows' citations name where their documents are shown
        cited = [int(n) for n in re.findall(r"\[(\d+)\]", row["messages"][-1]["content"])]
        assert sorted(n - 1 for n in cited) == sorted(row["oracle_positions"])
    card = (folder / "README.md").read_text(encoding="utf-8")
    # the Llama 3.1 Community License notice by default, in the card, the header and the manifest
    assert f"`rag_tge_raft_zh` (`llama3.1`): {LLAMA_NOTICE}" in card
    assert "license:\n- llama3.1\n- other\n" in card
    man = json.loads((folder / "provenance" / "rag_tge_raft_zh" / "manifest.json").read_text())
    assert man["license"] == "llama3.1" and man["recipe"]["recipe"] == "rag_tge_raft_zh"
    decisions = pq.read_table(folder / "provenance" / "decisions.parquet").to_pylist()
    rejected = [
        d for d in decisions if d.get("stage") == "long_context_raft_translated" and d["verdict"] != "kept"
    ]
    assert zh.num_rows + len(rejected) == src.num_rows  # every row translated or a counted rejection
