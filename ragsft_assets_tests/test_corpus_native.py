"""When the compiled corpus rules are used: ``native.load`` refuses stale builds and obeys the switches."""

from __future__ import annotations

import os

import pytest

from ragsft_assets.corpus import native


@pytest.mark.skipif(
    os.environ.get("RAGSFT_REQUIRE_NATIVE") != "1", reason="only where the build is required (CI)"
)
@pytest.mark.parametrize("name", native.NAMES)
def test_ci_runs_the_compiled_rules(name: str) -> None:
    """CI builds every extension from the C that is checked in: none may fall back to Python unseen."""
    module = native.load(name)
    assert module is not None and native.source_sha256(name) == module.SOURCE_SHA256


def test_switches_and_stale_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSFT_REQUIRE_NATIVE", raising=False)
    monkeypatch.setenv("RAGSFT_NATIVE", "0")
    assert native.load("enumeration") is None  # switched off
    monkeypatch.delenv("RAGSFT_NATIVE")
    assert native.load("no_such_rule") is None  # not built: the Python rule runs
    monkeypatch.setenv("RAGSFT_REQUIRE_NATIVE", "1")
    with pytest.raises(native.NativeExtensionError, match="missing"):
        native.load("no_such_rule")
    if native.load("enumeration") is None:
        pytest.skip("the enumeration extension is not built here")
    # A build from another version of the C file is refused: with a warning, or an error where required.
    monkeypatch.setattr(native, "source_sha256", lambda name: "0" * 64)
    with pytest.raises(native.NativeExtensionError, match="another version"):
        native.load("enumeration")
    monkeypatch.delenv("RAGSFT_REQUIRE_NATIVE")
    with pytest.warns(RuntimeWarning, match="another version"):
        assert native.load("enumeration") is None
