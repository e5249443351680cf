"""The base of the resources that live in the home folder (snapshots, store, catalog)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from ragsft_assets.home import ragsft_home


class HomeResource(dg.ConfigurableResource):
    """A resource under one home folder: ``home`` when set (made absolute), else ``$RAGSFT_HOME``."""

    home: str = ""

    @property
    def home_path(self) -> Path:
        return Path(self.home).resolve() if self.home else ragsft_home()
