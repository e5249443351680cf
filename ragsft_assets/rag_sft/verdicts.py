"""Generating targets and deciding which examples are kept: judges plus deterministic checks.

An answerable example is kept when its citations check out (every tag ``ok``, cited documents
exactly the golds: F1 = 1), the factual judge gives 5/5 and, for non-English data, the language
judge gives 5/5. An unanswerable example is kept when its tags check out and the refusal judge
says it refuses. Twins are kept or dropped together. A model output that cannot be read is a
recorded verdict (``unreadable``), never an exception.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson
import pyarrow as pa

from ragsft_assets.arrow_schemas import STRING_LIST, columns, strings
from ragsft_assets.ledger import DROPPED, KEPT, Decision
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.types import BatchStats, ChatModel, ChatResult, SamplingParams
from ragsft_assets.prompts import load_prompt
from ragsft_assets.rag_sft.citations import PARTIAL_WORD, TOO_SHORT, CitationReport, check_response
from ragsft_assets.rag_sft.examples import ANSWERABLE, LANGUAGE_NAMES, RagPrompt
from ragsft_assets.rag_sft.layout import render_documents
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE, LANGUAGE_SCOPES, RagSftRecipe

UNREADABLE = "unreadable"

GENERATION_PARAMS = SamplingParams(temperature=0.1, max_tokens=512)
JUDGE_PARAMS = SamplingParams(temperature=0.0, max_tokens=160)

SCORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string"}},
    "required": ["score"],
}
REFUSAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"refuses": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["refuses"],
}


# --- generation -----------------------------------------------------------------------------

RESPONSE_SCHEMA = pa.schema(
    [
        *strings("id", "pair_id", "split", "response", "status", "error", "cache_key"),
        *columns(pa.int64(), "prompt_tokens", "completion_tokens"),
    ]
)


def training_conversation(p: RagPrompt) -> list[dict[str, str]]:
    """Exactly the training prompt: the system message with the documents, then the question."""
    return [{"role": "system", "content": p.system}, {"role": "user", "content": p.user}]


def generate_responses(
    prompts: Sequence[RagPrompt],
    generator: ChatModel,
    params: SamplingParams = GENERATION_PARAMS,
    log: Any = None,
) -> tuple[pa.Table, BatchStats]:
    """The generator's answer to every prompt, under the training prompt (no gold answer).

    Empty answers become ``unreadable``; the backend's status is kept otherwise.
    """
    ordered = sorted(prompts, key=lambda p: p.id)
    version = load_prompt("rag_system", ordered[0].language).version if ordered else ""
    batch = generator.chat(
        [training_conversation(p) for p in ordered], params, template_version=version, log=log
    )
    rows = []
    for p, r in zip(ordered, batch.results, strict=True):
        status = r.status if r.text.strip() or not r.ok else UNREADABLE
        rows.append(
            {
                "id": p.id,
                "pair_id": p.pair_id,
                "split": p.split,
                "response": r.text,
                "status": status,
                "error": r.error if status == r.status else "empty response",
                "cache_key": r.cache_key,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
            }
        )
    return pa.Table.from_pylist(rows, schema=RESPONSE_SCHEMA), batch.stats


# --- verdicts -------------------------------------------------------------------------------


@dataclass(slots=True)
class ExampleVerdict:
    id: str
    pair_id: str
    question_id: str
    kind: str
    split: str
    kept: bool
    verdict: str  # kept | dropped | unreadable
    reason: str
    tags_valid: bool | None = None
    f1: float | None = None
    n_tags: int = 0
    factual_score: int | None = None
    refuses: bool | None = None
    language_score: int | None = None
    # The stricter quoting rules the tags break (partial_word, too_short): flagged in the ledger;
    # they drop the example only under the recipe's citation_check "drop".
    quote_flags: list[str] = field(default_factory=list)
    citations: str = ""  # the CitationReport as JSON text
    cache_keys: list[str] = field(default_factory=list)


VERDICT_SCHEMA = pa.schema(
    [
        *strings("id", "pair_id", "question_id", "kind", "split"),
        ("kept", pa.bool_()),
        *strings("verdict", "reason"),
        ("tags_valid", pa.bool_()),
        ("f1", pa.float64()),
        *columns(pa.int32(), "n_tags", "factual_score"),
        ("refuses", pa.bool_()),
        ("language_score", pa.int32()),
        ("quote_flags", STRING_LIST),
        ("citations", pa.string()),
        ("cache_keys", STRING_LIST),
    ]
)


def citation_report(p: RagPrompt, response: str, *, strict: bool, min_words: int) -> CitationReport:
    """The deterministic check of one response under its own instruction variant.

    ``strict``/``min_words`` are the verifier's stricter quoting rules (``partial_word``,
    ``too_short``); without them a tag passes when it is verbatim, or its fragments are verbatim
    and in order around an ellipsis (the card's check).
    """
    return check_response(
        response,
        p.paragraphs,
        p.titles,
        p.gold_titles if p.kind == ANSWERABLE else None,
        style=p.citation_style,
        strict=strict,
        min_words=min_words,
    )


def quote_flags(p: RagPrompt, response: str, min_words: int) -> list[str]:
    """The stricter quoting verdicts (``partial_word``, ``too_short``) the response's tags get, sorted."""
    strict = citation_report(p, response, strict=True, min_words=min_words)
    return sorted({t.verdict for t in strict.tags if t.verdict in (PARTIAL_WORD, TOO_SHORT)})


def _judge_message(task: str, lang: str, **values: object) -> tuple[list[dict[str, str]], str]:
    t = load_prompt(task, lang)
    return [{"role": "user", "content": t.render(**values)}], t.version


def _score(r: ChatResult, key: str) -> Any:
    return r.parsed.get(key) if r.ok and isinstance(r.parsed, dict) else None


@dataclass(slots=True)
class JudgeRun:
    verdicts: list[ExampleVerdict]
    stats: BatchStats
    funnel: Counter


def judge_examples(
    prompts: Sequence[RagPrompt],
    responses: Sequence[dict[str, Any]],
    judge: ChatModel,
    *,
    recipe: RagSftRecipe = HOTPOTQA_CITE_RECIPE,
    params: SamplingParams = JUDGE_PARAMS,
    log: Any = None,
) -> JudgeRun:
    """Decide every example: deterministic checks first, judges only on what passed them.

    Args:
        prompts: the prompts (rows of ``rag_prompts``).
        responses: rows of ``rag_responses`` (id, response, status, cache_key).
        judge: the judge model.
        recipe: the citation check (``citation_check``: the stricter quoting rules flag the
            example, or drop it; ``min_quote_words``), the language judge's scope (``all``, or
            ``answerable``: refusals are not language-judged), the factual rubric
            (``factual_rubric``: its template says what the judge reads, the gold answer and
            supporting fact titles, or the documents' text for ``rag_judge_factual_multi``), the
            factual judge's thinking switch and budgets (``factual_judge_thinking``,
            ``factual_judge_max_tokens``, ``factual_judge_thinking_max_tokens``) and
            ``multi_answer`` (no citation F1 required).
        params: the judges' sampling (the factual judge's token budgets and thinking are the
            recipe's).
    """
    language_scope = recipe.language_judge_scope
    if language_scope not in LANGUAGE_SCOPES:
        raise ValueError(f"language_scope must be one of {LANGUAGE_SCOPES}, not {language_scope!r}")
    by_id = {r["id"]: r for r in responses}
    verdicts: dict[str, ExampleVerdict] = {}
    need: list[tuple[RagPrompt, str]] = []
    for p in sorted(prompts, key=lambda x: x.id):
        r = by_id.get(p.id)
        v = ExampleVerdict(p.id, p.pair_id, p.question_id, p.kind, p.split, False, DROPPED, "")
        verdicts[p.id] = v
        if r is None or r["status"] != "ok" or not (r["response"] or "").strip():
            v.verdict, v.reason = UNREADABLE, "response_unreadable"
            v.cache_keys = [r["cache_key"]] if r and r["cache_key"] else []
            continue
        v.cache_keys = [r["cache_key"]] if r["cache_key"] else []
        rep = citation_report(
            p, r["response"], strict=recipe.strict_quotes_drop, min_words=recipe.min_quote_words
        )
        v.quote_flags = quote_flags(p, r["response"], recipe.min_quote_words)
        v.tags_valid, v.f1, v.n_tags = rep.tags_valid, rep.f1, rep.n_tags
        v.citations = orjson.dumps({**rep.to_dict(), "cited_ids": rep.cited_ids}).decode()
        if not rep.tags_valid:
            v.reason = "citations_invalid"
        elif p.kind == ANSWERABLE and rep.f1 != 1.0 and not recipe.multi_answer:
            v.reason = "citation_f1"
        else:
            need.append((p, r["response"]))

    # The three judges' requests go to the model as one batch, each with its own template version
    # (so its own cache key), sampling and schema: a fleet stays full while they run.
    factual = [(p, resp) for p, resp in need if p.kind == ANSWERABLE]
    refusal = [(p, resp) for p, resp in need if p.kind != ANSWERABLE]

    def language_judged(p: RagPrompt) -> bool:
        return p.language != "en" and (language_scope == "all" or p.kind == ANSWERABLE)

    language = [(p, resp) for p, resp in need if language_judged(p)]

    def extra_values(p: RagPrompt, resp: str) -> dict[str, object]:
        return {
            "question": p.question,
            "answer": p.answer,
            "gold_titles": "; ".join(p.gold_titles),
            "response": resp,
            "language_name": LANGUAGE_NAMES.get(p.language, p.language),
            "passages": render_documents(list(zip(p.titles, p.paragraphs, strict=True))),
        }

    # The recipe's thinking switch is the task's default (a role's setting still wins, llm.thinking);
    # a call that thinks gets the larger budget, its reasoning counting against it.
    params = replace(
        params,
        enable_thinking=recipe.judges_thinking,
        thinking_max_tokens=recipe.judges_thinking_max_tokens,
    )
    factual_params = replace(
        params,
        max_tokens=recipe.factual_judge_max_tokens,
        enable_thinking=recipe.factual_judge_thinking,
        thinking_max_tokens=recipe.factual_judge_thinking_max_tokens,
    )
    tasks = [
        (recipe.factual_rubric, factual, SCORE_SCHEMA, factual_params, "factual_score", "score"),
        ("rag_judge_refusal", refusal, REFUSAL_SCHEMA, params, "refuses", "refuses"),
        ("rag_judge_language", language, SCORE_SCHEMA, params, "language_score", "score"),
    ]
    requests: list[Request] = []
    for task, items, schema, task_params, _, _ in tasks:
        for p, resp in items:
            msgs, version = _judge_message(task, p.language, **extra_values(p, resp))
            requests.append(Request(msgs, task_params, schema, template_version=version))
    stats = BatchStats()
    results: list[ChatResult] = []
    if requests:
        batch = judge.run(requests, log=log)
        stats, results = batch.stats, list(batch.results)
    at = 0
    for _, items, _, _, attr, key in tasks:
        for (p, _), res in zip(items, results[at : at + len(items)], strict=True):
            v = verdicts[p.id]
            v.cache_keys.append(res.cache_key)
            setattr(v, attr, _score(res, key))
        at += len(items)

    for p, _ in need:
        v = verdicts[p.id]
        judged = v.factual_score if p.kind == ANSWERABLE else v.refuses
        if judged is None or (language_judged(p) and v.language_score is None):
            v.verdict, v.reason = UNREADABLE, "judge_unreadable"
        elif p.kind == ANSWERABLE and v.factual_score != 5:
            v.reason = "factual_score"
        elif p.kind != ANSWERABLE and v.refuses is not True:
            v.reason = "not_refusal"
        elif language_judged(p) and v.language_score != 5:
            v.reason = "language_score"
        else:
            v.kept, v.verdict, v.reason = True, KEPT, "kept"

    final = keep_twins_together(list(verdicts.values()))
    funnel = Counter(f"{v.verdict}:{v.reason}" for v in final)
    return JudgeRun(final, stats, funnel)


def quote_flag_counts(verdicts: Sequence[ExampleVerdict]) -> dict[str, int]:
    """How many examples the stricter quoting rules flag: kept ones, and per rule (any verdict)."""
    out = {"kept_flagged": sum(bool(v.quote_flags) and v.kept for v in verdicts)}
    for flag in (PARTIAL_WORD, TOO_SHORT):
        out[flag] = sum(flag in v.quote_flags for v in verdicts)
    return out


def keep_twins_together(verdicts: Sequence[ExampleVerdict]) -> list[ExampleVerdict]:
    """Drop every example of a pair in which one example was dropped (reason ``twin_dropped``)."""
    bad_pairs = {v.pair_id for v in verdicts if not v.kept}
    for v in verdicts:
        if v.kept and v.pair_id in bad_pairs:
            v.kept, v.verdict, v.reason = False, DROPPED, "twin_dropped"
    return sorted(verdicts, key=lambda v: v.id)


def verdicts_table(verdicts: Sequence[ExampleVerdict]) -> pa.Table:
    return pa.Table.from_pylist(
        [asdict(v) for v in sorted(verdicts, key=lambda v: v.id)], schema=VERDICT_SCHEMA
    )


def verdict_decisions(verdicts: Sequence[ExampleVerdict]) -> list[Decision]:
    """Ledger rows: one per example, with the generation and judge cache keys."""
    return [
        Decision(
            v.id,
            v.verdict,
            v.reason,
            {
                "pair_id": v.pair_id,
                "question_id": v.question_id,
                "kind": v.kind,
                "f1": v.f1,
                "factual_score": v.factual_score,
                "refuses": v.refuses,
                "language_score": v.language_score,
                **({"quote_flags": v.quote_flags} if v.quote_flags else {}),
            },
            list(v.cache_keys),
        )
        for v in verdicts
    ]
