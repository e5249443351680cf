"""OASST1 input: the first turn of each English conversation tree and its best assistant reply.

A tree gives a row when its root prompt has a reply with ``rank == 0`` that is neither synthetic
nor deleted; other trees are skipped with a counted reason. Ids are ``oasst1-NNNN``, the 0-based
position of the kept pair in the source's own order, so the same export gives the same ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragsft_assets.ids import derived_id
from ragsft_assets.json_lines import parse_json_lines

HUB_DATASET = "OpenAssistant/oasst1"
SKIP_NO_RANKS = "no_ranked_reply"
SKIP_ONLY_SYNTHETIC = "only_synthetic_or_deleted_top_reply"
SKIP_NO_REPLY = "no_assistant_reply"
SKIP_NOT_ENGLISH = "not_english"
SKIP_BAD_PROMPT = "prompt_deleted_or_empty"


@dataclass(frozen=True)
class OasstPair:
    """One kept (prompt, reply) pair."""

    id: str
    source_id: str
    message_tree_id: str
    prompt_message_id: str
    reply_message_id: str
    prompt: str
    response: str


@dataclass(frozen=True, slots=True)
class SkippedTree:
    """A tree read and left out, for its ledger row."""

    tree_id: str  # message_tree_id (the prompt's message id where the export has none)
    reason: str


@dataclass
class ReadResult:
    """Kept pairs and the counted reasons of every skipped tree."""

    pairs: list[OasstPair] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    trees: int = 0
    skipped_trees: list[SkippedTree] = field(default_factory=list)

    def skip(self, tree: Mapping[str, Any], reason: str) -> None:
        """Count a skipped tree and keep its id, for the ledger."""
        root = tree.get("prompt") or {}
        self.skipped[reason] += 1
        self.skipped_trees.append(
            SkippedTree(str(tree.get("message_tree_id") or root.get("message_id")), reason)
        )


def best_reply(replies: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, str]:
    """The rank-0 assistant reply that is neither synthetic nor deleted, or ``(None, reason)``."""
    assistant = [r for r in replies if r.get("role") == "assistant"]
    if not assistant:
        return None, SKIP_NO_REPLY
    ranked = [r for r in assistant if r.get("rank") is not None]
    if not ranked:
        return None, SKIP_NO_RANKS
    for r in ranked:
        if (
            r["rank"] == 0
            and not r.get("synthetic")
            and not r.get("deleted")
            and (r.get("text") or "").strip()
        ):
            return r, ""
    return None, SKIP_ONLY_SYNTHETIC


def pairs_from_trees(trees: Iterable[Mapping[str, Any]], lang: str = "en") -> ReadResult:
    """Pairs from message trees (the OASST1 ``*.trees.jsonl`` export), in the source's order."""
    out = ReadResult()
    for tree in trees:
        out.trees += 1
        root = tree.get("prompt") or {}
        if root.get("lang") != lang:
            out.skip(tree, SKIP_NOT_ENGLISH)
            continue
        if root.get("deleted") or not (root.get("text") or "").strip():
            out.skip(tree, SKIP_BAD_PROMPT)
            continue
        reply, reason = best_reply(root.get("replies") or [])
        if reply is None:
            out.skip(tree, reason)
            continue
        prompt, response = root["text"], reply["text"]
        out.pairs.append(
            OasstPair(
                id=f"oasst1-{len(out.pairs):04d}",
                source_id=derived_id("oasst1", prompt, response),
                message_tree_id=str(tree.get("message_tree_id") or root.get("message_id")),
                prompt_message_id=str(root.get("message_id")),
                reply_message_id=str(reply.get("message_id")),
                prompt=prompt,
                response=response,
            )
        )
    return out


def trees_from_message_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Message trees from flat message rows (the hub's ``OpenAssistant/oasst1`` splits).

    Roots keep the order in which they first appear; replies keep theirs. Only the first turn is
    needed, so replies are attached one level deep.
    """
    roots: dict[str, dict[str, Any]] = {}
    children: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        msg = dict(row)
        if msg.get("parent_id") is None:
            roots[msg["message_id"]] = msg
        else:
            children.setdefault(msg["parent_id"], []).append(msg)
    trees = []
    for mid, root in roots.items():
        root = {**root, "replies": children.get(mid, [])}
        trees.append({"message_tree_id": root.get("message_tree_id", mid), "prompt": root})
    return trees


def read_tree_export(path: Path, lang: str = "en") -> ReadResult:
    """Pairs from a local JSON-lines export of message trees.

    Raises:
        ValueError: naming the file and line, on a line that is not a JSON object.
    """
    trees = []
    with path.open("rb") as fh:
        for n, tree in parse_json_lines(fh, path):
            if not isinstance(tree, dict):
                raise ValueError(f"{path}:{n}: expected a message tree object")
            trees.append(tree)
    return pairs_from_trees(trees, lang=lang)


def read_hub(split: str = "train", lang: str = "en", revision: str | None = None) -> ReadResult:
    """Pairs from the hub's ``OpenAssistant/oasst1`` message rows through ``datasets``."""
    import datasets  # heavy; only when reading from the hub

    ds = datasets.load_dataset(HUB_DATASET, split=split, revision=revision)
    return pairs_from_trees(trees_from_message_rows(ds), lang=lang)
