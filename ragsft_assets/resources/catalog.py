"""The DuckDB catalog resource: one writer (``rebuild``), read-only connections for everyone else."""

from __future__ import annotations

from pathlib import Path

import duckdb

from ragsft_assets.release.catalog import CATALOG_FILE, CatalogSummary, build_catalog, open_catalog
from ragsft_assets.resources.home import HomeResource


class CatalogResource(HomeResource):
    """``$RAGSFT_HOME/catalog.duckdb`` (``home`` defaults to ``$RAGSFT_HOME``): every asset as a view."""

    @property
    def db_path(self) -> Path:
        return self.home_path / CATALOG_FILE

    def rebuild(self) -> CatalogSummary:
        """Rebuild the views (in a temp file renamed into place: readers are never blocked)."""
        return build_catalog(self.home_path, self.db_path)

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection (built first if the database does not exist yet)."""
        return open_catalog(self.home_path)
