"""The project's Dagster instance as the CLI commands open it, and the source keys it holds.

Below every command module (``snapshots``, ``sources``, ``demo``, ``runs``, ``ui``...), so that none of
them imports another for these. Dagster is imported lazily: ``ragsft --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragsft_assets.home import dagster_home, ragsft_home

SOURCE_PARTITIONS = "qa_source"  # the dynamic partition set of outside question sets
_MINIMAL_DAGSTER_YAML = "# Created by `ragsft snapshots add`: a local instance shared with `dagster dev`.\ntelemetry:\n  enabled: false\n"


def ensure_instance_dir(home: Path | None = None) -> Path:
    """The DAGSTER_HOME folder, created with a minimal ``dagster.yaml`` when absent."""
    folder = dagster_home(home)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "dagster.yaml"
    if not config.exists():
        project_yaml = Path.cwd() / "dagster.yaml"  # the repo's instance settings, when run from the repo
        config.write_text(
            project_yaml.read_text(encoding="utf-8") if project_yaml.is_file() else _MINIMAL_DAGSTER_YAML,
            encoding="utf-8",
        )
    return folder


def instance(home: Path | None = None):  # noqa: ANN201 - a dg.DagsterInstance (dagster imported lazily)
    """The project's Dagster instance (its folder created when absent)."""
    import dagster as dg

    return dg.DagsterInstance.from_config(str(ensure_instance_dir(home)))


def ensure_instance_home() -> str:
    """Point DAGSTER_HOME at the project's instance (creating it) and return its path."""
    path = ensure_instance_dir()
    os.environ["DAGSTER_HOME"] = str(path)
    return str(path)


def sources_dir(home: Path | None = None) -> Path:
    """``$RAGSFT_HOME/sources``: one folder per installed outside question set."""
    return (home or ragsft_home()) / "sources"


def source_key_taken(key: str, home: Path | None = None) -> bool:
    """True when ``key`` is a source (folder or registered partition): `snapshots add` refuses it."""
    if (sources_dir(home) / key).exists():
        return True
    return dagster_home(home).exists() and instance(home).has_dynamic_partition(SOURCE_PARTITIONS, key)
