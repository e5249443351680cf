"""Benchmark scripts behind ``ragsft bench NAME`` (ratios against a baseline, in one run)."""

from __future__ import annotations

import os
import platform
from importlib import metadata

# Libraries every benchmark's result depends on; each bench adds its own (e.g. rank-bm25, vllm).
BASE_PACKAGES = ("pyarrow", "duckdb", "numpy", "orjson", "dagster")


def machine_values(*packages: str) -> dict[str, object]:
    """The machine's cores and the library versions, appended last to every bench's closing line.

    A ratio means little without the machine it ran on: ``cores`` is what the process may use
    (its CPU affinity), ``cpu_count`` what the machine has, ``versions`` ``name-version`` pairs
    joined by commas (no spaces, so the ``key=value`` line stays parseable).

    Args:
        packages: distribution names beyond :data:`BASE_PACKAGES`.

    Returns:
        ``{"cores": int, "cpu_count": int, "versions": str}``.
    """
    names = list(dict.fromkeys((*BASE_PACKAGES, *packages)))
    versions = [f"python-{platform.python_version()}"]
    for name in names:
        try:
            versions.append(f"{name}-{metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}-absent")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"cores": usable, "cpu_count": os.cpu_count() or usable, "versions": ",".join(versions)}
