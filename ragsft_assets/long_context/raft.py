"""RAFT augmentation (variant 1 of the long-context family): distractors by embedding, in a token budget.

Each QA example ``(oracle passage(s), question, answer)`` becomes one chat example:

- ``system``: the instruction (prompt ``long_context_raft``) and the documents, each
  ``Document N:\\n<text>``; then a conversational source's earlier turns (``history``), as they
  were; ``user``: the question; ``assistant``: the answer;
- the distractors are the passages nearest to the oracle passage by embedding
  (``long_context.neighbours``: the passage itself, its duplicates and the example's other
  passages excluded), taken in rank order while the whole conversation, rendered with the chat
  template of the model to be trained and counted with ``tokenizers``, stays within the budget
  (default 32,768), and at most ``k`` of them when ``k`` is set. A passage is never cut: the first
  that does not fit ends the list (so the distractors are always the top ones).
- RAFT's P: an example keeps its oracle with probability ``p_oracle`` (default 1.0), drawn from
  (seed, stage, example id); without it the context is distractors only.
- the documents are put in a random order (one seeded permutation per example), so the oracle's
  position carries no signal; ``oracle_positions`` says where it went.

An example whose oracle alone does not fit the budget is rejected (``oracle_over_budget``), never
cut. Everything is a function of the inputs and the seed: byte-identical on rerun.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ragsft_assets.ids import DEFAULT_SEED, derived_id, item_np_rng, item_uniform
from ragsft_assets.long_context.neighbours import Neighbours
from ragsft_assets.prompts import load_prompt

VARIANT = "raft"
STAGE_ORACLE = "raft_oracle"
STAGE_ORDER = "raft_order"
PROMPT_TASK = "long_context_raft"
DEFAULT_BUDGET = 32_768


@dataclass(frozen=True, slots=True)
class QAExample:
    """One source example: its oracle passages, question and answer (``id`` from the source)."""

    id: str
    passages: tuple[str, ...]
    question: str
    answer: str
    history: tuple[tuple[str, str], ...] = ()  # (role, content) turns before the question (ConvQA)
    # the answer cites its passages as [n], n = 1 + the passage's index in ``passages`` (RAG-TGE)
    cites: bool = False


_CITATION = re.compile(r"( ?)\[(\d+)\]")


def renumber_citations(text: str, new_number: Mapping[int, int]) -> str:
    """``[n]`` markers of an answer renumbered by ``new_number`` (old -> new document number); a
    marker whose document is not shown any more is removed with the space before it."""

    def sub(m: re.Match[str]) -> str:
        n = new_number.get(int(m.group(2)))
        return "" if n is None else f"{m.group(1)}[{n}]"

    return _CITATION.sub(sub, text)


def answer_for(ex: QAExample, shown: Sequence[str]) -> str:
    """The answer of ``ex`` over the documents ``shown`` (in order): its ``[n]`` citations follow
    its passages to where they are shown; an answer without citations is as it is."""
    if not ex.cites:
        return ex.answer
    position = {text: i + 1 for i, text in reversed(list(enumerate(shown)))}
    return renumber_citations(
        ex.answer, {n + 1: position[p] for n, p in enumerate(ex.passages) if p in position}
    )


def passage_id(text: str) -> str:
    """A passage's id: 24 hex of SHA-256 of its text (equal texts are one passage)."""
    return derived_id("passage", text)


def narrativeqa_examples(path: str | Path) -> list[QAExample]:
    """NarrativeQA JSON lines ``{question, answer: [refs...], passage}`` (the summary setting).

    The id is derived from the passage and the question (the rows carry none); the answer is the
    first reference answer (the others are alternatives of it). A record without ``question``,
    ``passage`` or a non-empty answer raises ``ValueError`` naming the line.
    """
    out: list[QAExample] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            answers = rec.get("answer")
            if isinstance(answers, str):
                answers = [answers]
            if (
                not rec.get("question")
                or not rec.get("passage")
                or not answers
                or not str(answers[0]).strip()
            ):
                raise ValueError(f"{path}, line {n}: needs question, passage and a non-empty answer")
            eid = derived_id("narrativeqa", passage_id(rec["passage"]), rec["question"])
            if eid in seen:  # the same question on the same passage twice is one example
                continue
            seen.add(eid)
            out.append(QAExample(eid, (str(rec["passage"]),), str(rec["question"]), str(answers[0])))
    return out


