"""Each reason of ``ragsft diff`` (issue 39) on its own, from two small partitions written with the
release fixtures: one change per row, so that a row's reasons are exactly the one its provenance
names (the LLM cache's model identity or template version, a judge's verdict, a split, an article
revision or text, a recipe), and the stage that let an added row in or dropped a removed one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets import ids, recipes
from ragsft_assets.home import llm_cache_dir
from ragsft_assets.ledger import LEDGER_SCHEMA
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.types import SamplingParams
from ragsft_assets.release import build
from ragsft_assets.release.diff import Release, diff_releases
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.release_fixtures import MODEL, write_world

Edit = Callable[[ArtifactStore, str], None]


def _questions(store: ArtifactStore, partition: str) -> list[dict]:
    return store.read(partition, "multihop_questions").to_pylist()


def _qids(store: ArtifactStore, partition: str) -> list[str]:
    return sorted(q["id"] for q in _questions(store, partition))


def _rewrite_questions(store: ArtifactStore, partition: str, fn: Callable[[list[dict]], list[dict]]) -> None:
    table = store.read(partition, "multihop_questions")
    store.write_splits(
        pa.Table.from_pylist(fn(table.to_pylist()), table.schema), partition, "multihop_questions"
    )


def _rewrite_ledger(
    store: ArtifactStore, partition: str, stage: str, fn: Callable[[dict], dict | None]
) -> None:
    path = store.root / partition / "_ledger" / f"{stage}.parquet"
    import pyarrow.parquet as pq

    rows = [r2 for r in pq.read_table(path).to_pylist() if (r2 := fn(r)) is not None]
    store.write_ledger(pa.Table.from_pylist(rows, LEDGER_SCHEMA), partition, stage)


def _new_text(qid: str) -> Callable[[list[dict]], list[dict]]:
    return lambda rows: [r | {"question": r["question"] + " (v2)"} if r["id"] == qid else r for r in rows]


def _put_call(store: ArtifactStore, key: str, model: dict, template: str) -> None:
    db = LLMCache(llm_cache_dir(store.home_path))
    try:
        request = {
            "model": model,
            "params": SamplingParams(temperature=0.0).to_dict(),
            "messages": [{"role": "user", "content": key}],
            "json_schema": None,
            "template_version": template,
        }
        db.put(key, request, {"text": "IMPOSSIBLE"})
    finally:
        db.close()


def release(home: Path, partition: str, edit: Edit | None = None) -> Path:
    store = ArtifactStore(home=str(home))
    write_world(store, partition)
    if edit is not None:
        edit(store, partition)
    folder = home / "releases" / partition
    build.build_release(store.root, partition, folder)
    build.write_manifests(folder, partition, store.root)
    return folder


def old_edit(store: ArtifactStore, partition: str) -> None:
    """The old release: the fifth question was dropped by the judge (the new one lets it in)."""
    qid = _qids(store, partition)[4]
    _rewrite_questions(store, partition, lambda rows: [r for r in rows if r["id"] != qid])
    _rewrite_ledger(
        store,
        partition,
        "ablation_verdicts",
        lambda r: r | {"verdict": "dropped", "reason": "answerable_alone"} if r["candidate_id"] == qid else r,
    )


def new_edit(store: ArtifactStore, partition: str) -> None:
    """One change per question; an SFT row moves split; one article gets a new revision and text."""
    q = _qids(store, partition)
    model_q, prompt_q, verdict_q, removed_q = q[0], q[1], q[2], q[3]
    other_model = MODEL | {"model": "another-model"}
    for qid, stage, model, template in (
        (model_q, "question_checks", other_model, "tmpl0001"),
        (prompt_q, "ablation_verdicts", MODEL, "tmpl0002"),
    ):
        key = ids.derived_id("regenerated", qid)
        _put_call(store, key, model, template)
        _rewrite_ledger(
            store,
            partition,
            stage,
            lambda r, q=qid, k=key: r | {"cache_keys": [k]} if r["candidate_id"] == q else r,
        )
        _rewrite_questions(store, partition, _new_text(qid))
    _rewrite_ledger(
        store,
        partition,
        "ablation_verdicts",
        lambda r: r | {"detail": '{"ablations": 3}'} if r["candidate_id"] == verdict_q else r,
    )
    _rewrite_questions(store, partition, _new_text(verdict_q))
    # The removed question: dropped by the judge in the new release.
    _rewrite_questions(store, partition, lambda rows: [r for r in rows if r["id"] != removed_q])
    _rewrite_ledger(
        store,
        partition,
        "ablation_verdicts",
        lambda r: (
            r | {"verdict": "dropped", "reason": "answerable_alone"} if r["candidate_id"] == removed_q else r
        ),
    )
    # An SFT row moved to another split (split is no shipped column: only the split changed).
    sft = store.read(partition, "rag_sft")
    first = sorted(sft["id"].to_pylist())[0]
    rows = [
        r | {"split": "test" if r["split"] != "test" else "train"} if r["id"] == first else r
        for r in sft.to_pylist()
    ]
    rows.sort(key=lambda r: r["id"])  # the assets write their rows in id order
    store.write_splits(pa.Table.from_pylist(rows, sft.schema), partition, "rag_sft")


def article_edit(store: ArtifactStore, partition: str) -> None:
    """Article 1: a new revision and a new text; Article 2: new text under the same revision."""
    ab = store.read(partition, "abstracts")
    rows = []
    for r in ab.to_pylist():
        if r["title"] in ("Article 1", "Article 2"):
            r = r | {"text": r["text"] + " Nouveau.", "sentences": [*r["sentences"], "Nouveau."]}
            if r["title"] == "Article 1":
                r["revision"] += 1
        rows.append(r)
    store.write_splits(pa.Table.from_pylist(rows, ab.schema), partition, "abstracts")


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[str]]:
    home = tmp_path_factory.mktemp("reasons")
    old = release(home, "a.fr", old_edit)
    new = release(home, "b.fr", new_edit)
    store = ArtifactStore(home=str(home))
    return diff_releases(Release.open(old, "a.fr"), Release.open(new, "b.fr"), limit=100), _qids(
        store, "b.fr"
    )


def _changed(result: dict, config: str) -> dict[str, list[str]]:
    return {r["id"]: r["reasons"] for r in result["configs"][config]["rows"] if r["kind"] == "changed"}


def test_each_question_change_has_its_one_reason(result: tuple[dict, list[str]]) -> None:
    got, _ = result
    changed = _changed(got, "default")
    assert len(changed) == 3
    by_reason = {tuple(v): k for k, v in changed.items()}
    assert set(by_reason) == {("model",), ("prompt",), ("verdict",)}
    assert got["configs"]["default"]["changed_reasons"] == {"model": 1, "prompt": 1, "verdict": 1}


def test_added_and_removed_questions_name_their_stage(result: tuple[dict, list[str]]) -> None:
    got, _ = result
    rows = {r["kind"]: r for r in got["configs"]["default"]["rows"] if r["kind"] != "changed"}
    assert (rows["removed"]["stage"], rows["removed"]["verdict"], rows["removed"]["reason"]) == (
        "ablation_verdicts",
        "dropped",
        "answerable_alone",
    )
    added = rows["added"]
    assert (added["stage"], added["verdict"]) == ("ablation_verdicts", "kept")
    assert (added["was_stage"], added["was_verdict"], added["was_reason"]) == (
        "ablation_verdicts",
        "dropped",
        "answerable_alone",
    )
    assert got["configs"]["default"]["added"] == got["configs"]["default"]["removed"] == 1


def test_split_move_and_article_changes(result: tuple[dict, list[str]]) -> None:
    got, _ = result
    sft = got["configs"]["hotpotqa_cite"]
    moved = [r for r in sft["rows"] if r["kind"] == "changed" and r["reasons"] == ["split"]]
    assert len(moved) == 1 and moved[0]["old_split"] != moved[0]["split"]
    assert not _changed(got, "corpus")


def test_article_revision_and_text(tmp_path: Path) -> None:
    old = release(tmp_path, "a.fr")
    new = release(tmp_path, "d.fr", article_edit)
    got = diff_releases(Release.open(old), Release.open(new))
    corpus = _changed(got, "corpus")
    assert corpus == {ids.doc_id("Article 1"): ["revision"], ids.doc_id("Article 2"): ["text"]}
    # The questions' rows are the same bytes (their contexts keep the old sentences): unchanged,
    # whatever the revisions behind them.
    assert got["configs"]["default"]["changed"] == 0 and got["configs"]["default"]["unchanged"] > 0


def test_a_recipe_change_is_named(tmp_path: Path) -> None:
    def with_recipe(store: ArtifactStore, partition: str) -> None:
        qid = _qids(store, partition)[0]
        _rewrite_questions(store, partition, _new_text(qid))
        recipes.write_record(
            store.root / partition / "multihop_questions", {"recipe": "x", "values": {"k": 2}}
        )

    old = release(tmp_path, "a.fr")
    new = release(tmp_path, "c.fr", with_recipe)
    got = diff_releases(Release.open(old), Release.open(new))
    assert list(_changed(got, "default").values()) == [["recipe"]]
