"""Check a release folder against its manifests: every listed file present with the listed SHA-256."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ragsft_assets.release.layout import PROVENANCE
from ragsft_assets.release.manifest import MANIFEST, RELEASE_INDEX, sha256_file


@dataclass(slots=True)
class VerifyReport:
    """The outcome of ``verify_release``; ``ok`` only when nothing is missing, changed or unlisted."""

    checked: int = 0
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.unlisted or self.errors)

    def lines(self) -> list[str]:
        """Human-readable lines, problems first, one per file."""
        out = [f"MISMATCH {p}" for p in self.mismatched]
        out += [f"MISSING  {p}" for p in self.missing]
        out += [f"UNLISTED {p}" for p in self.unlisted]
        out += [f"ERROR    {e}" for e in self.errors]
        status = "OK" if self.ok else "FAILED"
        out.append(
            f"{status}: {self.checked} files checked, {len(self.mismatched)} mismatched, "
            f"{len(self.missing)} missing, {len(self.unlisted)} unlisted"
        )
        return out


def _expected(folder: Path, report: VerifyReport) -> dict[str, str]:
    """``{relative path: sha256}`` from every manifest and the release index."""
    expected: dict[str, str] = {}
    prov = folder / PROVENANCE
    manifests = sorted(prov.glob(f"*/{MANIFEST}")) if prov.is_dir() else []
    if not manifests:
        report.errors.append(f"no {PROVENANCE}/<config>/{MANIFEST} under {folder}")
    for m in manifests:
        try:
            doc = orjson.loads(m.read_bytes())
        except orjson.JSONDecodeError as e:
            report.errors.append(f"{m.relative_to(folder)} is not valid JSON: {e}")
            continue
        for rel, info in {**doc.get("files", {}), **doc.get("provenance_files", {})}.items():
            expected[rel] = info["sha256"]
    index = prov / RELEASE_INDEX
    if index.is_file():
        try:
            for rel, info in orjson.loads(index.read_bytes()).get("files", {}).items():
                expected[rel] = info["sha256"]
        except orjson.JSONDecodeError as e:
            report.errors.append(f"{PROVENANCE}/{RELEASE_INDEX} is not valid JSON: {e}")
    else:
        report.errors.append(f"{PROVENANCE}/{RELEASE_INDEX} is missing")
    return expected


def verify_release(folder: Path) -> VerifyReport:
    """Recompute the SHA-256 of every file the manifests list.

    A listed file that is absent is ``missing``; one whose hash differs is ``mismatched``; any file
    in the folder, of any kind, that no manifest lists is ``unlisted``. A manifest
    itself is covered by ``provenance/release.json``.
    """
    folder = Path(folder)
    report = VerifyReport()
    if not folder.is_dir():
        report.errors.append(f"{folder} is not a folder")
        return report
    expected = _expected(folder, report)
    for rel in sorted(expected):
        path = folder / rel
        if not path.is_file():
            report.missing.append(rel)
            continue
        report.checked += 1
        if sha256_file(path) != expected[rel]:
            report.mismatched.append(rel)
    # Any file of any kind (a stray .py, .png, .parquet...) that no manifest lists is unlisted;
    # only the release index itself is exempt, as it is the root of the listing.
    index = f"{PROVENANCE}/{RELEASE_INDEX}"
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        if rel != index and rel not in expected:
            report.unlisted.append(rel)
    return report
