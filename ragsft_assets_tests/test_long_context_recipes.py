"""The long-context family's recipes against the Synth-Long-SFT32K card, and the card's points the
recipes carry: licenses per config, the trained model's tokenizer, which configs a source builds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragsft_assets import recipes
from ragsft_assets.long_context import recipes as lc

CARD_CONFIGS = (
    "synthetic_convqa_raft",
    "synthetic_convqa_raft_syntactic",
    "narrativeqa_clustered",
    "rag_tge_raft",
    "rag_tge_raft_zh",
)


def test_one_recipe_per_card_config_with_the_cards_numbers() -> None:
    assert set(CARD_CONFIGS) <= set(recipes.names("long_context"))
    for name in CARD_CONFIGS:
        r = recipes.get(name)
        assert r.name == name and lc.config_name(f"{r.source}.en", r) == name
        assert r.budget_tokens == 32_768  # the card: "The maximal sequence length of the examples is 32,768."
        # ours: as many distractors as fit; derived: "We shuffle the true passage into a random
        # position in the context", every example keeps it
        assert r.k is None and r.p_oracle == 1.0
        assert r.tokenizer_dir == "HuggingFaceTB/SmolLM2-135M-Instruct"  # ours: the SmolLM2 tokenizer
    # the card: "We also translated the RAFT-augmented RAG-TGE dataset to Chinese."
    assert recipes.get("rag_tge_raft_zh").translate_language == "zh"
    variants = {n: recipes.get(n).variant for n in CARD_CONFIGS}
    assert variants == {
        "synthetic_convqa_raft": "raft",
        "synthetic_convqa_raft_syntactic": "raft_syntactic",
        "narrativeqa_clustered": "clustered",
        "rag_tge_raft": "raft",
        "rag_tge_raft_zh": "raft_translated",
    }


def test_licenses_per_config() -> None:
    assert recipes.get("narrativeqa_clustered").license == "apache-2.0"  # not cc-by-sa-4.0
    zh = recipes.get("rag_tge_raft_zh")
    assert zh.license == "llama3.1" and "Llama 3.1 Community License" in zh.license_notice
    assert "non-commercial" in zh.license_notice
    assert recipes.get("long_context_raft").license_notice == lc.SOURCE_LICENSE_NOTICE


@pytest.mark.parametrize(
    "partition,variant,expected",
    [
        ("narrativeqa.en", "clustered", "narrativeqa_clustered"),
        ("narrativeqa.en", "raft", None),  # the card builds narrativeqa_clustered only
        ("synthetic_convqa.en", "raft_syntactic", "synthetic_convqa_raft_syntactic"),
        ("rag_tge.en", "raft_translated", "rag_tge_raft_zh"),
        ("rag_tge.en", "clustered", None),
        ("hotpotqa.en", "raft", "long_context_raft"),  # any other source: the family recipes
        ("hotpotqa.en", "raft_translated", None),
    ],
)
def test_product_recipe(partition: str, variant: str, expected: str | None) -> None:
    assert lc.product_recipe(partition, variant) == expected


def test_a_run_names_a_recipe_and_overrides_fields() -> None:
    r = lc.resolve("narrativeqa.en", "raft", "long_context_raft", {"budget_tokens": 8192})
    assert r.budget_tokens == 8192 and lc.config_name("narrativeqa.en", r) == "narrativeqa_raft"
    assert recipes.record(r)["changed"] == {"budget_tokens": {"card": 32768, "run": 8192}}
    assert lc.resolve("narrativeqa.en", "raft", None, {"budget_tokens": 8192}) is None  # not built
    with pytest.raises(ValueError, match="builds variant 'clustered', not 'raft'"):
        lc.resolve("narrativeqa.en", "raft", "narrativeqa_clustered")
    with pytest.raises(ValueError, match="unknown recipe field"):
        lc.resolve("hotpotqa.en", "raft", None, {"budget": 1})


def _embedded_folder() -> Path:
    from ragsft_assets.llm.models import embedded_gguf_path, ensure_embedded_model

    try:
        embedded_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return ensure_embedded_model()


def test_tokenizer_from_a_folder_or_a_name_in_the_hub_cache(tmp_path: Path, monkeypatch) -> None:
    """The budget counts with the trained model's tokenizer: a local folder, or a hub name that
    resolves offline from the Hugging Face cache; the default names SmolLM2."""
    from ragsft_assets.long_context.raft import ChatTokenCounter, resolve_tokenizer

    src = _embedded_folder()
    messages = [{"role": "user", "content": "How long is this?"}, {"role": "assistant", "content": "Short."}]
    default = ChatTokenCounter(lc.SMOLLM2_TOKENIZER)
    assert default.count(messages) > 0
    # a local folder whose chat template differs: another count
    local = tmp_path / "my-model"
    local.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, local / name)
    (local / "chat_template.jinja").write_text(
        "{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }} <<end>> <<end>>\n{% endfor %}"
    )
    assert ChatTokenCounter(str(local)).count(messages) != default.count(messages)
    # a hub name found offline in the Hugging Face cache (as transformers resolves it)
    hub = tmp_path / "hf"
    snap = hub / "models--acme--tiny-chat" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for f in local.iterdir():
        shutil.copy(f, snap / f.name)
    (hub / "models--acme--tiny-chat" / "refs").mkdir()
    (hub / "models--acme--tiny-chat" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(hub))
    assert resolve_tokenizer("acme/tiny-chat") == snap
    assert ChatTokenCounter("acme/tiny-chat").count(messages) == ChatTokenCounter(str(local)).count(messages)
    with pytest.raises(ValueError, match="neither a local folder nor in the Hugging Face cache"):
        resolve_tokenizer("acme/not-there")
