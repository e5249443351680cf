"""The artifact store resource: Parquet files under ``$RAGSFT_HOME/assets``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ragsft_assets import storage
from ragsft_assets.ledger import write_ledger
from ragsft_assets.resources.home import HomeResource


class ArtifactStore(HomeResource):
    """Reads and writes asset tables; ``home`` defaults to ``$RAGSFT_HOME`` (or ``./.ragsft``)."""

    @property
    def root(self) -> Path:
        return self.home_path / "assets"

    def path(self, partition: str, asset: str, part: str = storage.ALL) -> Path:
        return storage.asset_path(partition, asset, part, self.root)

    def write(self, table: pa.Table, partition: str, asset: str, part: str = storage.ALL) -> Path:
        return storage.write_asset(table, partition, asset, part, self.root)

    def write_splits(self, table: pa.Table, partition: str, asset: str) -> dict[str, Path]:
        return storage.write_split_asset(table, partition, asset, root=self.root)

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table:
        return storage.read_asset(partition, asset, part, self.root)

    def files(self, partition: str, asset: str) -> list[Path]:
        return storage.asset_files(partition, asset, self.root)

    def write_ledger(self, table: pa.Table, partition: str, stage: str) -> Path:
        return write_ledger(table, partition, stage, self.root)
