"""Ids and seeded draws.

Ids are derived from inputs, never from model text: 24 hex characters of SHA-256.
Every random draw comes from (seed, stage, item id), never from processing order,
so the same inputs give byte-identical outputs whatever the batching.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np

DEFAULT_SEED = 20260731
ID_LEN = 24


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def doc_id(title: str) -> str:
    """Document id: first 24 hex chars of SHA-256 of the title (UTF-8)."""
    return sha256_hex(title)[:ID_LEN]


def derived_id(*parts: object) -> str:
    """Id of a derived item (question, twin pair...) from the ids/values it is made of.

    Parts are joined with a unit separator so ("ab", "c") and ("a", "bc") differ.
    """
    return sha256_hex("\x1f".join(str(p) for p in parts))[:ID_LEN]


def question_id(a_id: str, b_id: str, draft_index: int) -> str:
    """Question id from its (source a, bridge b, draft index)."""
    return derived_id("question", a_id, b_id, draft_index)


def pair_id(question_id_: str) -> str:
    """Twin pair id from the question id."""
    return derived_id("pair", question_id_)


def _seed_int(seed: int, stage: str, item_id: str) -> int:
    return int(sha256_hex(f"{seed}\x1f{stage}\x1f{item_id}")[:16], 16)


def item_rng(seed: int, stage: str, item_id: str) -> random.Random:
    """A Python RNG for one item of one stage, independent of processing order."""
    return random.Random(_seed_int(seed, stage, item_id))


def item_np_rng(seed: int, stage: str, item_id: str) -> np.random.Generator:
    """A NumPy generator for one item of one stage, independent of processing order."""
    return np.random.default_rng(_seed_int(seed, stage, item_id))


def item_uniform(seed: int, stage: str, item_id: str) -> float:
    """One uniform draw in [0, 1) for (seed, stage, item) — for share-based assignments."""
    return _seed_int(seed, stage, item_id) / float(1 << 64)
