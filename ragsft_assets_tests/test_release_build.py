"""Release folder: load_dataset per config, verify, deterministic manifests, lineage, catalog, explain."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets import ids
from ragsft_assets.prompts import all_prompts
from ragsft_assets.release import build, layout, stream
from ragsft_assets.release.catalog import build_catalog, open_catalog
from ragsft_assets.release.explain import default_cache_lookup, explain, format_trace
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.release_fixtures import PARTITION, write_world


def make_release(home: Path, variant: int = 0) -> tuple[ArtifactStore, Path, dict]:
    store = ArtifactStore(home=str(home))
    cache = write_world(store, variant=variant)
    folder = home / "releases" / PARTITION
    build.build_release(store.root, PARTITION, folder)
    build.write_card(folder, PARTITION, {"surface_auc_mean": 0.71, "surface_auc_bar": 0.62})
    build.write_manifests(
        folder, PARTITION, store.root, home / "snapshots", run_config={"seed": ids.DEFAULT_SEED}
    )
    return store, folder, cache


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArtifactStore, Path, dict]:
    return make_release(tmp_path_factory.mktemp("home"))


def test_load_dataset_every_config_offline(built, tmp_path, monkeypatch) -> None:
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, folder, _ = built
    expected = {
        "default": (
            {"train": 5, "validation": 3, "test": 3},
            {
                "supporting_facts": {
                    "title": datasets.List(datasets.Value("string")),
                    "sent_id": datasets.List(datasets.Value("int32")),
                },
                "context": {
                    "title": datasets.List(datasets.Value("string")),
                    "sentences": datasets.List(datasets.List(datasets.Value("string"))),
                },
                "type": datasets.Value("string"),
            },
        ),
        # the card's five corpus columns: id, title, text, sentences, qid (no identifier, url, links)
        "corpus": (
            {"train": 6, "validation": 4, "test": 4},
            {"sentences": datasets.List(datasets.Value("string"))},
        ),
        "hotpotqa_cite": (
            {"train": 10, "validation": 6, "test": 6},
            {
                "messages": datasets.List(
                    {"role": datasets.Value("string"), "content": datasets.Value("string")}
                ),
                "chunks_total": datasets.Value("int32"),
            },
        ),
    }
    for config, (splits, features) in expected.items():
        ds = datasets.load_dataset(str(folder), config, cache_dir=str(tmp_path / "hf"))
        assert {s: ds[s].num_rows for s in ds} == splits
        for s in ds:
            assert ds[s].num_rows > 0
            assert "split" not in ds[s].features  # the file says the split
            for name, feature in features.items():
                assert ds[s].features[name] == feature, (config, name)
            # the HotpotQA-fr card's Schéma names the question key "_id"; the corpus's is "id"
            key = {"default": "_id", "corpus": "id"}.get(config)
            if key:
                assert ds[s].features[key] == datasets.Value("string")
        if config == "default":  # "_id, question, answer, supporting_facts, context, type, level"
            assert list(ds["train"].features) == [
                "_id",
                "question",
                "answer",
                "supporting_facts",
                "context",
                "type",
                "level",
            ]
    # `default` is the config opened without a name
    assert set(datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf"))) == {
        "train",
        "validation",
        "test",
    }


def test_readme_declares_configs_license_and_card(built) -> None:
    _, folder, _ = built
    files = layout.release_files(folder)
    assert list(files) == ["default", "corpus", "hotpotqa_cite"]
    text = (folder / "README.md").read_text()
    assert "license: cc-by-sa-4.0" in text
    assert "CC BY-SA 4.0" in text and "```bibtex" in text
    assert "**0.710**" in text  # the audit AUC as a limitation
    assert "| question_checks | dropped | answer_not_in_b | 11 |" in text  # a real funnel number
    for png in (folder / "plots").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((folder / "plots").glob("*.png"))) == 5


def test_verify_passes_then_fails_on_changed_byte_and_removed_file(tmp_path) -> None:
    _, folder, _ = make_release(tmp_path)
    assert verify_release(folder).ok
    target = folder / layout.data_file("hotpotqa_cite", "validation")
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    report = verify_release(folder)
    assert not report.ok and report.mismatched == [layout.data_file("hotpotqa_cite", "validation")]
    # keep the change, then remove another file
    (folder / layout.data_file("corpus", "test")).unlink()
    report = verify_release(folder)
    assert report.missing == [layout.data_file("corpus", "test")]

    from ragsft_assets.cli.release import verify

    res = CliRunner().invoke(verify, [str(folder)])
    assert res.exit_code == 1
    assert "MISMATCH hotpotqa_cite/validation-00000-of-00001.parquet" in res.output
    assert "MISSING  corpus/test-00000-of-00001.parquet" in res.output


def test_verify_cli_ok_and_manifest_edit_caught(built, tmp_path) -> None:
    import shutil

    from ragsft_assets.cli.release import verify

    _, folder, _ = built
    copy = tmp_path / "rel"
    shutil.copytree(folder, copy)
    res = CliRunner().invoke(verify, [str(copy)])
    assert res.exit_code == 0, res.output
    # Editing a manifest to match a tampered file is caught by the release index.
    m = copy / "provenance" / "corpus" / "manifest.json"
    m.write_bytes(m.read_bytes().replace(b'"rows_total": 14', b'"rows_total": 15'))
    assert verify_release(copy).mismatched == ["provenance/corpus/manifest.json"]


def _provenance_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_manifests_byte_identical_and_change_with_input(tmp_path) -> None:
    _, a, _ = make_release(tmp_path / "a")
    _, b, _ = make_release(tmp_path / "b")
    fa, fb = _provenance_bytes(a), _provenance_bytes(b)
    assert fa.keys() == fb.keys()
    assert fa == fb  # every file: data, lineage, decisions, README, plots, manifests
    _, c, _ = make_release(tmp_path / "c", variant=1)  # one abstract's text differs
    fc = _provenance_bytes(c)
    assert fc["provenance/corpus/manifest.json"] != fa["provenance/corpus/manifest.json"]
    # the questions' files did not change (their context sentences are not the changed ones)
    assert fc["provenance/default/manifest.json"] == fa["provenance/default/manifest.json"]
    assert fc["provenance/release.json"] != fa["provenance/release.json"]
    manifest = orjson.loads(fa["provenance/hotpotqa_cite/manifest.json"])
    assert manifest["snapshot"] == PARTITION
    assert manifest["run_config"] == {"seed": ids.DEFAULT_SEED}
    assert manifest["row_counts"] == {"train": 10, "validation": 6, "test": 6}
    assert manifest["project"]["version"] and manifest["project"]["git_commit"]
    assert manifest["source"]["revisions"]["articles"] == 14
    # models and sampling parameters of the calls behind the ledger, read from the LLM cache
    calls = manifest["llm_calls"]
    assert [c["calls"] for c in calls["question_checks"]] == [22]
    assert calls["ablation_verdicts"][0]["params"]["temperature"] == 0.0
    assert calls["rag_verdicts"][0]["model"]["model"] == "scripted-double"
    assert manifest["prompt_templates"] == {p.name: p.version for p in all_prompts()}
    assert "time" not in fa["provenance/corpus/manifest.json"].decode()


def test_every_lineage_key_resolves(built) -> None:
    store, folder, cache = built
    articles = {r["id"]: r for r in store.read(PARTITION, "abstracts").to_pylist()}
    questions = {r["id"] for r in store.read(PARTITION, "multihop_questions").to_pylist()}
    pairs = {r["id"]: r for r in store.read(PARTITION, "bridge_pairs").to_pylist()}
    lookup = default_cache_lookup(store.home_path)  # the real LLM cache (LLMCache.show)
    assert lookup is not None
    seen_keys = 0
    for config, splits in layout.release_files(folder).items():
        rows = pa.concat_tables([pq.read_table(folder / p) for p in splits.values()])
        lin = pq.read_table(folder / build.lineage_path(config)).to_pylist()
        if not {"id", "_id"} & set(rows.column_names):  # the RAG configs' three fields: ids in provenance
            rows = pq.read_table(folder / build.ids_path(config))
        key = "_id" if "_id" in rows.column_names else "id"  # HotpotQA-fr's `_id`; lineage says `id`
        assert sorted(r["id"] for r in lin) == sorted(rows[key].to_pylist())  # one lineage row per row
        for r in lin:
            assert r["documents"], r
            for d in r["documents"]:
                art = articles[d["doc_id"]]
                assert (d["identifier"], d["url"], d["revision"]) == (
                    art["identifier"],
                    art["url"],
                    art["revision"],
                )
            if config == "corpus":
                continue
            assert r["question_id"] in questions
            pair = pairs[r["bridge_pair_id"]]
            assert (pair["a_id"], pair["b_id"]) == (r["a_id"], r["b_id"])
            assert r["question_id"] in {ids.question_id(r["a_id"], r["b_id"], k) for k in range(3)}
            roles = {d["role"]: d["doc_id"] for d in r["documents"]}
            assert roles["gold_a"] == r["a_id"] and roles["gold_b"] == r["b_id"]
            assert r["cache_keys"]
            for key in r["cache_keys"]:
                entry = lookup(key)
                assert entry is not None and entry["key"] == key
                assert (
                    entry["request"] == cache[key]["request"] and entry["response"] == cache[key]["response"]
                )
                seen_keys += 1
            if config == "hotpotqa_cite":
                assert r["twin_pair_id"] == ids.pair_id(r["question_id"])
    assert seen_keys > 30


def test_catalog_answers_over_each_asset(built) -> None:
    store, _, _ = built
    home = store.home_path
    summary = build_catalog(home)
    assert summary.path == home / "catalog.duckdb"
    con = open_catalog(home)
    try:
        counts = {
            "abstracts": 14, "bridge_pairs": 11, "multihop_questions": 11, "rag_sft": 22,
        }  # fmt: skip
        for asset, n in counts.items():
            assert con.execute(f'SELECT count(*) FROM "{PARTITION}".{asset}').fetchone()[0] == n
            assert (
                con.execute(f"SELECT count(*) FROM {asset} WHERE partition = ?", [PARTITION]).fetchone()[0]
                == n
            )
        rows = con.execute(
            f"SELECT reason, count(*) FROM \"{PARTITION}\".final_decisions WHERE verdict = 'dropped' GROUP BY 1"
        ).fetchall()
        assert rows == [("answer_not_in_b", 11)]
        assert con.execute("SELECT count(*) FROM decisions").fetchone()[0] == 11 * 2 + 11 + 11
        assert con.execute("SELECT count(*) FROM final_decisions").fetchone()[0] == 33
        # the question kept by the checks and by the judge: the judge (later stage) decided it
        assert con.execute(
            "SELECT DISTINCT stage FROM final_decisions WHERE product = 'multihop' AND verdict = 'kept'"
        ).fetchall() == [("ablation_verdicts",)]
        assert con.execute(f'SELECT count(*) FROM "{PARTITION}".lineage').fetchone()[0] == 11 + 14 + 22
        with pytest.raises(duckdb.Error):  # read-only: the one writer is build_catalog
            con.execute("CREATE TABLE x (a INT)")
    finally:
        con.close()


def test_explain_chain_and_sql_trace(built) -> None:
    store, folder, cache = built
    home = store.home_path
    sft = pq.read_table(folder / layout.data_file("hotpotqa_cite", "train")).to_pylist()
    # the card's three fields ship; each row's id and twin pair are in provenance, row by row
    ids_ = pq.read_table(folder / build.ids_path("hotpotqa_cite")).to_pylist()
    sft = [{**r, **i} for r, i in zip(sft, (i for i in ids_ if i["split"] == "train"), strict=True)]
    row = next(r for r in sft if r["supporting_facts_titles"])
    trace = explain(row["id"], home=home)  # default lookup: the LLM cache under home
    lin = trace.lineage
    assert trace.partition == PARTITION and lin["config"] == "hotpotqa_cite"
    assert lin["twin_pair_id"] == row["pair_id"] == ids.pair_id(lin["question_id"])
    assert trace.question and trace.question["id"] == lin["question_id"]
    stages = [d["stage"] for d in trace.decisions]
    assert stages == ["question_checks", "ablation_verdicts", "rag_verdicts"]
    assert all(v is not None for v in trace.calls.values()) and len(trace.calls) == 3
    text = format_trace(trace)
    for needle in (
        lin["question_id"],
        lin["a_id"],
        "https://fr.wikipedia.org/wiki/",
        "revision=5000",
        "IMPOSSIBLE",
    ):
        assert needle in text
    # The same trace in SQL over the catalog (the README shows this query).
    build_catalog(home)
    con = open_catalog(home)
    try:
        sql = f"""
            SELECT l.question_id, d.title, d.url, d.revision
            FROM "{PARTITION}".lineage l, unnest(l.documents) AS u(d)
            WHERE l.id = ? ORDER BY d.role, d.title"""
        got = con.execute(sql, [row["id"]]).fetchall()
        assert {g[1] for g in got} == {d["title"] for d in lin["documents"]}
        verdicts = con.execute(
            f"""SELECT stage, verdict FROM "{PARTITION}".decisions
                WHERE candidate_id IN (SELECT unnest([id, question_id, twin_pair_id, bridge_pair_id])
                                       FROM "{PARTITION}".lineage WHERE id = ?) ORDER BY stage""",
            [row["id"]],
        ).fetchall()
        assert verdicts == [
            ("ablation_verdicts", "kept"),
            ("question_checks", "kept"),
            ("rag_verdicts", "kept"),
        ]
    finally:
        con.close()


def test_explain_without_release_and_unknown_id(tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    qid = store.read(PARTITION, "multihop_questions", "test")["id"][0].as_py()
    trace = explain(qid, home=tmp_path, lookup=lambda k: None)
    assert trace.lineage["config"] == "default" and trace.lineage["resolution"] == "bridge_pairs"
    assert "(not in the cache / no cache lookup)" in format_trace(trace)
    with pytest.raises(KeyError):
        explain("0" * 24, home=tmp_path)


def test_missing_upstream_is_skipped_with_a_note(tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store)
    import shutil

    shutil.rmtree(store.root / PARTITION / "rag_sft")
    shutil.rmtree(store.root / PARTITION / "multihop_questions")
    folder = tmp_path / "releases" / PARTITION
    b = build.build_release(store.root, PARTITION, folder)
    assert list(b.files) == ["corpus"]
    assert any("hotpotqa_cite" in n and "rag_sft" in n for n in b.notes)
    shutil.rmtree(store.root / PARTITION / "abstracts")
    with pytest.raises(FileNotFoundError, match="Materialize at least `abstracts`"):
        build.build_release(store.root, PARTITION, folder)
    assert list(layout.release_files(folder)) == ["corpus"]  # the old release is untouched
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_all_file_without_split_column_ships_as_train(tmp_path) -> None:
    store = ArtifactStore(home=str(tmp_path))
    store.write(pa.table({"id": ["b", "a"], "chunks_total": [1, 2]}), "x.fr", "rag_sft")
    tables, notes = stream.read_config_tables(store.root, "x.fr")
    # the card's three fields ship (no id), still in release order: sorted by the asset's ids
    assert list(tables) == ["hotpotqa_cite"] and tables["hotpotqa_cite"]["train"].to_pydict() == {
        "chunks_total": [2, 1]
    }
    assert len(notes) == len(layout.RELEASE_CONFIGS) - 1  # every other registered config is absent


def test_decisions_final_per_candidate(built) -> None:
    _, folder, _ = built
    d = pq.read_table(folder / "provenance" / "decisions.parquet")
    assert d.num_rows == len(set(zip(d["product"].to_pylist(), d["candidate_id"].to_pylist(), strict=True)))
    dropped = [r for r in d.to_pylist() if r["verdict"] == "dropped"]
    assert {r["stage"] for r in dropped} == {"question_checks"} and len(dropped) == 11
    assert os.path.getsize(folder / "provenance" / "decisions.parquet") > 0


def test_card_renders_the_keys_the_audit_writes(built) -> None:
    """The AUC sentence comes from multihop_audit's own metadata keys; a foreign key renders nothing."""
    import inspect

    from ragsft_assets.defs.multihop import assets as multihop_assets
    from ragsft_assets.release import card

    source = inspect.getsource(multihop_assets)
    for key in card.AUDIT_KEYS:
        assert f'"{key}"' in source, f"multihop_audit no longer writes {key}: the card would not render it"
    _, folder, _ = built
    body, _ = build.write_card(folder, PARTITION, {"audit_auc": 0.71})
    assert "Surface-feature classifier AUC" not in body
    body, _ = build.write_card(folder, PARTITION, {"surface_auc_mean": -1.0})  # not computed
    assert "Surface-feature classifier AUC" not in body
    body, _ = build.write_card(
        folder, PARTITION, {"surface_auc_mean": 0.7, "surface_auc_bar": 0.62, "gold_longest_rate": 0.25}
    )
    assert "**0.700**, above the 0.62 bar" in body and "longest of its context in 0.250" in body
    build.write_card(folder, PARTITION, {"surface_auc_mean": 0.71, "surface_auc_bar": 0.62})


