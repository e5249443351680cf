"""Issue 34: release files and folders follow the umask (0644/0755 under 022), not tempfile's 0600/0700.

Every release file goes through a temporary name (``storage.temp_beside``) and every release folder
through a staging folder (``storage.staging_folder``, ``layout.staging_dir``): both modes are set
from the umask, as a plain ``open``/``mkdir`` would, for ``datasets`` users on a shared machine.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from ragsft_assets import storage
from ragsft_assets.release import layout


@pytest.fixture(params=[0o022, 0o027])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_current_umask_is_read_without_changing_it(umask: int) -> None:
    assert storage.current_umask() == umask
    assert storage.current_umask() == umask


def test_release_folder_and_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "releases" / "sample.fr"
    staging = layout.staging_dir(target)
    storage.write_parquet(pa.table({"a": [1]}), staging / "corpus" / "train-00000-of-00001.parquet")
    storage.atomic_write_bytes(staging / "README.md", b"card\n")
    layout.swap_into_place(staging, target)
    assert _mode(target) == 0o777 & ~umask  # 0755 under 022
    assert _mode(target / "corpus") == 0o777 & ~umask
    assert _mode(target / "README.md") == 0o666 & ~umask  # 0644 under 022
    assert _mode(target / "corpus" / "train-00000-of-00001.parquet") == 0o666 & ~umask
    if umask == 0o022:
        assert (_mode(target), _mode(target / "README.md")) == (0o755, 0o644)
