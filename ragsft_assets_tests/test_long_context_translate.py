"""The translation's pieces: cut at the token limit is not ok (split and retried, or dropped with a
reason), the output is checked to be the target language, the instruction is translated too."""

from __future__ import annotations

from ragsft_assets.long_context import translate
from ragsft_assets.long_context.translate import OK, TRUNCATED, WRONG_LANGUAGE, Piece

ZH = "这是一个关于法国首都巴黎的文档。巴黎是法国最大的城市。"


def test_a_piece_cut_at_max_tokens_is_truncated() -> None:
    assert translate.piece_of("部分", True, 100, 100).status == TRUNCATED
    assert translate.piece_of(ZH, True, 40, 100).status == OK
    assert translate.piece_of("", True, 0, 100).status == translate.FAILED
    assert translate.piece_of(ZH, False, 0, 100).status == translate.FAILED


def test_split_and_retry_then_drop_with_a_reason() -> None:
    long = "First paragraph about Paris, the capital.\n\nSecond paragraph about Lyon and its river."
    batches: list[list[str]] = []

    def model(limit: int):
        def run(texts: list[str]) -> list[Piece]:
            batches.append(texts)
            return [Piece(ZH, TRUNCATED if len(t) > limit else OK) for t in texts]

        return run

    done = translate.translate_pieces([long, "short text"], model(50), "zh")
    assert done[long].status == OK and done[long].text == f"{ZH}\n\n{ZH}"  # the two halves, joined
    assert batches[0] == [long, "short text"] and len(batches) == 2  # one batch, then one per round
    assert batches[1] == [
        "First paragraph about Paris, the capital.",
        "Second paragraph about Lyon and its river.",
    ]
    batches.clear()
    done = translate.translate_pieces([long], model(5), "zh", max_splits=2)
    assert done[long].status == TRUNCATED  # still cut after the rounds: not ok
    assert len(batches) == 3


def test_output_not_in_the_target_language_is_not_ok() -> None:
    def run(texts: list[str]) -> list[Piece]:
        return [Piece(t if "echo" in t else ZH, OK) for t in texts]

    done = translate.translate_pieces(["please echo this English sentence back", "translate me"], run, "zh")
    assert done["please echo this English sentence back"].status == WRONG_LANGUAGE
    assert done["translate me"].status == OK
    assert translate.in_language("1952", "zh")  # too short to tell: not checked
    assert not translate.in_language("The capital of France is Paris, a large city.", "zh")


def _rows():
    rows = [
        {
            "id": "r1",
            "source_id": "s1",
            "messages": [
                {"role": "system", "content": "ignored"},
                {"role": "user", "content": "Which city is the capital?"},
                {"role": "assistant", "content": "Paris [1]."},
            ],
            "oracle_positions": [0],
            "distractor_ids": ["d"],
            "distractor_scores": [0.5],
            "num_tokens": 10,
        }
    ]
    lineage = [{"id": "r1", "source_id": "s1", "passage_ids": ["o", "d"], "embedding_keys": []}]
    texts = {"o": "Paris is the capital of France.", "d": "Lyon is a city on the Rhone river."}
    return rows, lineage, texts


class _Counter:
    def count(self, messages) -> int:  # noqa: ANN001
        return sum(len(m["content"]) for m in messages)


def test_instruction_translated_and_reasons_per_row() -> None:
    rows, lineage, texts = _rows()
    sent: list[str] = []

    def run(pieces: list[str]) -> list[Piece]:
        sent.extend(pieces)
        return [Piece(f"{ZH}{i}" + (" [1]." if "[1]" in p else ""), OK) for i, p in enumerate(pieces)]

    out = translate.translate_rows(rows, lineage, texts, run, _Counter(), citing=frozenset({"s1"}))
    assert translate.instruction_text() in sent  # the system message's instruction is a piece too
    (row,) = out.rows
    system = row["messages"][0]["content"]
    assert system.startswith(ZH) and "Document 1:" in system and "Answer the question" not in system
    assert row["messages"][-1]["content"].endswith("[1].")

    def truncating(pieces: list[str]) -> list[Piece]:
        return [Piece(ZH, TRUNCATED if "Rhone" in p else OK) for p in pieces]  # split or not, still cut

    out = translate.translate_rows(rows, lineage, texts, truncating, _Counter())
    assert out.rows == [] and [r["reason"] for r in out.rejections] == ["translation_truncated"]

    def english(pieces: list[str]) -> list[Piece]:
        return [Piece(p if p == texts["o"] else ZH, OK) for p in pieces]

    out = translate.translate_rows(rows, lineage, texts, english, _Counter())
    assert [r["reason"] for r in out.rejections] == ["translation_wrong_language"]


def test_citations_follow_dropped_distractors() -> None:
    rows, lineage, texts = _rows()
    rows[0]["oracle_positions"] = [1]  # the oracle shown second, after one distractor
    rows[0]["messages"][-1]["content"] = "Paris [2]."
    lineage[0]["passage_ids"] = ["d", "o"]

    def run(pieces: list[str]) -> list[Piece]:
        return [
            Piece(ZH * (8 if p == texts["d"] else 1) + (" [2]." if "[2]" in p else ""), OK) for p in pieces
        ]

    budget = 200  # the long translated distractor must go
    out = translate.translate_rows(
        rows,
        lineage,
        texts,
        run,
        _Counter(),
        translate.TranslateConfig(budget_tokens=budget),
        citing=frozenset({"s1"}),
    )
    (row,) = out.rows
    assert row["distractor_ids"] == [] and row["oracle_positions"] == [0]
    assert row["messages"][-1]["content"].endswith("[1].")  # renumbered: the oracle is now document 1
