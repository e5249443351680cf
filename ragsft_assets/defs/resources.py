"""The default resources of the code location, by role.

LLM roles default to the embedded CPU model (SmolLM2-135M-Instruct on vLLM's CPU build); one
engine serves every role of a process. Point a role at a stronger model from the launchpad or
with environment variables, e.g. ``RAGSFT_JUDGE_BACKEND=openai``,
``RAGSFT_JUDGE_BASE_URLS=http://gpu-1:8000/v1,http://gpu-2:8000/v1``, ``RAGSFT_JUDGE_MODEL=...``,
``RAGSFT_JUDGE_CONCURRENCY=128`` (per URL), ``RAGSFT_JUDGE_ENABLE_THINKING=false``. ``docs/llm.md``
lists every variable.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ragsft_assets.defs.gpu_selection import run_roles
from ragsft_assets.llm import gpu_share
from ragsft_assets.masking import mask_url
from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore


def env_bool(raw: str) -> bool | None:
    """A boolean variable: true/false (1/0, yes/no, on/off); ``unset``/``default`` = None."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("unset", "default", "none", ""):
        return None
    raise ValueError(raw)


env_bool.__name__ = "bool"  # the error says "is not a valid bool"

# Settings every model role reaches over HTTP the same way (chat roles and the embedder).
HTTP_ENV: dict[str, Any] = {
    "concurrency": int,  # requests in flight per base URL
    "timeout_s": float,
    "max_retries": int,
    "backoff_s": float,
}

# Scalar LLMResource fields settable as RAGSFT_<ROLE>_<NAME>; engine_kwargs is a JSON object.
ENGINE_ENV: dict[str, Any] = {
    **HTTP_ENV,
    "enable_thinking": env_bool,
    "thinking_max_tokens": int,
    "reasoning_model": env_bool,
    "reasoning_effort": str,
    "json_mode": str,
    "weights_id": str,
    "max_model_len": int,
    "tensor_parallel_size": int,
    "gpu_memory_utilization": float,
    "max_num_seqs": int,
    "dtype": str,
    "quantization": str,
    "engine_kwargs": str,
    "max_error_share": float,  # failing loudly: see llm.transport_errors
    "max_concurrency": int,  # the window's ceiling per base URL (capacity probing; HTTP chat roles)
    "dead_after_s": float,
}
LLM_ROLES = ("generator", "judge", "annotator", "base_model")  # annotator: RAGSFT_ANNOTATOR_*


def role_fields_from_env(role: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A model role's resource fields from ``RAGSFT_<ROLE>_*``: BACKEND, MODEL, BASE_URLS (comma
    separated), API_KEY_ENV and each of ``settings`` (cast to its type).

    Raises:
        ValueError: a setting that does not cast, naming the variable.
        RuntimeError: the role would run vLLM in process where vLLM is not installed (a cluster image):
            it would only fail at its first batch, hours into a run, so say so when the code
            location loads.
    """
    prefix = f"RAGSFT_{role.upper()}_"
    fields: dict[str, Any] = {"role": role}
    for name in ("backend", "model", "api_key_env"):
        if os.environ.get(prefix + name.upper()):
            fields[name] = os.environ[prefix + name.upper()]
    if os.environ.get(prefix + "BASE_URLS"):
        urls = [u for u in os.environ[prefix + "BASE_URLS"].split(",") if u]
        fields["base_urls"] = [mask_url(u) for u in urls]
        if fields["base_urls"] != urls:
            # Credentials in a URL: Dagster stores a resource's config with every run, so the config
            # holds the URLs masked and the resource reads them from the variable when it calls.
            fields["base_urls_env"] = prefix + "BASE_URLS"
    for name, cast in settings.items():
        raw = os.environ.get(prefix + name.upper())
        if raw:
            try:
                value = cast(raw)
            except ValueError:
                raise ValueError(f"{prefix}{name.upper()}={raw!r} is not a valid {cast.__name__}") from None
            if value is not None or name == "enable_thinking":
                fields[name] = value
    if fields.get("backend", "embedded") in ("embedded", "vllm") and importlib.util.find_spec("vllm") is None:
        raise RuntimeError(
            f"the {role!r} role would run vLLM in process, but vLLM is not installed here (no `embedded`"
            f" or `gpu` extra). Point it at a server: set {prefix}BACKEND=openai, {prefix}BASE_URLS=..."
            f" and {prefix}MODEL=... (see deploy/helm/values.yaml)."
        )
    return fields


def llm_for_role(role: str) -> LLMResource:
    """The LLM resource of one role, from ``RAGSFT_<ROLE>_*`` variables when set, else embedded."""
    # engine settings too: RAGSFT_<ROLE>_TENSOR_PARALLEL_SIZE, ...
    return LLMResource(**role_fields_from_env(role, ENGINE_ENV))


# EmbeddingResource fields settable as RAGSFT_EMBEDDER_<NAME> (besides BACKEND, MODEL, BASE_URLS, API_KEY_ENV).
EMBEDDER_ENV: dict[str, Any] = {
    **HTTP_ENV,
    "weights_id": str,
    "max_tokens": int,
    "batch_size": int,
    "per_request": int,
    "dtype": str,
    "engine_kwargs": str,
}


def embedder_from_env(role: str = "embedder") -> EmbeddingResource:
    """The ``embedder`` role, from ``RAGSFT_EMBEDDER_*`` variables when set, else the embedded model."""
    return EmbeddingResource(**role_fields_from_env(role, EMBEDDER_ENV))


def default_resources() -> dict[str, Any]:
    """Resources used by ``dagster dev`` and the CLI; tests pass their own."""
    resources: dict[str, Any] = {
        "store": ArtifactStore(),
        "snapshots": SnapshotSource(),
        "catalog": CatalogResource(),
    }
    resources.update({role: llm_for_role(role) for role in LLM_ROLES})
    resources["embedder"] = embedder_from_env()
    return resources


def roles_from_env() -> list[Any]:
    """Every model role as the environment configures it (the LLM roles, then the embedder)."""
    return [llm_for_role(role) for role in LLM_ROLES] + [embedder_from_env()]


# An engine starting on a GPU takes its share of the roles this environment runs there.
gpu_share.set_roles_provider(roles_from_env)
# ... and of them, the roles the current run's selection uses (a chat-only run: the chat engine only).
gpu_share.set_selection_provider(run_roles)
