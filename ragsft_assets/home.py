"""The one home folder (``RAGSFT_HOME``) shared by the CLI, ``dagster dev`` and the tests.

Layout (see DESIGN.md)::

    $RAGSFT_HOME/
      snapshots/<key>/        source dumps, one folder per partition key
      assets/<key>/<asset>/   Parquet artifacts (one file per split where there are splits)
      assets/<key>/_ledger/   decision-ledger rows, one file per stage
      llm_cache/              content-addressed LLM call cache
      models/                 converted local models (embedded backend)
      releases/<key>/         shipped releases
      dagster/                the DAGSTER_HOME used by default
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = ".ragsft"


def ragsft_home() -> Path:
    """Return the home folder: ``$RAGSFT_HOME`` or ``./.ragsft``, made absolute."""
    return Path(os.environ.get("RAGSFT_HOME", DEFAULT_HOME)).expanduser().resolve()


def snapshots_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "snapshots"


def assets_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "assets"


def llm_cache_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "llm_cache"


def models_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "models"


def releases_dir(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / "releases"


def dagster_home(home: Path | None = None) -> Path:
    """The DAGSTER_HOME the project uses unless the environment already sets one: the stack's
    (PostgreSQL) while `ragsft stack up` runs, else ``dagster/`` (SQLite)."""
    env = os.environ.get("DAGSTER_HOME")
    if env:
        return Path(env).resolve()
    from ragsft_assets.stack.active import active_instance  # light: json, psutil

    base = home or ragsft_home()
    return active_instance(base) or base / "dagster"


def home_origin() -> str:
    """How :func:`ragsft_home` found the home: the variable, or the current folder's ``.ragsft``."""
    if os.environ.get("RAGSFT_HOME"):
        return "from $RAGSFT_HOME"
    return f"./{DEFAULT_HOME} of the current folder, no RAGSFT_HOME set"


def project_home() -> Path | None:
    """The ``.ragsft`` of the project this package is installed from (an editable clone), if it exists."""
    folder = Path(__file__).resolve().parents[1] / DEFAULT_HOME
    return folder if folder.is_dir() else None


def describe_home() -> str:
    """``RAGSFT_HOME=/path (how it was found)``, plus the project's home when that is another folder."""
    home = ragsft_home()
    text = f"RAGSFT_HOME={home} ({home_origin()})"
    other = project_home()
    if other is not None and other != home:
        text += f"; the project's home is {other}: cd {other.parent} or set RAGSFT_HOME={other}"
    return text


class HomeNotFoundError(FileNotFoundError):
    """A command that reads the home ran where there is none; its message says which and what to do."""


def existing_home(doing: str) -> Path:
    """The home, which must already exist: a command that only reads it never creates one.

    Run outside the project folder, ``./.ragsft`` is a new, empty folder: creating it there (and an
    instance in it) would leave an empty home behind and answer from it, e.g. ``explain`` "in no
    partition". ``doing`` names what could not be done ("explain", "catalog", ...).

    Raises:
        HomeNotFoundError: no home folder; the message says which home was looked for, how it was
            found, the project's home when there is one, and which commands create a home.
    """
    home = ragsft_home()
    if home.is_dir():
        return home
    text = f"no ragsft home at {home} ({home_origin()}), so nothing to {doing}"
    other = project_home()
    if other is not None and other != home:
        text += f"; the project's home is {other}: cd {other.parent} or set RAGSFT_HOME={other}"
    else:
        text += "; cd to the project's folder or set RAGSFT_HOME to its .ragsft"
    text += " (`ragsft snapshots add KEY --sample` or `ragsft demo` creates a home)"
    raise HomeNotFoundError(text)