@dataclass(frozen=True, slots=True)
class PassageRows:
    """The passage rows the neighbours are computed over: one per (example, oracle passage)."""

    texts: list[str]
    ids: list[str]  # passage_id(text): the duplicate key
    groups: list[str]  # example id
    example_rows: dict[str, list[int]]  # example id -> its rows


def passage_rows(examples: Sequence[QAExample]) -> PassageRows:
    """Rows for ``nearest_neighbours(vectors, k, keys=ids, groups=groups)`` (embed ``texts``)."""
    texts, ids, groups = [], [], []
    example_rows: dict[str, list[int]] = {}
    for ex in examples:
        for text in ex.passages:
            example_rows.setdefault(ex.id, []).append(len(texts))
            texts.append(text)
            ids.append(passage_id(text))
            groups.append(ex.id)
    return PassageRows(texts, ids, groups, example_rows)


# The embedded chat model is SmolLM2-135M-Instruct: its folder holds this hub model's tokenizer.
EMBEDDED_TOKENIZER = "HuggingFaceTB/SmolLM2-135M-Instruct"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def resolve_tokenizer(spec: str | Path) -> Path:
    """The folder of a tokenizer: ``spec`` itself when it is a local folder, else a hub name found
    offline in the Hugging Face cache (as ``transformers`` resolves it with no network), else, for
    the embedded chat model's own name, its converted folder.

    Raises:
        ValueError: naming the spec, when it is neither a folder nor a cached hub model.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise ValueError(f"tokenizer {spec}: the folder has no tokenizer.json")
        return path
    name = str(spec)
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(name, local_files_only=True, allow_patterns=list(TOKENIZER_FILES)))
        if (folder / "tokenizer.json").is_file():
            return folder
    except Exception:  # noqa: BLE001  (not in the cache, or not a hub name: the next rule decides)
        pass
    if name == EMBEDDED_TOKENIZER:
        from ragsft_assets.llm.models import ensure_embedded_model

        return ensure_embedded_model()
    raise ValueError(
        f"tokenizer {name!r} is neither a local folder nor in the Hugging Face cache (offline);"
        f" download it once with `huggingface-cli download {name} {' '.join(TOKENIZER_FILES[:3])}`"
        " or give the model's folder"
    )


class ChatTokenCounter:
    """Tokens of a whole conversation under a model's chat template, with ``tokenizers`` only.

    The template is the folder's ``chat_template.jinja`` (or ``tokenizer_config.json``'s
    ``chat_template``), rendered with jinja2 the way transformers does (sandboxed, ``trim_blocks``,
    ``lstrip_blocks``); the text is then encoded without adding special tokens (the template writes
    them). ``tokenizer`` is a folder or a hub name (``resolve_tokenizer``); None: the embedded chat
    model's (SmolLM2's, converted on first use).
    """

    def __init__(self, tokenizer: str | Path | None = None) -> None:
        self.name = str(tokenizer) if tokenizer is not None else EMBEDDED_TOKENIZER
        self.model_dir = resolve_tokenizer(self.name)

    @cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        return tok

    @cached_property
    def _config(self) -> dict[str, Any]:
        path = self.model_dir / "tokenizer_config.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    @cached_property
    def template_text(self) -> str:
        path = self.model_dir / "chat_template.jinja"
        if path.is_file():
            return path.read_text(encoding="utf-8")
        text = self._config.get("chat_template")
        if not isinstance(text, str):
            raise ValueError(
                f"{self.model_dir} has no chat template (chat_template.jinja or tokenizer_config.json)"
            )
        return text

    @cached_property
    def _template(self) -> Any:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.template_text)

    def _special(self, name: str) -> str:
        value = self._config.get(name)
        if isinstance(value, Mapping):
            value = value.get("content")
        return value if isinstance(value, str) else ""

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        return self._template.render(
            messages=[dict(m) for m in messages],
            add_generation_prompt=False,
            bos_token=self._special("bos_token"),
            eos_token=self._special("eos_token"),
        )

    def count(self, messages: Sequence[Mapping[str, str]]) -> int:
        """Tokens of the rendered conversation (the training example's length)."""
        return len(self._tokenizer.encode(self.render(messages), add_special_tokens=False).ids)

    def count_many(self, conversations: Sequence[Sequence[Mapping[str, str]]]) -> list[int]:
        """``count`` of each conversation, encoded in one batch (tokenizers spreads it over the cores)."""
        rendered = [self.render(m) for m in conversations]
        return [len(e.ids) for e in self._tokenizer.encode_batch(rendered, add_special_tokens=False)]

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Settings of the RAFT variant (a release config's knobs)."""

    budget_tokens: int = DEFAULT_BUDGET
    k: int | None = None  # most distractors; None: as many as fit
    p_oracle: float = 1.0
    seed: int = DEFAULT_SEED
    lang: str = "en"


@dataclass(slots=True)
class RaftOutput:
    """Rows (the product), lineage (row -> source example -> passages -> embedding keys), rejections."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)


def documents_block(passages: Sequence[str]) -> str:
    return "\n\n".join(f"Document {i + 1}:\n{p}" for i, p in enumerate(passages))


def conversation(
    system_template: str,
    passages: Sequence[str],
    question: str,
    answer: str,
    history: Sequence[tuple[str, str]] = (),
) -> list[dict[str, str]]:
    """System (instruction + documents), the earlier turns, the question, the answer."""
    return [
        {"role": "system", "content": system_template.format(documents=documents_block(passages))},
        *({"role": role, "content": content} for role, content in history),
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
    ]


def _candidates(
    rows: Sequence[int], neighbours: Neighbours, query_of_row: Mapping[int, int]
) -> list[tuple[int, float]]:
    """Distractor rows of an example, best first: the union of its oracle rows' neighbour lists."""
    best: dict[int, float] = {}
    for r in rows:
        q = query_of_row[r]
        for j, s in zip(neighbours.indices[q].tolist(), neighbours.scores[q].tolist(), strict=True):
            if j >= 0 and (j not in best or s > best[j]):
                best[j] = s
    return sorted(best.items(), key=lambda js: (-js[1], js[0]))


def oracle_over_budget(example_id: str, tokens: int, budget: int) -> dict[str, str]:
    """The rejection of an example whose oracle alone does not fit the budget (never cut)."""
    return {"id": example_id, "reason": "oracle_over_budget", "detail": f"{tokens} > {budget} tokens"}


def raft_examples(
    examples: Sequence[QAExample],
    rows: PassageRows,
    neighbours: Neighbours,
    counter: ChatTokenCounter,
    config: RaftConfig = RaftConfig(),
    *,
    embedding_keys: Sequence[str] | None = None,
    query_rows: Sequence[int] | None = None,
) -> RaftOutput:
    """Build the RAFT rows of ``examples`` (see the module docstring).

    Args:
        examples: the source examples (those of ``rows``).
        rows: ``passage_rows(examples)``.
        neighbours: ``nearest_neighbours`` over the rows' embeddings (queries: ``query_rows``,
            default every row); ask for enough (e.g. 64) to fill the budget.
        counter: the trained model's token counter.
        config: budget, k, P, seed, prompt language.
        embedding_keys: per row, its embedding cache key (lineage).
        query_rows: the rows ``neighbours`` answered for, in its order (default: every row).
    """
    prompt = load_prompt(PROMPT_TASK, config.lang)
    query_of_row = {
        r: q for q, r in enumerate(query_rows if query_rows is not None else range(len(rows.texts)))
    }
    # Per-passage token costs make the greedy fill cheap; the final count is the exact rendering.
    doc_cost = counter.count_texts([f"Document 000:\n{t}\n\n" for t in rows.texts])
    out = RaftOutput()
    for ex in examples:
        ex_rows = rows.example_rows[ex.id]
        keep = item_uniform(config.seed, STAGE_ORACLE, ex.id) < config.p_oracle
        oracle = [rows.texts[r] for r in ex_rows] if keep else []
        base = counter.count(
            conversation(prompt.text, oracle, ex.question, answer_for(ex, oracle), ex.history)
        )
        if base > config.budget_tokens:
            out.rejections.append(oracle_over_budget(ex.id, base, config.budget_tokens))
            continue
        chosen: list[tuple[int, float]] = []
        total = base
        for j, s in _candidates(ex_rows, neighbours, query_of_row):
            if config.k is not None and len(chosen) >= config.k:
                break
            if total + doc_cost[j] > config.budget_tokens:
                break
            chosen.append((j, s))
            total += doc_cost[j]
        # the estimate is not exact at passage boundaries: drop the last until the exact count fits
        while True:
            items = [("oracle", r, None) for r in (ex_rows if keep else [])] + [
                ("d", j, s) for j, s in chosen
            ]
            order = item_np_rng(config.seed, STAGE_ORDER, ex.id).permutation(len(items)).tolist()
            placed = [items[i] for i in order]
            shown = [rows.texts[r] for _, r, _ in placed]
            messages = conversation(prompt.text, shown, ex.question, answer_for(ex, shown), ex.history)
            n_tokens = counter.count(messages)
            if n_tokens <= config.budget_tokens or not chosen:
                break
            chosen.pop()
        if n_tokens > config.budget_tokens:  # cannot happen (base fits), but never ship an over-budget row
            out.rejections.append({"id": ex.id, "reason": "over_budget", "detail": f"{n_tokens} tokens"})
            continue
        rid = derived_id(VARIANT, ex.id)
        out.rows.append(
            {
                "id": rid,
                "variant": VARIANT,
                "source_id": ex.id,
                "messages": messages,
                "oracle_positions": [i for i, (kind, _, _) in enumerate(placed) if kind == "oracle"],
                "distractor_ids": [rows.ids[r] for kind, r, _ in placed if kind == "d"],
                "distractor_scores": [float(s) for kind, _, s in placed if kind == "d"],
                "num_tokens": n_tokens,
            }
        )
        lineage_rows = [r for _, r, _ in placed]
        out.lineage.append(
            {
                "id": rid,
                "source_id": ex.id,
                "passage_ids": [rows.ids[r] for r in lineage_rows],
                "oracle_passage_ids": [rows.ids[r] for r in ex_rows],
                "embedding_keys": [embedding_keys[r] for r in lineage_rows]
                if embedding_keys is not None
                else [],
                "oracle_kept": keep,
            }
        )
    return out


def length_stats(num_tokens: Sequence[int]) -> dict[str, int]:
    """Median, p99 and max of the example lengths (the card's length table)."""
    if not num_tokens:
        return {"median": 0, "p99": 0, "max": 0}
    a = np.asarray(num_tokens)
    return {
        "median": int(np.median(a)),
        "p99": int(np.percentile(a, 99, method="higher")),
        "max": int(a.max()),
    }


def oracle_position_histogram(rows: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """How often the oracle sits at each document position (the card's position histogram)."""
    hist: dict[int, int] = {}
    for r in rows:
        for p in r["oracle_positions"]:
            hist[p] = hist.get(p, 0) + 1
    return dict(sorted(hist.items()))
