"""One real ``ragsft demo`` for the whole test session (the embedded model: minutes on two cores).

The README's demo figures (test_docs_commands) and the console a newcomer sees are checked on the
same run, which starts once, in a process of its own as a user's would (its console is what a
terminal shows: stdout and stderr together), in a fresh folder whose home is the default
``./.ragsft``. Later callers get the same result.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO_TIMEOUT_S = 1800  # ours: ten times what it takes on two quiet cores


@dataclass(frozen=True)
class DemoRun:
    home: Path  # the run's RAGSFT_HOME
    output: str  # stdout and stderr, interleaved as a terminal shows them
    returncode: int


@functools.cache
def _run() -> DemoRun:
    work = Path(tempfile.mkdtemp(prefix="ragsft-demo-"))
    (work / "dagster.yaml").symlink_to(REPO / "dagster.yaml")  # as from a clone: the instance settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGSFT_", "DAGSTER_"))}
    env["PYTHONUNBUFFERED"] = "1"  # the lines in the order they were printed
    proc = subprocess.run(
        [sys.executable, "-c", "from ragsft_assets.cli import main; main()", "demo"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    return DemoRun(work / ".ragsft", proc.stdout, proc.returncode)


def shared_demo_run() -> DemoRun:
    """The session's demo run (started on the first call); skips where the embedded model cannot run."""
    pytest.importorskip("vllm")
    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()
    except FileNotFoundError as exc:  # the model package is an extra: no model, no demo (as conftest)
        pytest.skip(str(exc))
    run = _run()
    assert run.returncode == 0, f"ragsft demo exited {run.returncode}:\n{run.output[-6000:]}"
    return run
