"""What plain helpers need of a store to read tables (Dagster-free): ``ArtifactStore`` itself, or
``defs.wiring.DeclaredInputs``, the store restricted to an asset's declared inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pyarrow as pa


class TableReader(Protocol):
    """Reads a stored table, or lists its files, by partition and store name."""

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table: ...

    def files(self, partition: str, asset: str) -> list[Path]: ...
