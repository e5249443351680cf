"""HomeResource: the snapshots, store and catalog resources all find their files under one home."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore


@pytest.mark.parametrize("resource", [ArtifactStore, CatalogResource, SnapshotSource])
def test_home_is_the_setting_else_ragsft_home(
    resource: type[dg.ConfigurableResource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path / "env_home"))
    assert resource().home_path == tmp_path / "env_home"
    monkeypatch.chdir(tmp_path)
    assert resource(home="relative").home_path == tmp_path / "relative"  # made absolute


def test_each_resource_roots_its_files_in_the_home(tmp_path: Path) -> None:
    home = str(tmp_path)
    with dg.build_resources(
        {
            "store": ArtifactStore(home=home),
            "catalog": CatalogResource(home=home),
            "snapshots": SnapshotSource(home=home),
        }
    ) as res:
        assert res.store.root == tmp_path / "assets"
        assert res.snapshots.root == tmp_path / "snapshots"
        assert res.catalog.db_path.parent == tmp_path
