"""Check a release folder against its manifests, and the manifests against a root digest.

Every listed path must be a regular file inside the folder (a symlink, even to an identical copy,
is an error) with the listed SHA-256; anything else in the folder is reported (unlisted files,
links, empty folders). The folder certifies itself only up to ``provenance/release.json``: an
edit that re-hashes the manifests and the index is consistent. ``expected_digest`` (the root
digest printed at build and kept in the catalog's digest log) closes that gap.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ragsft_assets.release.layout import PROVENANCE
from ragsft_assets.release.manifest import MANIFEST, RELEASE_INDEX, RUN_STATS, root_digest, sha256_file

INDEX = f"{PROVENANCE}/{RELEASE_INDEX}"
STATS = f"{PROVENANCE}/{RUN_STATS}"  # the run's statistics: present or not, never certified


@dataclass(slots=True)
class VerifyReport:
    """The outcome of ``verify_release``; ``ok`` only when nothing is missing, changed, unlisted or odd."""

    checked: int = 0
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    not_regular: list[str] = field(default_factory=list)
    empty_dirs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    digest: str = ""
    expected_digest: str | None = None

    @property
    def digest_ok(self) -> bool:
        return self.expected_digest is None or self.digest == self.expected_digest

    @property
    def ok(self) -> bool:
        problems = (self.mismatched, self.missing, self.unlisted, self.not_regular, self.empty_dirs)
        return not (any(problems) or self.errors) and self.digest_ok

    def lines(self) -> list[str]:
        """Human-readable lines, problems first, one per file."""
        out = [f"MISMATCH {p}" for p in self.mismatched]
        out += [f"MISSING  {p}" for p in self.missing]
        out += [f"NOTFILE  {p} (a link or not a regular file inside the release)" for p in self.not_regular]
        out += [f"UNLISTED {p}" for p in self.unlisted]
        out += [f"EMPTYDIR {p}" for p in self.empty_dirs]
        out += [f"ERROR    {e}" for e in self.errors]
        if self.expected_digest is not None and not self.digest_ok:
            out.append(
                f"DIGEST   root digest {self.digest or '(none)'} is not the expected {self.expected_digest}: "
                f"{INDEX} was changed since the release was built"
            )
        if self.digest:
            out.append(
                f"root digest {self.digest}"
                + (" (as expected)" if self.expected_digest is not None and self.digest_ok else "")
            )
        status = "OK" if self.ok else "FAILED"
        out.append(
            f"{status}: {self.checked} files checked, {len(self.mismatched)} mismatched, "
            f"{len(self.missing)} missing, {len(self.unlisted)} unlisted, {len(self.not_regular)} not regular, "
            f"{len(self.empty_dirs)} empty folders"
        )
        return out


def _regular_inside(folder: Path, rel: str) -> bool | None:
    """True: a regular file inside ``folder``, reached through no link; None: absent; False: anything else."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts:
        return False
    path = folder
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            return False
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return False
        if i == len(parts) - 1:
            return stat.S_ISREG(st.st_mode)
    return False


def _load(folder: Path, rel: str, report: VerifyReport) -> dict | None:
    """The JSON object at ``rel``, or None with the reason recorded (missing, not regular, invalid)."""
    kind = _regular_inside(folder, rel)
    if kind is not True:
        if kind is False:
            report.not_regular.append(rel)
        elif rel == INDEX:
            report.errors.append(f"{INDEX} is missing")
        else:
            report.missing.append(rel)
        return None
    try:
        doc = orjson.loads((folder / rel).read_bytes())
    except orjson.JSONDecodeError as e:
        report.errors.append(f"{rel} is not valid JSON: {e}")
        return None
    if not isinstance(doc, dict):
        report.errors.append(f"{rel} must hold a JSON object")
        return None
    return doc


def _entries(doc: dict, rel: str, keys: tuple[str, ...], report: VerifyReport) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in keys:
        listed = doc.get(key, {})
        if not isinstance(listed, dict):
            report.errors.append(f"{rel}: {key!r} must map paths to {{'sha256': ...}}")
            continue
        for path, info in listed.items():
            sha = info.get("sha256") if isinstance(info, dict) else None
            if not isinstance(sha, str) or len(sha) != 64:
                report.errors.append(f"{rel}: the entry for {path} has no sha256 (a 64-hex-digit string)")
                continue
            out[path] = sha
    return out


def _expected(folder: Path, report: VerifyReport) -> dict[str, str]:
    """``{relative path: sha256}`` from every manifest and the release index."""
    expected: dict[str, str] = {}
    prov = folder / PROVENANCE
    manifests = sorted(prov.glob(f"*/{MANIFEST}")) if prov.is_dir() and not prov.is_symlink() else []
    if not manifests:
        report.errors.append(f"no {PROVENANCE}/<config>/{MANIFEST} under {folder}")
    for m in manifests:
        rel = m.relative_to(folder).as_posix()
        doc = _load(folder, rel, report)
        if doc is not None:
            expected |= _entries(doc, rel, ("files", "provenance_files"), report)
    index = _load(folder, INDEX, report)
    if index is not None:
        expected |= _entries(index, INDEX, ("files",), report)
    return expected


def verify_release(folder: Path, expected_digest: str | None = None) -> VerifyReport:
    """Recompute the SHA-256 of every file the manifests list, and the root digest.

    A listed file that is absent is ``missing``; a listed path that is a link, a folder or any
    other non-regular file, or that lies outside the folder, is ``not_regular``; one whose hash
    differs is ``mismatched``; a manifest entry without a sha256 is an error. Any entry of the
    folder that no manifest lists is ``unlisted`` (links included), and any empty folder is
    reported. A manifest itself is covered by ``provenance/release.json``; that file's SHA-256 is
    the root digest, compared with ``expected_digest`` when given.
    """
    folder = Path(folder)
    # `is not None`: an empty expected digest fails the check, it does not turn it off
    report = VerifyReport(
        expected_digest=expected_digest.strip().lower() if expected_digest is not None else None
    )
    if not folder.is_dir():
        report.errors.append(f"{folder} is not a folder")
        return report
    expected = _expected(folder, report)
    for rel in sorted(expected):
        kind = _regular_inside(folder, rel)
        if kind is None:
            report.missing.append(rel)
            continue
        if kind is False:
            report.not_regular.append(rel)
            continue
        report.checked += 1
        if sha256_file(folder / rel) != expected[rel]:
            report.mismatched.append(rel)
    if _regular_inside(folder, INDEX):
        report.digest = root_digest(folder)
    listed = set(expected) | {INDEX}
    for parent, dirs, files in os.walk(folder):
        base = Path(parent)
        for name in sorted(dirs):
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                if rel not in listed:
                    report.unlisted.append(rel)
            else:
                with os.scandir(path) as entries:  # closed now: an open iterator warns
                    if not any(entries):
                        report.empty_dirs.append(rel)
        for name in sorted(files):
            rel = (base / name).relative_to(folder).as_posix()
            if rel == STATS:
                if _regular_inside(folder, rel) is not True:
                    report.not_regular.append(rel)
                continue
            if rel not in listed:
                report.unlisted.append(rel)
    report.unlisted.sort()
    report.empty_dirs.sort()
    report.not_regular = sorted(set(report.not_regular))
    return report
