"""``ragsft diff`` (issue 39) on two snapshots of the sample built end to end with the oracle double:
the sample itself, and a second dump derived from it with abstracts rewritten (with and without a
new revision), articles removed and articles added. The counts must equal what the two releases'
Parquet files hold (computed here row by row in Python), and each changed row's reasons must be the
ones its provenance says (computed here from the two lineage files)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets import ids
from ragsft_assets.cli import main
from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.definitions import build_definitions
from ragsft_assets.release import layout
from ragsft_assets.release.diff import Release, diff_releases, key_column
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.oracle_double import Oracle
from ragsft_assets_tests.test_pipeline_e2e import snapshot_resources

OLD, NEW = "20240901.fr", "20241001.fr"
NEW_REVISION = ("Orbelle (rivière)", "Étienne Marchal")  # rewritten, with a new revision id
SAME_REVISION = ("Castelmaure",)  # rewritten under the same revision (as a rule change would)
REMOVED = ("Paris", "Lycée Berthier")
ADDED = {"Gentiane de Sauvanne": "Gentiane des Ardoux", "Vache sauvannaise": "Vache ardousienne"}
EXTRA = " Elle figure depuis longtemps dans les guides régionaux de la vallée."
RUN_CONFIG = {"ops": {"question_drafts": {"config": {"max_pairs": 8}}}}  # small: the test stays fast


def _rewrite(rec: dict, bump: bool) -> dict:
    abstract = next(s for s in rec["sections"] if s.get("name") == "Abstract")
    last = [p for p in abstract["has_parts"] if p.get("type") == "paragraph"][-1]
    last["value"] = last["value"].rstrip() + EXTRA
    rec["abstract"] = (rec.get("abstract") or "").rstrip() + EXTRA
    if bump:
        rec["version"]["identifier"] += 1
    return rec


def derive_second_dump(source: Path, target: Path) -> Path:
    """The sample's dump with NEW_REVISION and SAME_REVISION rewritten, REMOVED gone, ADDED copied in."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "snapshot.json").write_text(
        (source / "snapshot.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    out, added = [], []
    for line in (source / "frwiki_namespace_0_0.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the sample's deliberately truncated line stays as it is
            out.append(line)
            continue
        name = rec.get("name")
        if name in REMOVED:
            continue
        if name in NEW_REVISION or name in SAME_REVISION:
            rec = _rewrite(rec, bump=name in NEW_REVISION)
        if name in ADDED and not any(a["name"] == ADDED[name] for a in added):
            copy = _rewrite(json.loads(line), bump=True)
            copy["name"] = ADDED[name]
            copy["identifier"] += 90_000_000
            copy["url"] = "https://fr.wikipedia.org/wiki/" + ADDED[name].replace(" ", "_")
            added.append(copy)
        out.append(json.dumps(rec, ensure_ascii=False))
    out += [json.dumps(a, ensure_ascii=False) for a in added]
    (target / "frwiki_namespace_0_0.jsonl").write_text("\n".join(out) + "\n", encoding="utf-8")
    return target


def build_release(home: Path, key: str, source: Path, instance: dg.DagsterInstance) -> Path:
    install_snapshot(key, source, home)
    model = ScriptedChatModel(Oracle(), model_id="oracle-double")
    resources = snapshot_resources(home, model)
    instance.add_dynamic_partitions("snapshot", [key])
    job = build_definitions(resources).resolve_job_def("full_job")
    assert job.execute_in_process(partition_key=key, instance=instance, run_config=RUN_CONFIG).success
    return home / "releases" / key


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    home = tmp_path_factory.mktemp("diff_home")
    second = derive_second_dump(sample_folder(), tmp_path_factory.mktemp("second_dump"))
    instance = dg.DagsterInstance.ephemeral()
    old = build_release(home, OLD, sample_folder(), instance)
    new = build_release(home, NEW, second, instance)
    return home, old, new


def parquet_rows(folder: Path, config: str) -> dict[str, tuple[str, dict]]:
    """``{key: (split, row without its key)}`` of a config, read whole (the sample is small)."""
    out: dict[str, tuple[str, dict]] = {}
    shipped = layout.read_configs(folder)
    for split, rel in layout.release_files(folder).get(config, {}).items():
        table = pq.read_table(folder / rel)
        key = key_column(table.column_names, shipped[config].family)
        if key is None:  # rows shipped without their id: provenance/<config>/ids.parquet has it by position
            ids_file = pq.read_table(folder / "provenance" / config / "ids.parquet").to_pylist()
            by_row = {r["row"]: r["id"] for r in ids_file if r["split"] == split}
            for i, row in enumerate(table.to_pylist()):
                out[by_row[i]] = (split, row)
            continue
        for row in table.to_pylist():
            out[row.pop(key)] = (split, row)
    return out


def lineage(folder: Path, config: str) -> dict[str, dict]:
    path = folder / "provenance" / config / "lineage.parquet"
    return {r["id"]: r for r in pq.read_table(path).to_pylist()} if path.is_file() else {}


def run_cli(home: Path, *args: str) -> dict:
    res = CliRunner().invoke(main, ["diff", *args], env={"RAGSFT_HOME": str(home)}, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_counts_equal_the_parquet_files(two_releases: tuple[Path, Path, Path]) -> None:
    home, old, new = two_releases
    result = run_cli(home, OLD, NEW, "--json", "--limit", "1000")
    assert result["old"] == OLD and result["new"] == NEW
    assert set(result["configs"]) == set(layout.release_files(old)) | set(layout.release_files(new))
    for config, got in result["configs"].items():
        a, b = parquet_rows(old, config), parquet_rows(new, config)
        added, removed = set(b) - set(a), set(a) - set(b)
        changed = {k for k in set(a) & set(b) if a[k] != b[k]}
        want = {"added": len(added), "removed": len(removed), "changed": len(changed)}
        want["unchanged"] = len(set(a) & set(b)) - len(changed)
        assert {k: got[k] for k in want} == want, config
        assert sum(got["changed_reasons"].values()) >= got["changed"]
        rows = {(r["kind"], r["id"]) for r in got["rows"]}
        assert rows == {("added", k) for k in added} | {("removed", k) for k in removed} | {
            ("changed", k) for k in changed
        }, config
        for split, counts in got["splits"].items():  # per split: a moved row counts in its new split
            assert counts["added"] == sum(1 for k in added if b[k][0] == split)
            assert counts["removed"] == sum(1 for k in removed if a[k][0] == split)
            assert counts["unchanged"] + counts["changed"] == sum(
                1 for k in set(a) & set(b) if b[k][0] == split
            )


def test_corpus_rows_carry_the_right_reason_and_stage(two_releases: tuple[Path, Path, Path]) -> None:
    home, old, new = two_releases
    got = run_cli(home, OLD, NEW, "--json", "--config", "corpus", "--limit", "1000")["configs"]
    assert list(got) == ["corpus"]
    corpus = got["corpus"]
    by_id = {(r["kind"], r["id"]): r for r in corpus["rows"]}
    for title in NEW_REVISION:
        assert by_id[("changed", ids.doc_id(title))]["reasons"] == ["revision"], title
    for title in SAME_REVISION:
        assert by_id[("changed", ids.doc_id(title))]["reasons"] == ["text"], title
    assert corpus["changed"] == len(NEW_REVISION) + len(SAME_REVISION)
    assert corpus["changed_reasons"] == {"revision": len(NEW_REVISION), "text": len(SAME_REVISION)}
    for title in REMOVED:  # gone from the dump: no stage of the new release decided it
        row = by_id[("removed", ids.doc_id(title))]
        assert row["stage"] is None, row
    for title in ADDED.values():
        row = by_id[("added", ids.doc_id(title))]
        assert (row["stage"], row["verdict"]) == ("abstracts", "kept"), row
    assert corpus["removed_by"] == {"absent from the inputs": len(REMOVED)}


def test_question_and_sft_reasons_follow_their_provenance(two_releases: tuple[Path, Path, Path]) -> None:
    """Each changed row's reasons, recomputed here from the two lineage files and the row's split."""
    home, old, new = two_releases
    result = diff_releases(Release.open(old, OLD), Release.open(new, NEW), limit=1000)
    seen_revision = False
    for config, got in result["configs"].items():
        lo, ln = lineage(old, config), lineage(new, config)
        a, b = parquet_rows(old, config), parquet_rows(new, config)
        for row in (r for r in got["rows"] if r["kind"] == "changed"):
            k, reasons = row["id"], set(row["reasons"])
            old_revs = {d["doc_id"]: d["revision"] for d in lo[k]["documents"]}
            moved = {d["doc_id"] for d in ln[k]["documents"] if d["doc_id"] in old_revs} and any(
                old_revs.get(d["doc_id"], d["revision"]) != d["revision"] for d in ln[k]["documents"]
            )
            assert ("revision" in reasons) == bool(moved), (config, row)
            seen_revision |= bool(moved)
            assert ("split" in reasons) == (a[k][0] != b[k][0]), (config, row)
            same_docs = sorted(lo[k]["doc_ids"]) == sorted(ln[k]["doc_ids"])
            assert ("documents" in reasons) == (not same_docs), (config, row)
            assert reasons, row
    assert seen_revision  # the rewritten hubs reach questions through their gold documents


def test_same_release_is_unchanged_and_text_output(two_releases: tuple[Path, Path, Path]) -> None:
    home, old, _ = two_releases
    result = diff_releases(Release.open(old, OLD), Release.open(old, OLD))
    for config, got in result["configs"].items():
        assert got["added"] == got["removed"] == got["changed"] == 0 and got["unchanged"] > 0, config
    res = CliRunner().invoke(main, ["diff", OLD, NEW, "--limit", "2"], env={"RAGSFT_HOME": str(home)})
    assert res.exit_code == 0, res.output
    assert "## corpus" in res.output and "| split | added | removed | changed | unchanged |" in res.output
    assert "revision" in res.output and "examples:" in res.output


def test_unknown_release_or_config_fails_loudly(two_releases: tuple[Path, Path, Path]) -> None:
    home, _, _ = two_releases
    res = CliRunner().invoke(main, ["diff", OLD, "20991231.fr"], env={"RAGSFT_HOME": str(home)})
    assert res.exit_code != 0 and "no release '20991231.fr'" in res.output
    res = CliRunner().invoke(main, ["diff", OLD, NEW, "--config", "nope"], env={"RAGSFT_HOME": str(home)})
    assert res.exit_code != 0 and "no config ['nope']" in res.output
