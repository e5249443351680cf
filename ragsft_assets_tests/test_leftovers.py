"""Temporary names carry their owner process; the next writer removes those whose owner is dead here.

Unit tests of ``ragsft_assets.leftovers`` and of the writers that use it: the release's staging and
swap (``layout.recover``, a release set aside by a killed swap is put back), the atomic Parquet
writes of the store, the catalog's temp database and the corpus build's chunk folder. The killed
processes themselves are in ``test_fault_injection.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets import leftovers
from ragsft_assets.corpus.abstracts import AbstractsConfig
from ragsft_assets.corpus.build import CHUNKS_PREFIX, build_abstracts
from ragsft_assets.release import layout
from ragsft_assets.release.catalog import build_catalog
from ragsft_assets.storage import write_parquet


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): dead on this host."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _name(
    prefix: str, pid: int, start: int | None = None, host: str | None = None, rest: str = "abc_1"
) -> str:
    if start is None:
        start = int(leftovers.start_ticks(pid) or 0)
    return f"{prefix}{host or leftovers._host()}-{pid}-{start}-{rest}"


def test_owner_tag_names_this_process() -> None:
    tag = leftovers.owner_tag()
    owner = leftovers.owner_of(".x." + tag + "q1z", ".x.")
    assert owner is not None and owner.pid == os.getpid() and owner.alive()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (".t.build-my-host.lan-42-1700000000-k3_x", ("my-host.lan", 42, 1700000000)),
        (".t.build-h-7-0-abc.tmp.wal", ("h", 7, 0)),
        (".t.build-abcdef", None),  # made before owners were named: never attributed, never removed
        (".t.old-h-7-0-abc", None),  # another prefix
        (".t.build-h-x-0-abc", None),
    ],
)
def test_owner_of_parses_names(name: str, expected: tuple[str, int, int] | None) -> None:
    owner = leftovers.owner_of(name, ".t.build-")
    assert (None if owner is None else (owner.host, owner.pid, owner.start)) == expected


def test_stale_entries_are_the_dead_owners_on_this_host(tmp_path: Path, dead_pid: int) -> None:
    prefix = ".out.build-"
    names = {
        "dead": _name(prefix, dead_pid, start=1700000000),
        "alive": _name(prefix, os.getpid()),
        # this pid, another start time: the pid was reused, the owner is gone (a container's pid 7)
        "reused": _name(prefix, os.getpid(), start=int(leftovers.start_ticks(os.getpid()) or 0) + 3600),
        "other_host": _name(prefix, dead_pid, start=1, host="another-host"),
        "legacy": ".out.build-abcdef",
    }
    for n in names.values():
        (tmp_path / n).mkdir()
    (tmp_path / names["dead"] / "part.parquet").write_bytes(b"half")
    stale = leftovers.stale_entries(tmp_path, prefix)
    assert [p.name for p in stale] == sorted([names["dead"], names["reused"]])
    assert leftovers.remove_stale(tmp_path, prefix) == stale
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["alive"], names["other_host"], names["legacy"]]
    )
    assert leftovers.stale_entries(tmp_path / "missing", prefix) == []


def test_release_staging_of_a_dead_build_is_removed(tmp_path: Path, dead_pid: int) -> None:
    target = tmp_path / "sample.fr"
    dead = tmp_path / _name(".sample.fr.build-", dead_pid, start=1)
    (dead / "corpus").mkdir(parents=True)
    (dead / "corpus" / "train-00000-of-00001.parquet").write_bytes(b"half")
    live = layout.staging_dir(target)  # the next build
    assert not dead.exists()
    assert live.name.startswith(".sample.fr.build-" + leftovers.owner_tag())
    # a live build's staging folder is never touched, even by another build of the same target
    other = layout.staging_dir(target)
    assert live.is_dir() and other.is_dir()
    (live / "README.md").write_text("new\n", encoding="utf-8")
    layout.swap_into_place(live, target)
    assert (target / "README.md").read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, other.name])


def test_release_set_aside_by_a_killed_swap_is_put_back(tmp_path: Path, dead_pid: int) -> None:
    # killed between the two renames: the old release aside, the new staging complete, no target
    target = tmp_path / "sample.fr"
    old = tmp_path / _name(".sample.fr.old-", dead_pid, start=1)
    old.mkdir()
    (old / "README.md").write_text("old\n", encoding="utf-8")
    staged = tmp_path / _name(".sample.fr.build-", dead_pid, start=1)
    staged.mkdir()
    (staged / "README.md").write_text("new, no card nor manifests\n", encoding="utf-8")
    done = layout.recover(target)
    assert (target / "README.md").read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert len(done) == 2 and "restored" in done[0]


def test_release_set_aside_is_removed_when_the_swap_had_finished(tmp_path: Path, dead_pid: int) -> None:
    # killed after the new release was renamed in, before the old one was deleted
    target = tmp_path / "sample.fr"
    target.mkdir()
    (target / "README.md").write_text("new\n", encoding="utf-8")
    old = tmp_path / _name(".sample.fr.old-", dead_pid, start=1)
    old.mkdir()
    (old / "README.md").write_text("old\n", encoding="utf-8")
    layout.recover(target)
    assert (target / "README.md").read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_parquet_write_removes_a_dead_writers_temp_file(tmp_path: Path, dead_pid: int) -> None:
    path = tmp_path / "abstracts" / "train.parquet"
    path.parent.mkdir()
    dead = path.parent / (_name(".train.parquet.", dead_pid, start=1) + ".tmp")
    live = path.parent / (_name(".train.parquet.", os.getpid()) + ".tmp")
    other = path.parent / (
        _name(".test.parquet.", dead_pid, start=1) + ".tmp"
    )  # another file's: its own write
    for p in (dead, live, other):
        p.write_bytes(b"half")
    write_parquet(pa.table({"x": [1]}), path)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, live.name, other.name])


def test_catalog_build_removes_a_dead_builds_database(tmp_path: Path, dead_pid: int) -> None:
    base = _name(".catalog.duckdb.", dead_pid, start=1) + ".tmp"
    for name in (base, base + ".wal"):
        (tmp_path / name).write_bytes(b"half")
    build_catalog(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.duckdb"]


def test_corpus_build_removes_a_dead_builds_chunks(tmp_path: Path, dead_pid: int) -> None:
    dead = tmp_path / _name(CHUNKS_PREFIX, dead_pid, start=1)
    dead.mkdir()
    (dead / "chunk-0000000.arrow").write_bytes(b"half")
    build = build_abstracts([], AbstractsConfig(), tmp_dir=str(tmp_path))
    assert build.table.num_rows == 0
    assert list(tmp_path.iterdir()) == []  # the dead one's chunks and this build's own folder are gone


def test_sweep_finds_dead_owners_temp_entries_at_any_depth(tmp_path: Path, dead_pid: int) -> None:
    release = tmp_path / "releases" / "sample.fr"
    part = tmp_path / "assets" / "sample.fr" / "abstracts"
    part.mkdir(parents=True)
    (tmp_path / "releases").mkdir()
    dead = {
        "tmp": part / (_name(".train.parquet.", dead_pid, start=1) + ".tmp"),
        "chunks": part.parent / _name(CHUNKS_PREFIX, dead_pid, start=1),
        "staging": release.parent / _name(".sample.fr.build-", dead_pid, start=1),
        "aside": release.parent / _name(".sample.fr.old-", dead_pid, start=1),
    }
    kept = [
        part / (_name(".train.parquet.", os.getpid()) + ".tmp"),  # a live writer's
        part / (_name(".train.parquet.", dead_pid, start=1, host="another-host") + ".tmp"),
        part / ".train.parquet.abcdef.tmp",  # no owner in the name
    ]
    for p in (dead["tmp"], *kept):
        p.write_bytes(b"half")
    for key in ("chunks", "staging", "aside"):
        dead[key].mkdir()
        (dead[key] / "README.md").write_text(key, encoding="utf-8")
    # the chunk folder's own files carry no owner: the folder goes whole, its content is not listed
    found = leftovers.find_stale(tmp_path)
    assert [s.path for s in found] == sorted(dead.values(), key=str)
    assert [s.set_aside for s in found if s.set_aside] == [release]

    planned = leftovers.sweep(tmp_path, dry_run=True)
    assert len(planned) == 4 and f"would restore {dead['aside']} as {release}" in planned
    assert all(p.exists() for p in dead.values())  # a dry run changes nothing

    done = leftovers.sweep(tmp_path)
    assert len(done) == 4 and any(line.startswith(f"restored {release}") for line in done)
    assert not any(p.exists() for p in dead.values()) and all(p.exists() for p in kept)
    assert (release / "README.md").read_text(encoding="utf-8") == "aside"  # the set-aside release is back
    assert leftovers.sweep(tmp_path) == []