def test_verify_catches_an_added_a_removed_and_a_flipped_file(tmp_path: Path) -> None:
    """Each tampering alone fails verify with the file named: any added kind, a removal, one flipped byte."""
    _, folder, _ = make_release(tmp_path / "home")
    assert verify_release(folder).ok
    listed = sorted(p for p in folder.rglob("*.parquet") if "provenance" not in p.parts)
    for stray in ("evil.py", "plots/extra.png", "config_x/notes.txt"):
        (folder / stray).parent.mkdir(parents=True, exist_ok=True)
        (folder / stray).write_bytes(b"x")
        report = verify_release(folder)
        assert not report.ok and report.unlisted == [stray], report.lines()
        (folder / stray).unlink()
    report = verify_release(folder)  # the emptied config_x/ is reported too
    assert not report.ok and report.empty_dirs == ["config_x"] and "EMPTYDIR config_x" in report.lines()
    (folder / "config_x").rmdir()
    assert verify_release(folder).ok
    victim = listed[0]
    data = victim.read_bytes()
    victim.unlink()
    report = verify_release(folder)
    assert not report.ok and report.missing == [victim.relative_to(folder).as_posix()]
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    victim.write_bytes(bytes(flipped))
    report = verify_release(folder)
    assert not report.ok and report.mismatched == [victim.relative_to(folder).as_posix()]
    victim.write_bytes(data)
    assert verify_release(folder).ok


