"""The shared recipe mechanism: registration, typed overrides, what the manifest and card record."""

from __future__ import annotations

import dataclasses

import pytest

from ragsft_assets import recipes


@dataclasses.dataclass(frozen=True)
class _Demo:
    name: str
    share: float = 0.22
    flag: bool = False
    budget: int | None = None
    splits: tuple[str, ...] = ("train",)


def setup_module() -> None:
    recipes.register(
        "test_family", {"demo_a": _Demo(name="demo_a"), "demo_b": _Demo(name="demo_b", flag=True)}
    )


def test_resolve_as_the_card() -> None:
    rec = recipes.record(recipes.resolve("demo_a"))
    assert rec["changed"] == {}
    assert rec["values"]["share"] == 0.22
    assert recipes.card_sentence(rec) == "Recipe `demo_a`: as the card."
    assert recipes.names("test_family") == ["demo_a", "demo_b"]


def test_overrides_are_typed_and_recorded() -> None:
    resolved = recipes.resolve("demo_b", {"share": 1, "budget": 8192, "splits": ["train", "test"]})
    assert resolved.share == 1.0 and isinstance(resolved.share, float)
    assert resolved.splits == ("train", "test")
    rec = recipes.record(resolved)
    assert rec["changed"] == {
        "share": {"card": 0.22, "run": 1.0},
        "budget": {"card": None, "run": 8192},
        "splits": {"card": ["train"], "run": ["train", "test"]},
    }
    assert "differing from the card in" in recipes.card_sentence(rec)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"shares": 0.3}, "unknown recipe field"),
        ({"flag": "yes"}, "expected"),
        ({"share": True}, "expected"),
        ({"name": "demo_a"}, "identity"),
    ],
)
def test_bad_overrides_are_clear_errors(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        recipes.resolve("demo_a", overrides)


def test_unknown_recipe_lists_names() -> None:
    with pytest.raises(KeyError, match="demo_a"):
        recipes.get("nope")


def test_register_refuses_mutable_or_clashing() -> None:
    @dataclasses.dataclass
    class Mutable:
        name: str

    with pytest.raises(ValueError, match="frozen"):
        recipes.register("x", {"m": Mutable(name="m")})
    with pytest.raises(ValueError, match="already registered"):
        recipes.register("other_family", {"demo_a": _Demo(name="demo_a")})


def test_records_round_trip_beside_assets(tmp_path) -> None:
    rec = recipes.record(recipes.resolve("demo_a", {"flag": True}))
    recipes.write_record(tmp_path / "rag_sft", rec)
    recipes.write_record(tmp_path / "rag_prompts", recipes.record(recipes.resolve("demo_b")))
    got = recipes.read_records(tmp_path)
    assert list(got) == ["rag_prompts", "rag_sft"]
    assert got["rag_sft"]["changed"] == {"flag": {"card": False, "run": True}}
    assert recipes.read_records(tmp_path / "missing") == {}
