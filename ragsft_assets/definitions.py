"""The one ``Definitions`` object of the ragsft code location (found via workspace.yaml)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from ragsft_assets.defs.jobs import ALL_JOBS
from ragsft_assets.defs.resources import default_resources


def build_definitions(resources: dict[str, Any] | None = None) -> dg.Definitions:
    """Merge every stage family's Definitions with the jobs and the resources.

    Args:
        resources: resources by key; the default resources (``defs/resources.py``) when None.
            Tests pass their own (a temporary home, a test double of the model).
    """
    families = []
    for name in ("corpus", "multihop", "rag_sft", "release", "automation", "recall", "long_context", "plan"):
        module = __import__(f"ragsft_assets.defs.{name}", fromlist=["defs"])
        family_defs = getattr(module, "defs", None)
        if family_defs is not None:
            families.append(family_defs)
    # In-process execution: one embedded engine serves the whole run instead of one per step
    # process, and LLM steps never compete for the same cores (or GPU).
    return dg.Definitions.merge(
        *families,
        dg.Definitions(
            jobs=ALL_JOBS,
            resources=default_resources() if resources is None else resources,
            executor=dg.in_process_executor,
        ),
    )


defs = build_definitions()
