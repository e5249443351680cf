"""The base-model registry never holds a credential (issue 34, "Secrets"): it is a plain file in the home."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.recall import registry
from ragsft_assets.resources.llm import LLMResource

SECRET_URL = "http://user:Pw0rd9s3cret@fleet.local/v1?api_key=Kx7key5ecret"


def _home_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


def test_add_refuses_a_base_url_with_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    res = CliRunner().invoke(
        main, ["base-models", "add", "m1", "--model", "m", "--backend", "openai", "--base-urls", SECRET_URL]
    )
    assert res.exit_code != 0
    assert "RAGSFT_BASE_MODEL_BASE_URLS" in res.output
    assert "Pw0rd9s3cret" not in res.output and "Kx7key5ecret" not in res.output
    assert b"Pw0rd9s3cret" not in _home_bytes(tmp_path) and b"Kx7key5ecret" not in _home_bytes(tmp_path)


def test_the_roles_secret_urls_are_read_at_run_time_never_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    monkeypatch.setenv("RAGSFT_BASE_MODEL_BACKEND", "openai")
    monkeypatch.setenv("RAGSFT_BASE_MODEL_BASE_URLS", SECRET_URL)
    runner = CliRunner()
    res = runner.invoke(main, ["base-models", "add", "m1", "--model", "org/m1"])
    assert res.exit_code == 0, res.output
    assert b"Pw0rd9s3cret" not in _home_bytes(tmp_path) and b"Kx7key5ecret" not in _home_bytes(tmp_path)
    entry = registry.resolve("m1")
    assert entry == registry.BaseModelEntry("org/m1", "openai", [])
    listed = runner.invoke(main, ["base-models", "list"]).output
    assert "Pw0rd9s3cret" not in listed and "(RAGSFT_BASE_MODEL_BASE_URLS)" in listed
    # At run time the entry keeps the role's own URLs (the resource reads them from the variable).
    default = LLMResource(role="base_model", backend="openai", base_urls=["http://role.local/v1"])
    got = registry.resource_for_key(default, "m1", tmp_path)
    assert (got.model, got.base_urls) == ("org/m1", ["http://role.local/v1"])


def test_list_masks_what_an_older_registry_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    old = {"old": {"model": "m", "backend": "openai", "base_urls": [SECRET_URL]}}
    registry.registry_path().write_bytes(orjson.dumps(old))
    listed = CliRunner().invoke(main, ["base-models", "list"]).output
    assert listed.startswith("old\tm\topenai\thttp://")
    assert "Pw0rd9s3cret" not in listed and "Kx7key5ecret" not in listed
