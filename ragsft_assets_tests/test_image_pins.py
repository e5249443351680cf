"""The cluster image's pins exist and resolve together: pip's resolver, on the package index, on
exactly what deploy/Dockerfile installs (``.[k8s]`` with ``-c constraints.txt``).

Network: these tests reach the package index (PyPI) and nothing else; CI reaches it too.
Run as a script with ``--write`` to rewrite constraints.txt after a change of pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / "constraints.txt"
DOCKERFILE = REPO / "deploy" / "Dockerfile"


def image_install_steps() -> list[list[str]]:
    """The arguments of each of the Dockerfile's ``pip install`` commands, in order (``--no-cache-dir``
    left out): the locked dependencies, then the package."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [
        [a for a in shlex.split(line) if a != "--no-cache-dir"]
        for line in re.findall(r"-m pip install (.+?)(?:&&|$)", text, flags=re.M)
    ]


def image_install_args() -> list[str]:
    """The arguments of the Dockerfile's ``pip install`` of the package (what decides the versions)."""
    (args,) = [step for step in image_install_steps() if ".[k8s]" in step]
    return args


def resolve(args: list[str], tmp: Path) -> tuple[int, dict[str, str], str]:
    """pip's resolver on ``args`` from the repository root, installing nothing: (exit code, the
    name -> version it picked, pip's stderr)."""
    report = tmp / "report.json"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--report", str(report), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    picked: dict[str, str] = {}
    if out.returncode == 0:
        for item in json.loads(report.read_text())["install"]:
            meta = item["metadata"]
            if meta["name"].lower() != "ragsft":
                picked[meta["name"].lower()] = meta["version"]
    return out.returncode, picked, out.stderr


def pinned(path: Path = CONSTRAINTS) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return {n.lower(): v for n, v in (line.split("==") for line in lines if line)}


@pytest.mark.network
def test_the_image_requirements_resolve_to_exactly_the_constraints(tmp_path: Path) -> None:
    # The image installs the lock first (its own layer), then the package against the same lock.
    assert image_install_steps() == [["-r", "constraints.txt"], ["-c", "constraints.txt", ".[k8s]"]]
    args = image_install_args()
    code, picked, err = resolve(args, tmp_path)
    assert code == 0, err[-3000:]
    pins = pinned()
    # A lock: every package the image gets is pinned, and every pin is one the image gets.
    assert picked == pins, {
        "not pinned": sorted(set(picked) - set(pins)),
        "pinned, not installed": sorted(set(pins) - set(picked)),
        "other version": sorted(k for k in set(picked) & set(pins) if picked[k] != pins[k]),
    }
    assert picked["dagster-k8s"] == "0.29.27" and picked["dagster"] == "1.13.27"


@pytest.mark.network
def test_the_resolver_check_fails_on_a_pin_that_does_not_exist(tmp_path: Path) -> None:
    """What the image had: dagster-k8s 0.29.28, a version the index never had."""
    bad = tmp_path / "constraints.txt"
    bad.write_text(CONSTRAINTS.read_text().replace("dagster-k8s==0.29.27", "dagster-k8s==0.29.28"))
    code, _, err = resolve(["-c", str(bad), ".[k8s]"], tmp_path)
    assert code != 0 and "dagster-k8s" in err


@pytest.mark.network
def test_the_one_gpu_install_resolves_on_the_pinned_vllm(tmp_path: Path) -> None:
    """docs/one-gpu.md's `pip install -c constraints.txt -e '.[gpu]'`: the pinned vLLM with the locked
    versions of everything the image shares."""
    code, picked, err = resolve(["-c", "constraints.txt", ".[gpu]"], tmp_path)
    assert code == 0, err[-3000:]
    assert picked["vllm"] == "0.32.0" and picked["dagster"] == pinned()["dagster"]


def write_constraints() -> None:
    """Rewrite constraints.txt: what the image resolves, preferring this environment's versions
    (so the dev/CI environment and the image agree on every package they share)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        freeze = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True
        ).stdout
        env = Path(tmp) / "env.txt"
        env.write_text("\n".join(line for line in freeze.splitlines() if "==" in line) + "\n")
        code, picked, err = resolve(["-c", str(env), ".[k8s]"], Path(tmp))
        if code != 0:
            raise SystemExit(err)
    header = "".join(line + "\n" for line in CONSTRAINTS.read_text().splitlines() if line.startswith("#"))
    CONSTRAINTS.write_text(header + "".join(f"{n}=={v}\n" for n, v in sorted(picked.items())))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_constraints()
