"""The ``snapshots`` resource: where the source dump of a snapshot partition lives.

One folder per partition key, ``$RAGSFT_HOME/snapshots/<key>/``, holding the dump files in the
wikimedia/structured-wikipedia schema (``*.jsonl``, ``*.jsonl.gz``, ``*.parquet``) and optionally a
``snapshot.json`` with per-snapshot settings, e.g. ``{"split_shares": [0.6, 0.2, 0.2]}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragsft_assets.corpus.hub_snapshot import DEFAULT_LINES_PER_FILE, export_hub_snapshot
from ragsft_assets.corpus.structured_wikipedia import dump_files
from ragsft_assets.resources.home import HomeResource

SNAPSHOT_CONFIG = "snapshot.json"


class SnapshotNotFoundError(FileNotFoundError):
    """The folder of a snapshot key is missing or holds no dump file."""


class SnapshotSource(HomeResource):
    """Local snapshot folders under ``<home>/snapshots``; ``home`` defaults to ``$RAGSFT_HOME``."""

    @property
    def root(self) -> Path:
        return self.home_path / "snapshots"

    def folder(self, key: str) -> Path:
        """The folder of snapshot ``key`` (it may not exist)."""
        return self.root / key

    def require(self, key: str) -> Path:
        """The folder of ``key``; raises :class:`SnapshotNotFoundError` saying how to add it."""
        folder = self.folder(key)
        how = f"add it with `ragsft snapshots add {key} --from FOLDER`" + (
            " (or `--sample` for the bundled sample)" if key.startswith("sample.") else ""
        )
        if not folder.is_dir():
            raise SnapshotNotFoundError(f"snapshot {key!r} not found: expected the folder {folder}; {how}")
        if not dump_files(folder):
            raise SnapshotNotFoundError(
                f"snapshot {key!r}: no dump file (*.jsonl, *.jsonl.gz, *.parquet) in {folder}; {how}"
            )
        return folder

    def files(self, key: str) -> list[Path]:
        """The dump files of ``key``, sorted by name."""
        return dump_files(self.require(key))

    def config(self, key: str) -> dict[str, Any]:
        """The settings of ``snapshot.json`` in the snapshot's folder ({} when absent)."""
        path = self.folder(key) / SNAPSHOT_CONFIG
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object")
        return data

    def list_snapshots(self) -> list[str]:
        """Keys of the snapshot folders that hold at least one dump file, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and dump_files(p))

    def fetch_from_hub(
        self,
        key: str,
        *,
        revision: str | None = None,
        progress: Callable[[str], None] | None = None,
        lines_per_file: int = DEFAULT_LINES_PER_FILE,
        allow_unpinned: bool = False,
    ) -> list[Path]:
        """Export hub config ``key`` into its folder (streaming, revision pinned in hub.json, resumable)."""
        return export_hub_snapshot(
            key,
            self.folder(key),
            revision=revision,
            progress=progress,
            lines_per_file=lines_per_file,
            allow_unpinned=allow_unpinned,
        )
