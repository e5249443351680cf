"""A config name appears in at most 3 files of ``ragsft_assets/`` (issue 38, "a config in one place").

Code names a config through its entry (``published_configs.by_name``, ``by_asset``, an entry's
field, or a recipe constant derived from them); comments and docstrings say its role ("the
annotator's config", "the citation config") or point to ``published_configs.py``. The names checked:
every entry of ``published_configs.py``, the rag_sft recipes (each named after a config of the
Luciole RAG card) and the long-context recipes named after a config of the Synth-Long-SFT32K card. A
name counts where it stands as a word, as ``grep -rlw NAME ragsft_assets`` counts it
(``multihop_filtered_qwen`` does not count as ``filtered_qwen``).

Left out on purpose: ``default``, ``filtered`` and ``corpus``, ordinary words the code and its prose
use in other senses (a default value, filtered rows, a corpus of abstracts); and ``trust_align``,
which is also the Trust-Align source's name (partition keys ``trust_align.<lang>``, the source
reader ``sources/trust_align.py``, the source presets).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ragsft_assets
from ragsft_assets import published_configs as pc
from ragsft_assets.long_context import recipes as lc_recipes
from ragsft_assets.rag_sft import recipes as rs_recipes

PACKAGE = Path(ragsft_assets.__file__).parent
MAX_FILES = 3
ORDINARY_WORDS = frozenset({"default", "filtered", "corpus"})
ALSO_A_SOURCE = frozenset({"trust_align"})


def files_naming(names: list[str], root: Path) -> dict[str, list[str]]:
    """``{name: files under root holding it as a word}`` (letters, digits and ``_`` make a word, as
    for ``grep -w``); compiled caches and files that are not UTF-8 text are not read."""
    texts = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            texts[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    out = {}
    for name in names:
        word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")
        out[name] = [rel for rel, text in texts.items() if word.search(text)]
    return out


def all_config_names() -> set[str]:
    """Every config name the registries hold: the published configs, the rag_sft recipes' and the
    long-context card's configs (a recipe with a source is named ``<source>_<suffix>``, its config)."""
    card_configs = [r for r in lc_recipes.RECIPES.values() if r.source]
    assert all(r.name == f"{r.source}_{r.suffix}" for r in card_configs), "a long-context card recipe"
    return {c.name for c in pc.configs()} | set(rs_recipes.RECIPES) | {r.name for r in card_configs}


def test_every_config_name_is_in_at_most_three_files() -> None:
    names = sorted(all_config_names() - ORDINARY_WORDS - ALSO_A_SOURCE)
    found = files_naming(names, PACKAGE)
    # a name found nowhere means the scan reads nothing (each is spelled at least once, in its entry)
    assert all(found[n] for n in names), {n: f for n, f in found.items() if not f}
    over = {n: f for n, f in found.items() if len(f) > MAX_FILES}
    assert not over, (
        f"config names in more than {MAX_FILES} files of ragsft_assets/: {over}; derive the name from "
        "published_configs (by_name, by_asset, an entry's field) and say the config's role in comments"
    )


def test_the_left_out_names_are_config_names() -> None:
    """A left-out name that is no longer a config would hide nothing and should go from the list."""
    assert all_config_names() >= ORDINARY_WORDS | ALSO_A_SOURCE


def test_a_name_counts_as_a_word(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('NAME = "filtered_qwen"\n', encoding="utf-8")
    (tmp_path / "b.md").write_text("`filtered_qwen`: the annotator's config.\n", encoding="utf-8")
    (tmp_path / "c.py").write_text('ASSET = "multihop_filtered_qwen_v2"\n', encoding="utf-8")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.pyc").write_text("filtered_qwen", encoding="utf-8")
    (tmp_path / "d.bin").write_bytes(b"\xff\xfe filtered_qwen")
    assert files_naming(["filtered_qwen", "filtered_qwen_v2"], tmp_path) == {
        "filtered_qwen": ["a.py", "b.md"],
        "filtered_qwen_v2": [],
    }


def test_by_asset_names_the_config_that_ships_an_asset() -> None:
    """Code names a config by its role (the asset it ships), so its name stays in its entry."""
    for c in pc.configs():
        assert pc.by_asset(c.asset) == c
    assert rs_recipes.HOTPOTQA_CITE == pc.by_asset("rag_sft").name == pc.of_family("rag_sft")[0].name
    with pytest.raises(KeyError, match="no published config ships asset 'nowhere'"):
        pc.by_asset("nowhere")
