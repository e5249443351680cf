"""Recipes: each published configuration's card values as one typed, frozen object.

A family module (``rag_sft/recipes.py``, ``multihop/recipes.py``, ``long_context/recipes.py``,
``recall/recipes.py``) defines a frozen dataclass holding every value its cards fix, one instance
per published configuration, each value with a short comment naming the card sentence it comes
from, and registers them here with :func:`register`. A run config names a recipe and overrides
some of its fields (Dagster config: ``recipe: str | None = None`` -- the partition's product --
and ``overrides: dict[str, Any] = {}``); :func:`resolve` gives the resolved recipe and
:func:`record` what the manifest and the dataset card show: the values and the fields the user
changed. Dagster-free.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import orjson

R = TypeVar("R")

_REGISTRY: dict[str, Any] = {}
_FAMILY: dict[str, str] = {}

# ours: the cards do not state how many failed LLM calls a stage may absorb. A stage (every batch it
# sends, in every family) fails when more than this share of its requests ended in a transport error
# (HTTP 5xx or 4xx after retries, timeouts, refused connections); unreadable model output is counted
# apart. Small: a healthy fleet loses next to nothing after retries, and a rerun resumes from the
# cache. A role may set its own (``RAGSFT_<ROLE>_MAX_ERROR_SHARE``, ``LLMResource.max_error_share``).
MAX_TRANSPORT_ERROR_SHARE = 0.02


def register(family: str, recipes: Mapping[str, Any]) -> None:
    """Make ``recipes`` (name -> frozen dataclass instance) findable by name.

    Raises:
        ValueError: a name already registered by another family, or a recipe that is not a
            frozen dataclass.
    """
    for name, recipe in recipes.items():
        if not dataclasses.is_dataclass(recipe) or not type(recipe).__dataclass_params__.frozen:
            raise ValueError(f"recipe {name!r} must be a frozen dataclass instance")
        if name in _FAMILY and _FAMILY[name] != family:
            raise ValueError(f"recipe {name!r} is already registered by family {_FAMILY[name]!r}")
        _REGISTRY[name] = recipe
        _FAMILY[name] = family


def names(family: str | None = None) -> list[str]:
    """The registered recipe names (of one family when given), sorted."""
    return sorted(n for n, f in _FAMILY.items() if family is None or f == family)


def get(name: str) -> Any:
    """The card's recipe called ``name``.

    Raises:
        KeyError: with the known names, when ``name`` is not registered.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown recipe {name!r}; known recipes: {', '.join(names())}") from None


def _check_value(field: str, annotation: Any, value: Any) -> Any:
    """``value`` converted to the field's type (int -> float, list -> tuple), or a ValueError."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(annotation):
            if option is type(None):
                if value is None:
                    return None
                continue
            try:
                return _check_value(field, option, value)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(f"override {field}={value!r}: expected {annotation}")
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            args = typing.get_args(annotation)
            inner = args[0] if args else Any
            return tuple(v if inner is Any else _check_value(field, inner, v) for v in value)
    elif (
        origin in (dict, Mapping)
        or annotation is Any
        or isinstance(annotation, type)
        and isinstance(value, annotation)
    ):
        return value
    raise ValueError(f"override {field}={value!r}: expected {getattr(annotation, '__name__', annotation)}")


def apply_overrides(recipe: R, overrides: Mapping[str, Any]) -> R:
    """``recipe`` with the fields of ``overrides`` replaced, after checking names and types.

    Raises:
        ValueError: an unknown field (the message lists the recipe's fields), a type that does not
            fit, or an attempt to change ``name``.
    """
    if not overrides:
        return recipe
    hints = typing.get_type_hints(type(recipe))
    fields = {f.name for f in dataclasses.fields(recipe)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(
            f"unknown recipe field(s) {unknown} for {type(recipe).__name__}; fields: {', '.join(sorted(fields))}"
        )
    if "name" in overrides:
        raise ValueError(
            "'name' is the recipe's identity: choose another recipe with `recipe`, not an override"
        )
    changes = {k: _check_value(k, hints[k], v) for k, v in overrides.items()}
    return dataclasses.replace(recipe, **changes)  # type: ignore[type-var]


def resolve(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """The registered recipe ``name`` with ``overrides`` applied (see :func:`apply_overrides`)."""
    return apply_overrides(get(name), overrides or {})


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def changed_fields(card: Any, resolved: Any) -> dict[str, dict[str, Any]]:
    """``{field: {"card": value, "run": value}}`` for every field where ``resolved`` differs."""
    out: dict[str, dict[str, Any]] = {}
    for field in dataclasses.fields(card):
        a, b = getattr(card, field.name), getattr(resolved, field.name)
        if a != b:
            out[field.name] = {"card": _jsonable(a), "run": _jsonable(b)}
    return out


def record(resolved: Any) -> dict[str, Any]:
    """What a manifest records of a resolved recipe: its name, every value, and the changed fields.

    The card's values are looked up by the recipe's ``name`` field in the registry.
    """
    name = resolved.name
    card = get(name)
    return {
        "recipe": name,
        "values": {f.name: _jsonable(getattr(resolved, f.name)) for f in dataclasses.fields(resolved)},
        "changed": changed_fields(card, resolved),
    }


def card_sentence(rec: Mapping[str, Any]) -> str:
    """One line for a dataset card: "as the card" or the fields that differ from it."""
    changed = rec.get("changed") or {}
    if not changed:
        return f"Recipe `{rec['recipe']}`: as the card."
    parts = [f"`{k}` {v['run']!r} (card: {v['card']!r})" for k, v in sorted(changed.items())]
    return f"Recipe `{rec['recipe']}`, differing from the card in: " + "; ".join(parts) + "."


RECORD_FILE = "_recipe.json"  # beside an asset's Parquet files: assets/<key>/<asset>/_recipe.json


def write_record(asset_folder: Path, rec: Mapping[str, Any]) -> Path:
    """Write a recipe record (:func:`record`) beside an asset's files, atomically, sorted keys."""
    from ragsft_assets.storage import atomic_write_bytes

    return atomic_write_bytes(
        Path(asset_folder) / RECORD_FILE,
        orjson.dumps(dict(rec), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2),
    )


def read_records(partition_folder: Path) -> dict[str, dict[str, Any]]:
    """``{asset: record}`` for every asset of a partition folder that wrote a recipe record."""
    folder = Path(partition_folder)
    if not folder.is_dir():
        return {}
    return {p.parent.name: orjson.loads(p.read_bytes()) for p in sorted(folder.glob(f"*/{RECORD_FILE}"))}
