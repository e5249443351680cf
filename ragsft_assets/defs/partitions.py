"""The ``snapshot`` partition set: one key per snapshot and language, e.g. ``20240916.fr``."""

from __future__ import annotations

import re

import dagster as dg

SNAPSHOT_PARTITIONS_NAME = "snapshot"
snapshot_partitions = dg.DynamicPartitionsDefinition(name=SNAPSHOT_PARTITIONS_NAME)

# <YYYYMMDD>.<lang> for real dumps; a lowercase word (e.g. "sample.fr") for test/sample snapshots.
SNAPSHOT_KEY_RE = re.compile(r"^(?:\d{8}|[a-z][a-z0-9_-]*)\.[a-z]{2,3}(?:-[a-z0-9]+)?$")


def validate_snapshot_key(key: str) -> str:
    """Return ``key`` if it is ``<YYYYMMDD>.<lang>`` (or ``<name>.<lang>``), else raise ValueError."""
    if not SNAPSHOT_KEY_RE.match(key):
        raise ValueError(
            f"invalid snapshot key {key!r}: expected <YYYYMMDD>.<lang> such as 20240916.fr "
            "(or <name>.<lang> such as sample.fr)"
        )
    return key


def snapshot_language(key: str) -> str:
    """The language part of a snapshot key (``20240916.fr`` -> ``fr``)."""
    return key.split(".", 1)[1]
