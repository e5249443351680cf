"""Issue 40, the generated card and the run log as a newcomer reads them:

- the card "shows 'abstracts kept 114' while 116 rows ship": the corpus funnel's kept abstracts are
  the rows of the corpus config, on the bundled sample built as the README builds it;
- the garbled "0 question(s) over 8192 smollm2-135m-instruct (tokenizers) tokens dropped": the
  run log says it as a sentence, and the card's funnel names the stage, the reason and the count.
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.release import layout
from ragsft_assets_tests.test_cards_000 import RAG_SFT_ROWS

PART = "sample.fr"


def _funnel_rows(card: str, product: str) -> tuple[str, list[tuple[str, str, str, int]]]:
    """The '### product: N kept of M candidates' title and its table rows (stage, verdict, reason, n)."""
    section = card.split("## How it was built", 1)[1].split("\n## ", 1)[0]
    title = next(line for line in section.splitlines() if line.startswith(f"### {product}:"))
    table = section.split(title, 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3].isdigit():
            rows.append((cells[0], cells[1], cells[2], int(cells[3])))
    return title, rows


def test_card_counts_every_shipped_abstract_as_kept(tmp_home: Path, monkeypatch) -> None:
    """The sample holds a record whose title is another's (``duplicate_title``): its id was once
    both kept and dropped at ``abstracts``, so the card counted 114 kept of the 116 rows shipped."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_home / "dagster"))  # restored after the test
    monkeypatch.delenv("DAGSTER_HOME")
    runner = CliRunner()
    assert runner.invoke(main, ["snapshots", "add", PART, "--sample"]).exit_code == 0
    for selection in ("*abstracts", "release*"):  # the README's corpus release
        out = runner.invoke(main, ["materialize", selection, "--partition", PART], catch_exceptions=False)
        assert out.exit_code == 0, out.output
    folder = tmp_home / "releases" / PART
    shipped = sum(
        pq.ParquetFile(folder / rel).metadata.num_rows
        for rel in layout.release_files(folder)["corpus"].values()
    )
    card = (folder / layout.README).read_text(encoding="utf-8")
    title, rows = _funnel_rows(card, "corpus")
    kept = [n for stage, verdict, _, n in rows if (stage, verdict) == ("abstracts", "kept")]
    assert kept == [shipped], (kept, shipped, title)
    assert shipped == 116  # the sample's abstracts (README, test_docs_commands)
    assert title.startswith(f"### corpus: {shipped} kept of "), title  # the corpus run decides abstracts only
    assert (
        "abstracts",
        "dropped",
        "duplicate_title",
        1,
    ) in rows  # the record that shares a title: dropped once


def test_token_budget_line_reads_as_a_sentence_in_the_log_and_the_card(tmp_path: Path) -> None:
    from ragsft_assets.cli.sources import install_source
    from ragsft_assets.defs.rag_sft.assets import qa_rag_prompts
    from ragsft_assets.defs.rag_sft.qa import questions
    from ragsft_assets.rag_sft.layout import join_sentences
    from ragsft_assets.release import build
    from ragsft_assets.resources.store import ArtifactStore
    from ragsft_assets_tests.test_rag_sft_assets import DATA, RECORDS

    key = "hotpotqa.en"
    install_source(key, DATA, preset="hotpotqa", mapping_file=None, home=tmp_path)
    words = {r["_id"]: sum(len(join_sentences(s).split()) for _, s in r["context"]) for r in RECORDS}
    budget = sorted(words.values())[50]
    over = sum(n > budget for n in words.values())
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", [key])
    store = ArtifactStore(home=str(tmp_path))
    config = {"tokenizer": "whitespace", "overrides": {"document_token_budget": budget}}
    result = dg.materialize(
        [questions, qa_rag_prompts],
        resources={"store": store},
        partition_key=key,
        instance=instance,
        run_config={"ops": {"qa__rag_prompts": {"config": config}}},
    )
    assert result.success and over == 19
    said = [
        e.user_message for e in instance.all_logs(result.run_id) if "question(s)" in (e.user_message or "")
    ]
    sentence = (
        f"{key}: {over} question(s) dropped for documents over the {budget}-token budget"
        " (tokens counted with whitespace)"
    )
    assert sentence in said, said
    assert not any(re.search(r"tokens dropped|over \d+ \S+ tokens", line) for line in said), said

    # the card of a release of that chain: the funnel row says stage, verdict, reason, count
    row = {
        "id": "e0",
        "pair_id": "p0",
        "messages": [{"role": "user", "content": "q"}],
        "supporting_facts_titles": ["T"],
        "chunks_total": 1,
        "split": "train",
    }
    store.write(pa.Table.from_pylist([row], RAG_SFT_ROWS), key, "rag_sft")
    folder = tmp_path / "releases" / key
    build.build_release(store.root, key, folder, configs=[layout.CONFIGS_BY_NAME["hotpotqa_cite"]])
    card, _ = build.write_card(folder, key)
    assert f"| rag_prompts | dropped | over_token_budget | {over} |" in card
    assert "tokens dropped" not in card and "question(s) over" not in card
