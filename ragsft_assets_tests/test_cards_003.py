"""The Recall Rewrite card (003) against the code: license, file format, recipe comments.

Each test quotes the card's words it checks; the card is kept word for word in ``data/cards/``.
The failed-rewrite rule and the repeated claims (point 8) are tested on the stages in
``test_recall_stages.py`` (``test_a_failed_rewrite_is_dropped_and_counted_not_refused``,
``test_claims_are_not_capped_ids_are_ints_and_repeats_are_kept``), the release end to end in
``test_recall_job.py``.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from pathlib import Path

import pyarrow as pa

from ragsft_assets.recall import recipes as rr
from ragsft_assets.recall import release_files as rf
from ragsft_assets.recall.schema import FULL_SCHEMA, SFT_SCHEMA, sft_row
from ragsft_assets.release import layout

CARD_003 = Path(__file__).parent / "data" / "cards" / "003_64dc881364d9ec42.txt"


def _ws(text: str) -> str:
    return " ".join(text.split())


def in_card(sentence: str) -> bool:
    """Whether ``sentence`` is in the card, word for word (whitespace runs compared as one space)."""
    return _ws(sentence) in _ws(CARD_003.read_text(encoding="utf-8"))


# -- 7. the license -------------------------------------------------------------------------------


def test_released_under_cc_by_sa() -> None:
    """ "The dataset is released under CC BY-SA 4.0." (OASST1's own Apache-2.0 is its source's)."""
    assert in_card("The dataset is released under CC BY-SA 4.0.")
    r = rr.RECALL_OASST1
    assert r.license == "cc-by-sa-4.0"
    assert in_card(r.license_notice)  # the card's License sentences, word for word


# -- 7. plain JSONL, gzip-compressed where large --------------------------------------------------


def _full_rows(n: int) -> list[dict]:
    claim = {
        "claim_id": 0,
        "text": "Paris is the capital of France.",
        "is_knowledge_dependent": True,
        "knowledge_dependence_reason": "a fact",
        "audit_checklist": dict.fromkeys(
            ("is_independent_of_context", "contains_specific_fact", "is_not_obvious", "can_be_asked_for"),
            "Yes",
        ),
        "is_known": True,
        "is_removed": False,
        "num_entailed_answers": 2,
        "num_contradicted_answers": 0,
        "num_unrelated_answers": 0,
        "probes": [
            {"question": "What is the capital of France?", "answers": [{"text": "Paris", "label": "ENTAILS"}]}
        ],
    }
    return [
        {
            "id": f"oasst1-{i:04d}",
            "base_model": "Qwen/Qwen3-4B-Base",
            "prompt": f"prompt {i}",
            "is_refusal": False,
            "original_response": "Paris is the capital of France.",
            "rewritten_response": "Paris is the capital of France.",
            "filter": "2/1/2/1",
            "num_claims": 1,
            "num_knowledge_dependent_claims": 1,
            "num_known_claims": 1,
            "num_unknown_claims": 0,
            "claims": [claim],
        }
        for i in range(n)
    ]


def test_files_are_plain_jsonl_gzip_where_large_and_load(tmp_path, monkeypatch) -> None:
    """ "Files are plain JSONL (gzip-compressed where large), so jq or pandas.read_json(lines=True)
    work as well." And the card's quick start, `load_dataset(..., "qwen3-4b-base-sft",
    split="train")`, reads both kinds."""
    import datasets
    import pandas as pd

    assert in_card(
        "Files are plain JSONL (gzip-compressed where large), so jq or pandas.read_json(lines=True) work as well."
    )
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = _full_rows(3)
    full = pa.Table.from_pylist(rows, schema=FULL_SCHEMA)
    sft = pa.Table.from_pylist([sft_row(r) for r in rows], schema=SFT_SCHEMA)
    size = len(rf.jsonl_bytes(full))
    # a threshold between the two sizes: the -full file is "large", the -sft one is not
    assert len(rf.jsonl_bytes(sft)) < size
    tables = {"m-sft": {"train": sft}, "m-full": {"train": full}}
    files = rf.write_jsonl_files(tmp_path, tables, gzip_over=size - 1)
    assert files == {"m-sft": {"train": "m-sft/train.jsonl"}, "m-full": {"train": "m-full/train.jsonl.gz"}}
    assert gzip.decompress((tmp_path / "m-full/train.jsonl.gz").read_bytes()) == rf.jsonl_bytes(full)
    # same rows, same bytes (no name, no time in the gzip header)
    again = tmp_path / "again"
    rf.write_jsonl_files(again, tables, gzip_over=size - 1)
    assert (again / "m-full/train.jsonl.gz").read_bytes() == (tmp_path / "m-full/train.jsonl.gz").read_bytes()
    frame = pd.read_json(tmp_path / "m-sft/train.jsonl", lines=True)
    assert list(frame.columns) == SFT_SCHEMA.names and len(frame) == 3
    layout.write_readme(tmp_path, files, "# test", "t")
    got_sft = datasets.load_dataset(str(tmp_path), "m-sft", split="train", cache_dir=str(tmp_path / "hf"))
    got_full = datasets.load_dataset(str(tmp_path), "m-full", split="train", cache_dir=str(tmp_path / "hf"))
    assert got_sft.column_names == SFT_SCHEMA.names and got_full.column_names == FULL_SCHEMA.names
    assert got_full[0]["claims"][0]["probes"][0]["answers"][0]["label"] == "ENTAILS"
    assert got_sft[0]["messages"][1] == {"role": "assistant", "content": "Paris is the capital of France."}
    # the review sample: the manifest rule's draw, from the rows
    rel = rf.write_review_sample(tmp_path, "m-full", {"train": full}, seed=7, size=2)
    assert len((tmp_path / rel).read_bytes().splitlines()) == 2


# -- 15. every recipe field says the card or ours -------------------------------------------------

_KEYWORD = re.compile(r"^    (\w+)=")


def test_every_recall_recipe_field_says_the_card_or_ours() -> None:
    """Every field of ``recall_oasst1`` has a comment: "the card:" with its words (every quoted
    sentence in the card) or "ours:" with the reason."""
    source = Path(rr.__file__).read_text(encoding="utf-8")
    body = source.split("RECALL_OASST1 = RecallRecipe(", 1)[1].split("\n)\n", 1)[0]
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        m = _KEYWORD.match(line)
        if m:
            tail = line.split("  # ", 1)[1] if "  # " in line else ""
            comments[m.group(1)] = " ".join([*pending, tail]).strip()
            pending = []
    fields = {f.name for f in dataclasses.fields(rr.RecallRecipe)} - {"name"}
    assert set(comments) - {"name"} == fields, sorted(fields - set(comments))
    for name in fields:
        comment = comments[name]
        assert comment.startswith(("the card:", "ours:")), f"{name}: {comment!r}"
        for quoted in re.findall(r'"([^"]+)"', comment):
            assert in_card(quoted), f"{name} quotes {quoted!r}, which the card does not hold"
    assert in_card(rr.RECALL_OASST1.refusal)


def test_the_recall_section_of_cards_md_quotes_the_card() -> None:
    """docs/cards.md: every sentence its Recall Rewrite section quotes (in "...") is the card's."""
    text = (Path(__file__).parents[1] / "docs" / "cards.md").read_text(encoding="utf-8")
    section = text.split("\n## 003 Recall Rewrite\n", 1)[1]
    quotes = [q for q in re.findall(r'"([^"]+)"', section) if len(q) > 25]
    assert len(quotes) > 8
    for quoted in quotes:
        parts = [p.strip() for p in quoted.split("[...]") if p.strip()]  # an elision between parts
        assert all(in_card(p) for p in parts), quoted
