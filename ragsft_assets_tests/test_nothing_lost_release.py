"""Issue 34: ``verify --digest ""`` is an error, and a full disk while a release is written keeps the last one.

ENOSPC (``OSError(errno.ENOSPC)``) is injected into the release's data writer half-way through a
rebuild: the previous release stays in place byte for byte (it still verifies against its root
digest) and no half-written file or staging folder is left anywhere under the home.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli.release import verify
from ragsft_assets.release import build
from ragsft_assets.release.manifest import root_digest
from ragsft_assets.release.verify import verify_release
from ragsft_assets.storage import atomic_write_bytes
from ragsft_assets_tests.release_fixtures import PARTITION
from ragsft_assets_tests.test_release_build import make_release


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("home")
    _, folder, _ = make_release(home)
    return home, folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _hidden(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob(".*"))


@pytest.mark.parametrize("value", ["", "  ", "abc", "g" * 64])
def test_verify_with_an_empty_or_malformed_digest_is_an_error(release: tuple[Path, Path], value: str) -> None:
    _, folder = release
    out = CliRunner().invoke(verify, [str(folder), "--digest", value])
    assert out.exit_code == 2, out.output  # a usage error, not a check turned off
    assert "--digest" in out.output and "SHA-256" in out.output
    assert "OK:" not in out.output


def test_verify_release_with_an_empty_expected_digest_fails(release: tuple[Path, Path]) -> None:
    _, folder = release
    assert verify_release(folder).ok
    assert not verify_release(folder, expected_digest="").ok  # "" is a digest nothing matches
    good = root_digest(folder)
    out = CliRunner().invoke(verify, [str(folder), "--digest", good.upper()])
    assert out.exit_code == 0 and "(as expected)" in out.output, out.output


def test_a_full_disk_while_writing_a_release_keeps_the_previous_one(
    release: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, folder = release
    before, digest = _tree(folder), root_digest(folder)
    assert _hidden(home) == []
    written = []
    real = pq.ParquetWriter.write_table

    def fill_the_disk(self, table, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        written.append(table.num_rows)
        if len(written) == 3:  # a few files in: some data files of the new release are whole already
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fill_the_disk)
    with pytest.raises(OSError) as failed:
        build.build_release(home / "assets", PARTITION, folder)
    assert failed.value.errno == errno.ENOSPC and len(written) == 3
    assert _tree(folder) == before and root_digest(folder) == digest
    assert verify_release(folder, expected_digest=digest).ok
    assert _hidden(home) == []  # no temporary file, staging folder or set-aside release left
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]


def test_a_full_disk_in_an_atomic_write_keeps_the_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "provenance" / "release.json"
    atomic_write_bytes(path, b"old\n")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_bytes(path, b"new, longer\n")
    assert path.read_bytes() == b"old\n" and sorted(p.name for p in path.parent.iterdir()) == ["release.json"]
