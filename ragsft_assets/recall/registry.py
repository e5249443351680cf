"""The base-model registry: partition key -> model, in ``$RAGSFT_HOME/base_models.json``.

Keys without an entry fall back to the ``RAGSFT_BASE_MODEL_*`` variables.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.home import ragsft_home
from ragsft_assets.masking import mask_url

REGISTRY_FILE = "base_models.json"
PARTITIONS_NAME = "base_model"
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
BACKENDS = ("vllm", "openai")


@dataclass(frozen=True)
class BaseModelEntry:
    """One registered base model."""

    model: str
    backend: str = "vllm"
    base_urls: list[str] = field(default_factory=list)


def default_backend() -> tuple[str, list[str]]:
    """The backend and base URLs of an entry registered without them: the ``base_model`` role's
    (``RAGSFT_BASE_MODEL_BACKEND``/``_BASE_URLS``: on a cluster, the fleet's completion server, which
    also serves each model under its HF id), else ``vllm`` in process."""
    backend = os.environ.get("RAGSFT_BASE_MODEL_BACKEND") or "vllm"
    urls = [u for u in os.environ.get("RAGSFT_BASE_MODEL_BASE_URLS", "").split(",") if u]
    return backend, urls if backend == "openai" else []


def registry_path(home: Path | None = None) -> Path:
    return (home or ragsft_home()) / REGISTRY_FILE


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a secret (user:password, an API key in its query, a hook path)."""
    return mask_url(url) != url


def check_key(key: str) -> str:
    """Raises ValueError unless ``key`` is a valid partition key such as ``qwen3-4b-base``."""
    if not KEY_RE.fullmatch(key):  # not match: its "$" lets a final newline through
        raise ValueError(
            f"base-model key {key!r}: use lowercase letters, digits, '.', '_' or '-' (64 at most)"
        )
    return key


def load(home: Path | None = None) -> dict[str, BaseModelEntry]:
    """Every registered key; an empty registry when the file does not exist.

    Raises:
        ValueError: naming the file, when it is not the registry's JSON.
    """
    path = registry_path(home)
    if not path.exists():
        return {}
    try:
        raw = orjson.loads(path.read_bytes())
        return {check_key(k): BaseModelEntry(**v) for k, v in sorted(raw.items())}
    except (orjson.JSONDecodeError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"{path}: not a base-model registry ({exc})") from None


def add(key: str, entry: BaseModelEntry, home: Path | None = None) -> bool:
    """Register (or replace) ``key``; True when it was new."""
    check_key(key)
    if entry.backend not in BACKENDS:
        raise ValueError(f"backend {entry.backend!r}: expected one of {', '.join(BACKENDS)}")
    if not entry.model.strip():
        raise ValueError("--model must name a model (an HF id or a local path)")
    secret = [mask_url(u) for u in entry.base_urls if has_credentials(u)]
    if secret:
        # The registry is a plain file in the home: it never holds a secret.
        raise ValueError(
            f"base URL {secret[0]} carries credentials, which the registry (a plain file) never "
            "stores: put the URLs in RAGSFT_BASE_MODEL_BASE_URLS and register without --base-urls"
        )
    if entry.backend == "openai" and not entry.base_urls and not default_backend()[1]:
        raise ValueError("backend openai needs --base-urls (or RAGSFT_BASE_MODEL_BASE_URLS)")
    entries = load(home)
    new = key not in entries
    entries[key] = entry
    path = registry_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(
        orjson.dumps({k: asdict(v) for k, v in sorted(entries.items())}, option=orjson.OPT_INDENT_2)
    )
    tmp.replace(path)  # atomic: a reader never sees half a file
    return new


def resolve(key: str, home: Path | None = None) -> BaseModelEntry | None:
    """The entry of ``key``, or None: the caller then uses the ``RAGSFT_BASE_MODEL_*`` defaults."""
    return load(home).get(key)


def resource_for_key(default: Any, key: str, home: Path | None = None) -> Any:
    """The ``base_model`` role's resource for partition ``key``.

    A registered key overrides the default resource's model, backend and base URLs (engine settings,
    budget and cache stay as configured); an unregistered key returns ``default`` itself, so the
    ``RAGSFT_BASE_MODEL_*`` variables remain the default.
    """
    entry = resolve(key, home)
    if entry is None:
        return default
    fields = {name: getattr(default, name) for name in type(default).model_fields}
    fields.update(model=entry.model, backend=entry.backend)
    if entry.base_urls:  # none registered: the role's own (RAGSFT_BASE_MODEL_BASE_URLS, maybe secret)
        fields.update(base_urls=list(entry.base_urls))
    return type(default)(**fields)
