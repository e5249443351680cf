"""Stage code versions derived from what a stage reads, never bumped by hand (Dagster-free).

A stage's code version is a hash of its prompt templates (every task, in each of its languages)
and of the recipe fields it reads (their values, sorted by name). An edited template or recipe
value then marks exactly the stages that use it stale in the UI, and nothing else. Every family
declares its stages here (:func:`stage_version`, at decoration time), so one test recomputes every
version from other template texts (:func:`stage_versions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ragsft_assets.ids import sha256_hex
from ragsft_assets.prompts import load_prompt

TemplateText = Callable[[str, str], str]  # (task, lang) -> the template's text
RecipeFields = Callable[[], Mapping[str, Any] | None]  # the recipe values a stage reads, or None


def shipped_template(task: str, lang: str) -> str:
    """The text of the shipped template ``task.lang`` (English where the language has none)."""
    return load_prompt(task, lang).text


def template_folder(root: Path) -> TemplateText:
    """Template texts read from a folder of ``<task>.<lang>.txt`` (English where a language has none)."""

    def text(task: str, lang: str) -> str:
        for candidate in (lang, "en"):
            path = Path(root) / f"{task}.{candidate}.txt"
            if path.is_file():
                return path.read_text(encoding="utf-8")
        raise FileNotFoundError(f"no prompt template {task}.{lang}.txt (nor .en) in {root}")

    return text


def derived_version(
    tasks: Sequence[str],
    langs: Sequence[str],
    fields: Mapping[str, Any] | None = None,
    texts: TemplateText | None = None,
) -> str:
    """12 hex chars of the hash of the templates (task by task, each in ``langs``) and ``fields``
    (the recipe values the stage reads, as sorted-key JSON; None: the stage reads no recipe)."""
    read = texts or shipped_template
    parts = [read(t, lang) for t in tasks for lang in langs]
    if fields is not None:
        parts.append(orjson.dumps(dict(fields), option=orjson.OPT_SORT_KEYS).decode())
    return sha256_hex("\x1f".join(parts))[:12]


@dataclass(frozen=True, slots=True)
class StageSpec:
    """What a stage's version follows: its templates, their languages, its recipe fields."""

    tasks: tuple[str, ...]
    langs: tuple[str, ...]
    fields: RecipeFields | None = None  # called at each computation (a test may patch the recipe)

    def version(self, texts: TemplateText | None = None) -> str:
        return derived_version(self.tasks, self.langs, self.fields() if self.fields else None, texts)


# asset key (``long_context/raft``, ``claims``) -> what its version follows; filled as stages are
# declared, so a test can recompute every version from other template texts or recipe values
STAGES: dict[str, StageSpec] = {}


def stage_version(
    asset: str,
    tasks: Sequence[str] = (),
    langs: Sequence[str] = ("en",),
    fields: RecipeFields | None = None,
) -> str:
    """Declare ``asset``'s templates and recipe fields (:data:`STAGES`) and return its version."""
    spec = StageSpec(tuple(tasks), tuple(langs), fields)
    STAGES[asset] = spec
    return spec.version()


def stage_versions(texts: TemplateText | None = None) -> dict[str, str]:
    """Every declared stage's version, from ``texts`` (a patched template folder in a test)."""
    return {a: spec.version(texts) for a, spec in sorted(STAGES.items())}


def recipe_fields(recipe: object, names: Sequence[str]) -> dict[str, Any]:
    """The values of ``names`` in a recipe (a dataclass): what a stage reads of it."""
    return {n: getattr(recipe, n) for n in names}
