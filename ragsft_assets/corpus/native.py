"""The compiled (C) versions of the corpus stage's hot rules, and when they are used.

``setup.py`` builds each ``_<name>_native`` extension from the C file beside this module, with the
SHA-256 of that file compiled in. :func:`load` returns the extension only when it is current: built
from the C file that is there now (an editable checkout whose C changed since the last build would
otherwise run old code). Everything the extensions compute has a Python implementation that stays the
reference: the tests compare the two on real and generated input, and the Python one runs wherever
no extension is present.

Environment:
    ``RAGSFT_NATIVE=0``: use the Python implementations (to compare, or to rule the C out).
    ``RAGSFT_REQUIRE_NATIVE=1`` (CI sets it): a missing or stale extension raises instead of falling
    back, so a broken build cannot pass unseen as a slower run.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
# The extensions setup.py builds (``_<name>_native``), each from ``_<name>_native.c`` beside this module.
NAMES = ("enumeration", "abstracts")


class NativeExtensionError(ImportError):
    """``RAGSFT_REQUIRE_NATIVE=1`` and a compiled extension is missing or older than its C source."""


def source_sha256(name: str) -> str | None:
    """SHA-256 of ``_<name>_native.c`` beside this module, None where the source is not shipped."""
    path = HERE / f"_{name}_native.c"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def load(name: str) -> ModuleType | None:
    """The current compiled extension ``_<name>_native``, or None (then the caller uses Python).

    Raises:
        NativeExtensionError: with ``RAGSFT_REQUIRE_NATIVE=1``, when it is missing or stale.
    """
    if os.environ.get("RAGSFT_NATIVE", "1") == "0":
        return None
    required = os.environ.get("RAGSFT_REQUIRE_NATIVE") == "1"
    try:
        module = importlib.import_module(f"ragsft_assets.corpus._{name}_native")
    except ImportError as exc:
        if required:
            raise NativeExtensionError(
                f"the compiled extension _{name}_native is missing ({exc}); build it with "
                "`pip install -e .` (needs a C compiler) or unset RAGSFT_REQUIRE_NATIVE"
            ) from exc
        return None
    expected = source_sha256(name)
    if expected is not None and getattr(module, "SOURCE_SHA256", None) != expected:
        message = (
            f"the compiled extension _{name}_native was built from another version of "
            f"_{name}_native.c; rebuild it with `pip install -e .` (or `bash scripts/bootstrap.sh`)"
        )
        if required:
            raise NativeExtensionError(message)
        warnings.warn(message + "; using the Python implementation meanwhile", RuntimeWarning, stacklevel=2)
        return None
    return module


def compiled_names() -> list[str]:
    """The names of :data:`NAMES` whose extension :func:`load` gives (what runs compiled here)."""
    return [name for name in NAMES if load(name) is not None]
