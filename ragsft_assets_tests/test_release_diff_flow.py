"""The release's history in Dagster (issue 39): ``release_diff`` compares a release with the previous
snapshot's release of its language, or with the build it replaced when the key is rebuilt; the card
gets "Changes since OLD"; a run tagged for review builds beside the current release, and
``ragsft release promote KEY`` swaps it in. The sensor tags its runs for review when
``RAGSFT_PUBLISH=review``."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from click.testing import CliRunner

from ragsft_assets import ids
from ragsft_assets.cli import main
from ragsft_assets.defs.automation.sensors import build_new_snapshot_sensor
from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
from ragsft_assets.defs.release.diff import release_diff
from ragsft_assets.release import diff
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.release_fixtures import write_world

OLD, NEW = "20240901.fr", "20241001.fr"
ASSETS = [release, release_diff, dataset_card, release_manifest]


def build(store: ArtifactStore, instance: dg.DagsterInstance, key: str, tags: dict | None = None) -> dict:
    result = dg.materialize(
        ASSETS, resources={"store": store}, partition_key=key, instance=instance, tags=tags
    )
    assert result.success
    return {
        k: getattr(v, "value", v)
        for k, v in result.asset_materializations_for_node("release_diff")[0].metadata.items()
    }


def rewrite_article(store: ArtifactStore, key: str, title: str) -> None:
    ab = store.read(key, "abstracts")
    rows = [
        r | {"text": r["text"] + " Réécrit.", "revision": (r["revision"] or 0) + 1}
        if r["title"] == title
        else r
        for r in ab.to_pylist()
    ]
    store.write_splits(pa.Table.from_pylist(rows, ab.schema), key, "abstracts")


@pytest.fixture()
def home(tmp_path: Path) -> tuple[ArtifactStore, dg.DagsterInstance]:
    store = ArtifactStore(home=str(tmp_path))
    write_world(store, OLD)
    write_world(store, NEW, variant=1)  # Article 0's text changes under the same revision
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [OLD, NEW])
    return store, instance


def test_release_diff_against_the_previous_snapshot_then_the_previous_build(home) -> None:
    store, instance = home
    first = build(store, instance, OLD)
    assert first["baseline"].startswith("none")
    md = build(store, instance, NEW)
    assert md["baseline"] == OLD
    assert (md["rows_changed"], md["rows_added"], md["rows_removed"]) == (1, 0, 0)
    assert "| corpus | all | 0 | 0 | 1 |" in md["counts"] and "text" in md["counts"]
    folder = store.home_path / "releases" / NEW
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"## Changes since `{OLD}`" in card and "| `corpus` | 0 | 0 | 1 |" in card
    assert card.index("| `default` |") < card.index("| `corpus` |")  # release order, not sorted by name
    assert verify_release(folder).ok  # the summary lives beside the release, not in it
    # The key rebuilt on changed inputs: compared with the build it replaced.
    rewrite_article(store, NEW, "Article 3")
    md = build(store, instance, NEW)
    assert md["baseline"] == f"{NEW} (previous build)"
    assert md["rows_changed"] == 1 and f"`{ids.doc_id('Article 3')}`" in md["examples"]
    assert "revision" in md["examples"]
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"## Changes since `{NEW} (previous build)`" in card and "revision (1)" in card


def test_a_stale_summary_is_not_shown(home) -> None:
    store, instance = home
    build(store, instance, OLD)
    build(store, instance, NEW)
    folder = store.home_path / "releases" / NEW
    assert diff.card_section(folder)
    # A rebuild by the release asset alone (no release_diff): the summary is of another build.
    assert dg.materialize([release], resources={"store": store}, partition_key=NEW, instance=instance).success
    assert diff.read_changes(folder) is None and diff.card_section(folder) == []


def test_review_then_promote(home, monkeypatch: pytest.MonkeyPatch) -> None:
    store, instance = home
    build(store, instance, OLD)
    build(store, instance, NEW)
    current = store.home_path / "releases" / NEW
    before = (current / "README.md").read_bytes()
    rewrite_article(store, NEW, "Article 5")
    md = build(store, instance, NEW, tags={diff.PUBLISH_TAG: "review"})
    assert md["baseline"] == NEW and md["review"] == f"ragsft release promote {NEW}"
    pending = diff.pending_dir(current)
    assert verify_release(pending).ok and (current / "README.md").read_bytes() == before  # not published yet
    assert f"## Changes since `{NEW}`" in (pending / "README.md").read_text(encoding="utf-8")
    monkeypatch.setenv("RAGSFT_HOME", str(store.home_path))
    res = CliRunner().invoke(main, ["release", "promote", NEW])
    assert res.exit_code == 0, res.output
    assert not pending.exists() and verify_release(current).ok
    assert (diff.previous_dir(current) / "README.md").read_bytes() == before
    assert f"## Changes since `{NEW}`" in (current / "README.md").read_text(encoding="utf-8")
    assert diff.read_changes(current) is not None  # the summary followed the release
    res = CliRunner().invoke(main, ["verify", str(current), "--catalog"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["release", "promote", NEW])  # nothing waits any more
    assert res.exit_code != 0 and "waits for review" in res.output


def test_sensor_tags_its_runs_for_review(monkeypatch: pytest.MonkeyPatch) -> None:
    def lister(*seen: object) -> object:
        # one new snapshot, ready: `[keys]`, or `([keys], waiting)` for a lister given what it saw
        return (["20241101.fr"], {}) if seen else ["20241101.fr"]

    sensor = build_new_snapshot_sensor(lister=lister)
    instance = dg.DagsterInstance.ephemeral()
    monkeypatch.delenv(diff.PUBLISH_ENV, raising=False)
    with dg.build_sensor_context(instance=instance) as ctx:
        (request,) = sensor(ctx).run_requests
    assert diff.PUBLISH_TAG not in request.tags  # default: publish as today
    monkeypatch.setenv(diff.PUBLISH_ENV, "review")
    with dg.build_sensor_context(instance=instance) as ctx:
        (request,) = sensor(ctx).run_requests
    assert request.tags[diff.PUBLISH_TAG] == "review"
    monkeypatch.setenv(diff.PUBLISH_ENV, "later")
    with pytest.raises(ValueError, match="RAGSFT_PUBLISH"):
        diff.publish_mode()


def test_an_unreadable_baseline_does_not_block_the_release(home) -> None:
    store, instance = home
    build(store, instance, OLD)
    old_folder = store.home_path / "releases" / OLD
    next(old_folder.glob("corpus/*.parquet")).write_bytes(b"not parquet")  # a damaged old release
    md = build(store, instance, NEW)  # card and manifests still built: materialize asserts success
    assert md["baseline"] == OLD and "ragsft diff" in md["error"]
    folder = store.home_path / "releases" / NEW
    assert verify_release(folder).ok and "Changes since" not in (folder / "README.md").read_text(
        encoding="utf-8"
    )
