"""No test or package file reads the ``../shared`` folder: a clone anywhere must find its data in-tree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `parents[2] / "shared"`, `"../shared"`, `/work/shared`, `"shared/data"`: every spelling of the outside folder.
PATTERN = re.compile(
    r"""parents\[2\]\s*/\s*["']shared|\.\./shared|/work/shared|["']shared/data|["']shared["']\s*/\s*["']data"""
)


def offenders(root: Path) -> list[str]:
    """Return ``file:line`` for each Python line of the package and tests that points at ../shared."""
    hits = []
    for folder in ("ragsft_assets", "ragsft_assets_tests"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == Path(__file__).name:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PATTERN.search(line):
                    hits.append(f"{path.relative_to(root)}:{n}")
    return hits


def test_nothing_reads_the_shared_folder() -> None:
    assert offenders(ROOT) == []


def test_the_scan_catches_a_shared_path(tmp_path: Path) -> None:
    (tmp_path / "ragsft_assets").mkdir()
    (tmp_path / "ragsft_assets_tests").mkdir()
    (tmp_path / "ragsft_assets_tests" / "t.py").write_text(
        'D = Path(__file__).resolve().parents[2] / "shared" / "data"\n'
    )
    (tmp_path / "ragsft_assets" / "m.py").write_text('D = "../shared/data/x.json"\n')
    assert offenders(tmp_path) == ["ragsft_assets/m.py:1", "ragsft_assets_tests/t.py:1"]
