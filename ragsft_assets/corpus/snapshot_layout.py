"""What a snapshot is on disk: its key, its dump files, the hub dataset (one definition each).

Dagster-free, so that the readers, the discovery logic of the sensor and the Dagster wiring
(``defs/partitions.py``) all import the same constants from below the wiring.
"""

from __future__ import annotations

import re
from pathlib import Path

# <YYYYMMDD>.<lang> for real dumps; a lowercase word (e.g. "sample.fr") for test/sample snapshots.
# Matched with fullmatch: with re.match, "$" also matches before a final newline ("x.fr\n" passed).
SNAPSHOT_KEY_RE = re.compile(r"(?:\d{8}|[a-z][a-z0-9_-]*)\.[a-z]{2,3}(?:-[a-z0-9]+)?")
# ours: a key names folders (assets/<key>/, releases/<key>/) and temporary names beside them
# (".<key>.build-<owner>-XXXX"), which must fit the file systems' 255-byte name limit.
MAX_KEY_LENGTH = 100


def validate_key(key: str, kind: str, pattern: re.Pattern[str], expected: str) -> str:
    """Return the ``kind`` partition key ``key`` if it can name a folder (and its temporary siblings)
    and ``pattern`` fully matches it, else raise ValueError saying what was ``expected``."""
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"invalid {kind} key {key[:40]!r}... ({len(key)} characters): a key names folders, "
            f"so it may have {MAX_KEY_LENGTH} characters at most"
        )
    if not pattern.fullmatch(key):
        raise ValueError(f"invalid {kind} key {key!r}: expected {expected}")
    return key


JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)
# Official MediaWiki pages-articles dumps, read by corpus/wikitext_dump.py into the same record shape.
XML_SUFFIXES = (".xml", ".xml.bz2", ".xml.gz")
# A dump file in a snapshot folder, of any of the kinds above.
DUMP_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES + XML_SUFFIXES
# Files that say a copy is still in progress: the folder is not ready yet.
PARTIAL_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".incomplete", ".download")

HUB_DATASET = "wikimedia/structured-wikipedia"
# Written by `ragsft snapshots add`, atomically and after every other file: the folder is complete
# (its files, with these sizes). Not hidden: hidden names are the project's temporary files.
ADDED_MANIFEST = "snapshot-added.json"


class CorruptDumpError(ValueError):
    """A dump file that cannot be read to its end (truncated or corrupt); the message names the file."""


def dump_files(folder: Path) -> list[Path]:
    """The dump files of a snapshot folder, sorted by name (``snapshot.json`` and hidden files excluded)."""
    files = [
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name.endswith(DUMP_SUFFIXES)
    ]
    return sorted(files, key=lambda p: p.name)


def validate_snapshot_key(key: str) -> str:
    """Return ``key`` if it is ``<YYYYMMDD>.<lang>`` (or ``<name>.<lang>``), else raise ValueError."""
    return validate_key(
        key,
        "snapshot",
        SNAPSHOT_KEY_RE,
        "<YYYYMMDD>.<lang> such as 20240916.fr (or <name>.<lang> such as sample.fr)",
    )


def snapshot_language(key: str) -> str:
    """The language part of a snapshot key (``20240916.fr`` -> ``fr``)."""
    return key.split(".", 1)[1]