def test_a_plot_interrupted_mid_write_leaves_no_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_histograms renders in memory and renames: a write cut short leaves no truncated PNG."""
    import matplotlib.figure

    from ragsft_assets.release import card

    def cut_short(self, fname, **kwargs) -> None:  # noqa: ANN001 - Figure.savefig's signature
        data = b"\x89PNG\r\n\x1a\n truncated"
        if hasattr(fname, "write"):
            fname.write(data)
        else:
            Path(fname).write_bytes(data)
        raise KeyboardInterrupt  # the process is stopped in the middle of the plot

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", cut_short)
    with pytest.raises(KeyboardInterrupt):
        card.write_histograms(tmp_path, "default", {"words": [1, 2, 3]})
    assert sorted(p.name for p in (tmp_path / layout.PLOTS).iterdir()) == []
    monkeypatch.undo()
    rels = card.write_histograms(tmp_path, "default", {"words": [1, 2, 3]})
    assert [(tmp_path / r).read_bytes()[:8] for r in rels] == [b"\x89PNG\r\n\x1a\n"]
    assert sorted(p.name for p in (tmp_path / layout.PLOTS).iterdir()) == [Path(rels[0]).name]


def test_verify_rejects_a_listed_file_replaced_by_a_symlink_to_an_identical_copy(tmp_path: Path) -> None:
    """``is_file()`` follows links: a link to an identical copy outside the folder must still fail."""
    _, folder, _ = make_release(tmp_path / "home")
    rel = layout.data_file("corpus", "test")
    outside = tmp_path / "elsewhere.parquet"
    outside.write_bytes((folder / rel).read_bytes())
    (folder / rel).unlink()
    (folder / rel).symlink_to(outside)
    report = verify_release(folder)
    assert not report.ok and report.not_regular == [rel] and report.mismatched == [], report.lines()
    assert f"NOTFILE  {rel}" in "\n".join(report.lines())
    # a linked folder on the way to a listed file is caught the same way
    (folder / rel).unlink()
    (folder / rel).write_bytes(outside.read_bytes())
    assert verify_release(folder).ok
    moved = tmp_path / "corpus_moved"
    (folder / "corpus").rename(moved)
    (folder / "corpus").symlink_to(moved, target_is_directory=True)
    report = verify_release(folder)
    assert not report.ok and rel in report.not_regular, report.lines()


def test_verify_names_an_entry_without_sha256(tmp_path: Path) -> None:
    _, folder, _ = make_release(tmp_path / "home")
    m = folder / "provenance" / "corpus" / "manifest.json"
    doc = orjson.loads(m.read_bytes())
    rel = next(iter(doc["files"]))
    del doc["files"][rel]["sha256"]
    m.write_bytes(orjson.dumps(doc))
    report = verify_release(folder)  # no KeyError: a clear error naming the entry
    assert not report.ok
    assert any(f"the entry for {rel} has no sha256" in e for e in report.errors), report.lines()


def test_root_digest_catches_a_self_consistent_edit(tmp_path: Path) -> None:
    """Edit a file, re-hash it in its manifest and the manifest in release.json: only the digest catches it."""
    from ragsft_assets.cli.release import verify
    from ragsft_assets.release.catalog import open_catalog, record_release_digest
    from ragsft_assets.release.manifest import json_bytes, root_digest, sha256_file

    home = tmp_path / "home"
    _, folder, _ = make_release(home)
    digest = root_digest(folder)
    assert digest == sha256_file(folder / "provenance" / "release.json")
    record_release_digest(folder, PARTITION, digest, "run-1", home)
    ok = CliRunner().invoke(verify, [str(folder), "--digest", digest])
    assert ok.exit_code == 0 and f"root digest {digest} (as expected)" in ok.output, ok.output

    rel = layout.data_file("corpus", "test")
    table = pq.read_table(folder / rel)
    pq.write_table(table.slice(0, 1), folder / rel)  # a row fewer
    mpath = folder / "provenance" / "corpus" / "manifest.json"
    doc = orjson.loads(mpath.read_bytes())
    doc["files"][rel]["sha256"] = sha256_file(folder / rel)
    mpath.write_bytes(json_bytes(doc))
    ipath = folder / "provenance" / "release.json"
    index = orjson.loads(ipath.read_bytes())
    index["files"]["provenance/corpus/manifest.json"]["sha256"] = sha256_file(mpath)
    ipath.write_bytes(json_bytes(index))
    assert verify_release(folder).ok  # the folder certifies itself: consistent
    res = CliRunner().invoke(verify, [str(folder), "--digest", digest])
    assert res.exit_code == 1 and "DIGEST" in res.output, res.output
    os.environ["RAGSFT_HOME"] = str(home)
    try:
        res = CliRunner().invoke(verify, [str(folder), "--catalog"])
        assert res.exit_code == 1 and f"is not the expected {digest}" in res.output, res.output
        con = open_catalog(home, rebuild=True)
        assert con.execute("SELECT digest, run_id FROM main.release_digests").fetchall() == [
            (digest, "run-1")
        ]
        con.close()
    finally:
        del os.environ["RAGSFT_HOME"]


def test_review_sample_is_drawn_with_the_seed_listed_and_hashed(tmp_path: Path) -> None:
    from ragsft_assets.release import manifest

    _, folder, _ = make_release(tmp_path / "a")
    m = orjson.loads((folder / "provenance" / "corpus" / "manifest.json").read_bytes())
    rel = "provenance/corpus/review_sample.jsonl"
    assert m["review_sample"] == rel and rel in m["provenance_files"]
    lines = [orjson.loads(x) for x in (folder / rel).read_bytes().splitlines()]
    assert len(lines) == m["rows_total"] == 14  # fewer rows than 200: all of them, each once
    ids_ = [x["row"]["id"] for x in lines]
    assert len(set(ids_)) == 14 and all(x["split"] in m["row_counts"] for x in lines)
    # 200 of many rows, drawn by the seed: another seed draws others, the same seed the same
    data = {"train": layout.data_file("corpus", "train")}
    big = tmp_path / "big"
    (big / "corpus").mkdir(parents=True)
    pq.write_table(
        pa.table({"id": [f"r{i}" for i in range(1000)], "x": list(range(1000))}), big / data["train"]
    )
    a = manifest.review_sample_rows(big, data, "corpus", seed=1)
    b = manifest.review_sample_rows(big, data, "corpus", seed=1)
    c = manifest.review_sample_rows(big, data, "corpus", seed=2)
    assert len(a) == 200 and a == b and {r["row"]["id"] for r in a} != {r["row"]["id"] for r in c}
    # the manifest lists it: a changed sample fails verify
    (folder / rel).write_bytes((folder / rel).read_bytes()[:-10])
    assert verify_release(folder).mismatched == [rel]


def test_corpus_links_stay_in_provenance(built) -> None:
    """The corpus config ships the card's five columns; every row's links are in
    provenance/corpus/links.parquet, as the abstracts asset has them, and the manifest hashes it."""
    store, folder, _ = built
    links = pq.read_table(folder / build.links_path("corpus"))
    assert links.column_names == ["id", "split", "links"]
    abstracts = store.read(PARTITION, "abstracts")
    want = {r["id"]: (r["split"], r["links"]) for r in abstracts.select(["id", "split", "links"]).to_pylist()}
    got = {r["id"]: (r["split"], r["links"]) for r in links.to_pylist()}
    assert got == want
    manifest = orjson.loads((folder / "provenance" / "corpus" / "manifest.json").read_bytes())
    assert build.links_path("corpus") in orjson.dumps(manifest).decode()
    assert "links" not in pq.read_schema(folder / layout.data_file("corpus", "train")).names
