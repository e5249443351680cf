"""Versioned prompt templates: one text file per task and language (``<task>.<lang>.txt``).

A template's version is the first 12 hex chars of the SHA-256 of its bytes: it
goes into every LLM cache key and into provenance, so an edited prompt is a new
prompt and the assets that use it show as stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from ragsft_assets.ids import sha256_hex


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    task: str
    lang: str
    text: str

    @property
    def version(self) -> str:
        return sha256_hex(self.text)[:12]

    @property
    def name(self) -> str:
        return f"{self.task}.{self.lang}"

    def render(self, **values: object) -> str:
        """Fill ``{name}`` slots (str.format rules: literal braces are doubled)."""
        return self.text.format(**values)


@cache
def load_prompt(task: str, lang: str) -> PromptTemplate:
    """Load ``<task>.<lang>.txt``, falling back to English when the language has none."""
    root = resources.files(__package__)
    for candidate in (lang, "en"):
        f = root / f"{task}.{candidate}.txt"
        if f.is_file():
            return PromptTemplate(task, candidate, f.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"no prompt template {task}.{lang}.txt (nor .en) in {root}")


def all_prompts() -> list[PromptTemplate]:
    """Every template shipped, sorted by name (for provenance)."""
    root = resources.files(__package__)
    out = []
    for f in sorted(root.iterdir(), key=lambda p: p.name):
        if f.name.endswith(".txt"):
            task, lang, _ = f.name.rsplit(".", 2)
            out.append(PromptTemplate(task, lang, f.read_text(encoding="utf-8")))
    return out
