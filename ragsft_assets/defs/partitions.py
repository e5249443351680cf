"""Partition sets: ``snapshot`` (one key per snapshot and language, e.g. ``20240916.fr``) and
``qa_source`` (one key per outside question set and language, e.g. ``hotpotqa.en``).

A key belongs to one set only (``ragsft sources add`` and ``ragsft snapshots add`` refuse a key of
the other set), so artifacts under ``assets/<key>/`` and releases under ``releases/<key>/`` never
collide.
"""

from __future__ import annotations

import re

import dagster as dg

from ragsft_assets.corpus.snapshot_layout import (  # noqa: F401 - re-exported
    MAX_KEY_LENGTH,
    SNAPSHOT_KEY_RE,
    snapshot_language,
    validate_key,
    validate_snapshot_key,
)

SNAPSHOT_PARTITIONS_NAME = "snapshot"
snapshot_partitions = dg.DynamicPartitionsDefinition(name=SNAPSHOT_PARTITIONS_NAME)


QA_SOURCE_PARTITIONS_NAME = "qa_source"
qa_source_partitions = dg.DynamicPartitionsDefinition(name=QA_SOURCE_PARTITIONS_NAME)

# <source>.<lang>: a lowercase source name (e.g. hotpotqa, trust_align) and a language code.
# Matched with fullmatch (re.match's "$" lets a final newline through).
QA_SOURCE_KEY_RE = re.compile(r"[a-z][a-z0-9_-]*\.[a-z]{2,3}(?:-[a-z0-9]+)?")


def validate_source_key(key: str) -> str:
    """Return ``key`` if it is ``<source>.<lang>`` (e.g. ``hotpotqa.en``), else raise ValueError."""
    return validate_key(
        key,
        "source",
        QA_SOURCE_KEY_RE,
        "<source>.<lang> such as hotpotqa.en (a lowercase source name, a dot, a language code)",
    )


# Recall Rewrite: one key per base model (``ragsft base-models add KEY --model HF_ID``).
BASE_MODEL_PARTITIONS_NAME = "base_model"
base_model_partitions = dg.DynamicPartitionsDefinition(name=BASE_MODEL_PARTITIONS_NAME)
