"""Inputs declared once: the deps Dagster sees are also the only tables an asset may read.

An asset lists its inputs in one place (``reads=``: its ``deps``); :func:`declared_inputs` gives its
body a reader built from the deps Dagster holds for ``context.asset_key``, so a table read without
its dep fails at once, saying which dep to add, instead of silently breaking lineage and
staleness in the UI. The asset's own name comes from ``context.asset_key`` too: its own files
(read back by its checks) and its ledger are always readable.

Used by the judged multihop stages (``defs/multihop/judged.py``), the filtered configurations
(``defs/multihop/filters.py``, ``config_asset``), the corpus, long-context and Recall Rewrite
families; the others read through the store, kept honest by ``test_lineage_reads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa

from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.table_reader import TableReader as TableReader

LEDGER = "_ledger"  # bookkeeping every stage writes and may read, not an input


class UndeclaredRead(KeyError):
    """An asset read a table that is not one of its declared inputs."""


def reads(*names: str | dg.AssetKey) -> list[dg.AssetKey]:
    """The ``deps`` of an asset from the names of the tables it reads (one declaration)."""
    return [n if isinstance(n, dg.AssetKey) else dg.AssetKey(n) for n in names]


@dataclass(frozen=True, slots=True)
class DeclaredInputs:
    """The store, restricted to an asset's declared inputs, its own files and the ledger.

    Same ``read`` / ``files`` as :class:`ArtifactStore`, so plain helpers that take a store take it.
    """

    store: ArtifactStore
    asset: str
    inputs: frozenset[str]

    def _allowed(self, name: str) -> None:
        if name not in self.inputs and name not in (self.asset, LEDGER):
            raise UndeclaredRead(
                f"{self.asset} reads {name!r}, which is not one of its declared inputs "
                f"{sorted(self.inputs)}: add {name!r} to its deps (reads=) so that lineage and "
                "staleness in the UI follow what it reads"
            )

    def read(self, partition: str, asset: str, part: str | None = None) -> pa.Table:
        self._allowed(asset)
        return self.store.read(partition, asset, part)

    def files(self, partition: str, asset: str) -> list[Path]:
        self._allowed(asset)
        return self.store.files(partition, asset)


StoreNames = Callable[[str], Iterable[str]]  # an asset's name -> the store tables it writes


def own_name(name: str) -> tuple[str, ...]:
    """Most assets write one store table named as the asset (``qa/rag_prompts`` -> ``rag_prompts``)."""
    return (name,)


def input_names(keys: Iterable[dg.AssetKey], store_names: StoreNames = own_name) -> frozenset[str]:
    """Store names of asset keys, from the key's last part."""
    return frozenset(n for k in keys for n in store_names(k.path[-1]))


def declared_inputs(
    context: dg.AssetExecutionContext, store: ArtifactStore, store_names: StoreNames = own_name
) -> DeclaredInputs:
    """The reader of the running asset: its deps as Dagster holds them, its name from its key.
    ``store_names``: the tables an asset writes, where a family names them otherwise (the
    long-context family's ``lc_`` tables and their lineage)."""
    key = context.asset_key
    deps: Sequence[dg.AssetKey] = list(context.assets_def.asset_deps.get(key, ()))
    return DeclaredInputs(store, next(iter(store_names(key.path[-1]))), input_names(deps, store_names))
