"""``ragsft base-models add|list``: the ``base_model`` dynamic partitions and their models.

A key (``qwen3-4b-base``) is written to ``$RAGSFT_HOME/base_models.json`` with its model and
backend, and registered in the Dagster instance; the ``base_model`` role resolves its model from the
partition key, and keys without an entry use the ``RAGSFT_BASE_MODEL_*`` variables.
"""

from __future__ import annotations

import click

from ragsft_assets.masking import mask_url
from ragsft_assets.recall import registry


def register_partition(key: str) -> bool:
    """Add ``key`` to the ``base_model`` dynamic partitions; False when it was already there."""
    from ragsft_assets.cli.snapshots import _instance  # dagster imported lazily: fast --help

    instance = _instance()
    if instance.has_dynamic_partition(registry.PARTITIONS_NAME, key):
        return False
    instance.add_dynamic_partitions(registry.PARTITIONS_NAME, [key])
    return True


@click.group("base-models")
def base_models() -> None:
    """Base models of the Recall Rewrite family (one partition each)."""


@base_models.command("add")
@click.argument("key")
@click.option("--model", "model", required=True, help="HF id or local path, e.g. Qwen/Qwen3-4B-Base")
@click.option(
    "--backend",
    type=click.Choice(registry.BACKENDS),
    default=None,
    help="default: RAGSFT_BASE_MODEL_BACKEND (and its BASE_URLS: a cluster's fleet), else vllm",
)
@click.option(
    "--base-urls", default="", help="comma-separated OpenAI-compatible server URLs (backend openai)"
)
def add(key: str, model: str, backend: str | None, base_urls: str) -> None:
    """Register base model KEY and add it as a partition."""
    urls = [u.strip() for u in base_urls.split(",") if u.strip()]
    if backend is None:
        backend, default_urls = registry.default_backend()
        if not urls and not any(registry.has_credentials(u) for u in default_urls):
            urls = default_urls
        # else: the role's URLs hold a secret; the entry keeps none and they are read at run time
    try:
        new = registry.add(key, registry.BaseModelEntry(model=model, backend=backend, base_urls=urls))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    added = register_partition(key)
    click.echo(
        f"base model {key}: {model} ({backend}) {'added' if new else 'updated'} in {registry.registry_path()}"
    )
    click.echo(f"partition {key} {'added to' if added else 'already in'} the instance")


@base_models.command("list")
def list_() -> None:
    """Registered base models."""
    try:
        entries = registry.load()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for key, e in entries.items():
        urls = ",".join(mask_url(u) for u in e.base_urls)
        if not urls and e.backend == "openai":
            urls = "(RAGSFT_BASE_MODEL_BASE_URLS)"
        click.echo(f"{key}\t{e.model}\t{e.backend}\t{urls}")
