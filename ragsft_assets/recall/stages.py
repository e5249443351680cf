"""The stages of Recall Rewrite as plain functions over a chat model and a completion model.

Each stage takes the previous stage's records, hands the model all of its calls in one batch (the
LLM layer's cache, resume and budget apply; the base model's answers each carry their own seed in
that one batch) and returns its records plus ledger decisions with counted reasons. Model output
that does not parse is a verdict (``unreadable``), never a crash. The card's values (probes per
claim, answers per probe, temperature, thresholds, refusal) come from a ``RecallRecipe``.

Claims are numbered per response (``claim_id`` 0, 1, ...: an int, as in the card's schema); across
responses a claim is named by ``claim_key`` (response id + number).

A base-model stage never drops an example for one model only: the model-independent stages decide
which examples exist, so every base model's ``-sft`` holds the same ids. A base-model answer that
failed is recorded (ledger detail, counted reason) and decides nothing (it is labelled
``UNRELATED`` with no judge call). A rewrite that failed (unreadable or error) drops the example
for that model, counted (``rewrite_<status>``): the card refuses only "If too little information
remains", so a failed call never becomes the refusal target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragsft_assets.ids import DEFAULT_SEED, item_rng
from ragsft_assets.ledger import DROPPED, KEPT, Decision
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.types import SamplingParams
from ragsft_assets.prompts import load_prompt
from ragsft_assets.recall.oasst import OasstPair
from ragsft_assets.recall.recipes import RECALL_OASST1, RecallRecipe
from ragsft_assets.recall.rewrite import ClaimState, decide_target, needs_rewriter
from ragsft_assets.recall.rule import CONTRADICTS, ENTAILS, LABELS, UNRELATED, Thresholds, is_known
from ragsft_assets.recall.schema import AUDIT_CHECKLIST, sft_row

QA_STOP = ("\nQ:", "\n\n")  # an answer ends where the next few-shot item would begin
PROMPT_TASKS = (
    "recall_claims",
    "recall_audit",
    "recall_probes",
    "recall_base_qa",
    "recall_label",
    "recall_rewrite",
)

# No cap on the number of claims: a response with many claims is decomposed whole (the recipe's
# claims_max_tokens leaves room for it). A claim repeated word for word stays a claim of its own:
# the card counts "64,301 claims" of the decompositions as they came.
CLAIMS_SCHEMA = {
    "type": "object",
    "properties": {"claims": {"type": "array", "items": {"type": "string", "minLength": 1}}},
    "required": ["claims"],
}
AUDIT_SCHEMA = {
    "type": "object",
    "properties": {
        **{name: {"type": "string"} for name in AUDIT_CHECKLIST},
        "justification": {"type": "string"},
        "is_knowledge_dependent": {"type": "boolean"},
    },
    "required": [*AUDIT_CHECKLIST, "justification", "is_knowledge_dependent"],
}

# The chat tasks' thinking default (decompose, audit, probe, label, rewrite). ours: the card names
# the model ("gpt-5-mini-2025-08-07"), not a thinking mode; without thinking, a verdict is not cut
# inside a reasoning. A role's RAGSFT_<ROLE>_ENABLE_THINKING still wins (llm/thinking.py); a
# reasoning-model role (the card's gpt-5-mini) ignores it.
THINKING = False


def probes_schema(n: int) -> dict[str, Any]:
    """Exactly ``n`` probing questions (the recipe's ``num_probes``)."""
    return {
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": n,
                "maxItems": n,
            }
        },
        "required": ["questions"],
    }


PROBES_SCHEMA = probes_schema(RECALL_OASST1.num_probes)
LABEL_SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": list(LABELS)}},
    "required": ["label"],
}
REWRITE_SCHEMA = {
    "type": "object",
    "properties": {"rewritten_response": {"type": "string"}, "has_substantive_content": {"type": "boolean"}},
    "required": ["rewritten_response", "has_substantive_content"],
}


@dataclass
class StageOut:
    """A stage's records, its ledger decisions and its counted reasons."""

    records: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def drop(self, cid: str, reason: str, keys: Sequence[str] = (), **detail: Any) -> None:
        self.decisions.append(Decision(cid, DROPPED, reason, detail or None, list(keys)))
        self.reasons[reason] += 1

    def keep(self, cid: str, reason: str, keys: Sequence[str] = (), **detail: Any) -> None:
        self.decisions.append(Decision(cid, KEPT, reason, detail or None, list(keys)))
        self.reasons[reason] += 1


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def claim_key(example_id: str, claim_id: int) -> str:
    """A claim's name across responses (``oasst1-0001-c00``): seeds and lookups use it."""
    return f"{example_id}-c{claim_id:02d}"


def claims_stage(pairs: Sequence[OasstPair], model: Any, recipe: RecallRecipe = RECALL_OASST1) -> StageOut:
    """Stage 1: each gold response as atomic claims, whole (no cap; a repeated claim kept, as the
    card counts them); an unparseable decomposition drops the example."""
    tpl = load_prompt("recall_claims", "en")
    params = SamplingParams(temperature=0.0, max_tokens=recipe.claims_max_tokens, enable_thinking=THINKING)
    convs = [_user(tpl.render(prompt=p.prompt, response=p.response)) for p in pairs]
    batch = model.chat(convs, params, json_schema=CLAIMS_SCHEMA, template_version=tpl.version)
    out = StageOut()
    for p, res in zip(pairs, batch.results, strict=True):
        if not res.ok:
            out.drop(p.id, f"claims_{res.status}", [res.cache_key])
            continue
        # every claim as decomposed, repeats included ("64,301 claims" counts them so); blank ones are
        # no claim
        claims = [c.strip() for c in (res.parsed or {}).get("claims", []) if c.strip()]
        if not claims:
            out.drop(p.id, "claims_empty", [res.cache_key])
            continue
        out.keep(p.id, "decomposed", [res.cache_key], num_claims=len(claims))
        out.records.append(
            {
                "id": p.id,
                "source_id": p.source_id,
                "prompt": p.prompt,
                "response": p.response,
                "claims": [{"claim_id": i, "text": c} for i, c in enumerate(claims)],
            }
        )
    return out


def _yes(text: str) -> bool:
    return text.strip().lower().startswith("yes")


def _per_claim(
    examples: Sequence[dict[str, Any]],
    model: Any,
    task: str,
    schema: dict[str, Any],
    max_tokens: int,
    render: Any,
    wanted: Any = lambda c: True,
) -> dict[str, Any]:
    """One batch of one chat call per wanted claim; ``{claim_key: result}``."""
    tpl = load_prompt(task, "en")
    flat = [(ex, c) for ex in examples for c in ex["claims"] if wanted(c)]
    batch = model.chat(
        [_user(render(tpl, ex, c)) for ex, c in flat],
        SamplingParams(temperature=0.0, max_tokens=max_tokens, enable_thinking=THINKING),
        json_schema=schema,
        template_version=tpl.version,
    )
    return {claim_key(ex["id"], c["claim_id"]): r for (ex, c), r in zip(flat, batch.results, strict=True)}


def audit_stage(examples: Sequence[dict[str, Any]], model: Any) -> StageOut:
    """Stage 2: the four-item checklist per claim; an unreadable audit drops the example (no claim of
    it could be trusted as kept or probed)."""
    by_claim = _per_claim(
        examples,
        model,
        "recall_audit",
        AUDIT_SCHEMA,
        512,
        lambda tpl, ex, c: tpl.render(prompt=ex["prompt"], claim=c["text"]),
    )
    out = StageOut()
    for ex in examples:
        results = [by_claim[claim_key(ex["id"], c["claim_id"])] for c in ex["claims"]]
        keys = [r.cache_key for r in results]
        bad = [r.status for r in results if not r.ok]
        if bad:
            out.drop(ex["id"], f"audit_{bad[0]}", keys, failed_claims=len(bad))
            continue
        claims = []
        for c, r in zip(ex["claims"], results, strict=True):
            a = r.parsed
            claims.append(
                {
                    **c,
                    "audit_checklist": {name: a[name] for name in AUDIT_CHECKLIST},
                    "knowledge_dependence_reason": a["justification"],
                    "is_knowledge_dependent": bool(a["is_knowledge_dependent"]),
                    "contains_specific_fact": _yes(a["contains_specific_fact"]),
                }
            )
        kd = sum(c["is_knowledge_dependent"] for c in claims)
        out.keep(ex["id"], "audited", keys, knowledge_dependent=kd, other=len(claims) - kd)
        out.records.append({**ex, "claims": claims})
    return out


def probes_stage(
    examples: Sequence[dict[str, Any]], model: Any, recipe: RecallRecipe = RECALL_OASST1
) -> StageOut:
    """Stage 3: ``num_probes`` probing questions per knowledge-dependent claim; unreadable drops the
    example."""
    by_claim = _per_claim(
        examples,
        model,
        "recall_probes",
        probes_schema(recipe.num_probes),
        512,
        lambda tpl, ex, c: tpl.render(claim=c["text"]),
        lambda c: c["is_knowledge_dependent"],
    )
    out = StageOut()
    for ex in examples:
        results = {
            c["claim_id"]: by_claim[k]
            for c in ex["claims"]
            if (k := claim_key(ex["id"], c["claim_id"])) in by_claim
        }
        bad = [r.status for r in results.values() if not r.ok]
        keys = [r.cache_key for r in results.values()]
        if bad:
            out.drop(ex["id"], f"probes_{bad[0]}", keys)
            continue
        claims = [
            {**c, "probes": [{"question": q} for q in results[c["claim_id"]].parsed["questions"]]}
            if c["claim_id"] in results
            else {**c, "probes": []}
            for c in ex["claims"]
        ]
        out.keep(ex["id"], "probed" if results else "nothing_to_probe", keys, probed_claims=len(results))
        out.records.append({**ex, "claims": claims})
    return out


def answer_seed(seed: int, key: str, probe: int, answer: int) -> int:
    """The seed of one base-model answer: from (seed, stage, claim key, probe, answer) only."""
    return item_rng(seed, "probe_answers", f"{key}/{probe}/{answer}").randrange(2**31)


def answers_stage(
    examples: Sequence[dict[str, Any]],
    base_model: Any,
    seed: int = DEFAULT_SEED,
    recipe: RecallRecipe = RECALL_OASST1,
) -> StageOut:
    """Stage 4: the base model answers each question ``answers_per_probe`` times (few-shot QA prompt).

    Every answer of the stage goes to the model in one batch (``run``), each request with its own
    seed from (seed, stage, claim key, probe index, answer index): a rerun draws the same answers
    whatever the batching. An answer that failed is kept with its status (it decides nothing), and
    the example stays: the failure is a ledger detail and a counted reason, never a drop.
    """
    tpl = load_prompt("recall_base_qa", "en")
    jobs: list[tuple[str, int, int]] = []
    requests: list[Request] = []
    for ex in examples:
        for c in ex["claims"]:
            key = claim_key(ex["id"], c["claim_id"])
            for qi, probe in enumerate(c["probes"]):
                for ai in range(recipe.answers_per_probe):
                    params = SamplingParams(
                        temperature=recipe.answer_temperature,
                        max_tokens=recipe.answer_max_tokens,
                        seed=answer_seed(seed, key, qi, ai),
                        stop=QA_STOP,
                    )
                    jobs.append((key, qi, ai))
                    requests.append(Request((), params, None, None, tpl.render(question=probe["question"])))
    batch = base_model.run(requests, template_version=tpl.version)
    texts = {
        job: (res.text.strip() if res.ok else "", res.status, res.cache_key)
        for job, res in zip(jobs, batch.results, strict=True)
    }
    out = StageOut()
    for ex in examples:
        claims, keys, errors = [], [], 0
        for c in ex["claims"]:
            key = claim_key(ex["id"], c["claim_id"])
            probes = []
            for qi, probe in enumerate(c["probes"]):
                answers = []
                for ai in range(recipe.answers_per_probe):
                    text, status, cache_key = texts[(key, qi, ai)]
                    errors += status != "ok"
                    keys.append(cache_key)
                    answers.append({"text": text, "status": status})
                probes.append({**probe, "answers": answers})
            claims.append({**c, "probes": probes})
        if errors:
            out.keep(ex["id"], "answered_with_failures", keys, failed_answers=errors)
            out.reasons["base_model_failed_answers"] += errors
        else:
            out.keep(ex["id"], "answered", keys)
        out.records.append({**ex, "claims": claims})
    return out


def labels_stage(examples: Sequence[dict[str, Any]], judge: Any) -> StageOut:
    """Stage 5: ENTAILS / CONTRADICTS / UNRELATED per answer. An unreadable label, or an answer the
    base model failed to give (no judge call), counts as UNRELATED (it decides nothing) and is
    counted as a reason."""
    tpl = load_prompt("recall_label", "en")
    params = SamplingParams(temperature=0.0, max_tokens=64, enable_thinking=THINKING)
    flat = [
        (claim_key(ex["id"], c["claim_id"]), qi, ai, c["text"], probe["question"], a["text"])
        for ex in examples
        for c in ex["claims"]
        for qi, probe in enumerate(c["probes"])
        for ai, a in enumerate(probe["answers"])
        if a.get("status", "ok") == "ok"
    ]
    batch = judge.chat(
        [_user(tpl.render(claim=c, question=q, answer=a or "(no answer)")) for _, _, _, c, q, a in flat],
        params,
        json_schema=LABEL_SCHEMA,
        template_version=tpl.version,
    )
    got = {f[:3]: res for f, res in zip(flat, batch.results, strict=True)}
    out = StageOut()
    for ex in examples:
        claims, keys, unreadable, failed = [], [], 0, 0
        for c in ex["claims"]:
            key = claim_key(ex["id"], c["claim_id"])
            probes = []
            for qi, probe in enumerate(c["probes"]):
                answers = []
                for ai, a in enumerate(probe["answers"]):
                    res = got.get((key, qi, ai))
                    if res is None:  # the base model gave no answer: nothing to judge
                        failed += 1
                        label = UNRELATED
                    else:
                        keys.append(res.cache_key)
                        label = res.parsed["label"] if res.ok else UNRELATED
                        unreadable += not res.ok
                    answers.append({"text": a["text"], "label": label})
                probes.append({"question": probe["question"], "answers": answers})
            claims.append({**c, "probes": probes})
        out.keep(ex["id"], "labelled", keys, unreadable_labels=unreadable, failed_answers=failed)
        if unreadable:
            out.reasons["label_unreadable_as_unrelated"] += unreadable
        if failed:
            out.reasons["failed_answer_as_unrelated"] += failed
        out.records.append({**ex, "claims": claims})
    return out


def known_stage(examples: Sequence[dict[str, Any]], t: Thresholds = RECALL_OASST1.thresholds) -> StageOut:
    """Stage 6: the decision rule, a pure function of the labels (no model call)."""
    out = StageOut()
    for ex in examples:
        claims = []
        for c in ex["claims"]:
            labels = [a["label"] for p in c["probes"] for a in p["answers"]]
            counts = [
                (
                    sum(a["label"] == ENTAILS for a in p["answers"]),
                    sum(a["label"] == CONTRADICTS for a in p["answers"]),
                )
                for p in c["probes"]
            ]
            known = is_known(counts, t) if c["is_knowledge_dependent"] else None
            claims.append(
                {
                    **c,
                    "is_known": known,
                    "is_removed": known is False,
                    "num_entailed_answers": labels.count(ENTAILS),
                    "num_contradicted_answers": labels.count(CONTRADICTS),
                    "num_unrelated_answers": labels.count(UNRELATED),
                }
            )
        unknown = sum(c["is_known"] is False for c in claims)
        out.keep(ex["id"], "has_unknown_claims" if unknown else "all_known", [], unknown=unknown)
        out.records.append({**ex, "claims": claims, "filter": str(t)})
    return out


def rewrites_stage(
    examples: Sequence[dict[str, Any]],
    rewriter: Any,
    base_model_id: str,
    recipe: RecallRecipe = RECALL_OASST1,
) -> StageOut:
    """Stage 7: remove unknown claims with minimal edits, or the fixed refusal; records are ``-full`` rows.

    A response with nothing removed is kept as it is, with no rewriter call. A rewrite that failed
    (unreadable or error) drops the example, counted as ``rewrite_<status>``: the card's refusal is
    for "If too little information remains", not for a failed call, so the target is never
    changed silently (this model's configs then lack that id; the card's note says which).
    """
    tpl = load_prompt("recall_rewrite", "en")
    params = SamplingParams(temperature=0.0, max_tokens=1024, enable_thinking=THINKING)
    states = {
        ex["id"]: [
            ClaimState(c["is_knowledge_dependent"], c["is_known"], c["contains_specific_fact"])
            for c in ex["claims"]
        ]
        for ex in examples
    }
    todo = [ex for ex in examples if needs_rewriter(states[ex["id"]])]
    convs = [
        _user(
            tpl.render(
                prompt=ex["prompt"],
                response=ex["response"],
                removed="\n".join(f"- {c['text']}" for c in ex["claims"] if c["is_removed"]),
            )
        )
        for ex in todo
    ]
    batch = rewriter.chat(convs, params, json_schema=REWRITE_SCHEMA, template_version=tpl.version)
    got = {ex["id"]: res for ex, res in zip(todo, batch.results, strict=True)}
    out = StageOut()
    for ex in examples:
        res = got.get(ex["id"])
        keys = [res.cache_key] if res else []
        if res is not None and not res.ok:
            out.drop(ex["id"], f"rewrite_{res.status}", keys, error=res.error or res.status)
            continue
        target = decide_target(
            ex["response"],
            states[ex["id"]],
            res.parsed["rewritten_response"] if res else None,
            res.parsed["has_substantive_content"] if res else None,
            refusal=recipe.refusal,
        )
        out.keep(ex["id"], target.reason, keys)
        claims = [{k: c[k] for k in _CLAIM_FIELDS} for c in ex["claims"]]
        out.records.append(
            {
                "id": ex["id"],
                "base_model": base_model_id,
                "prompt": ex["prompt"],
                "is_refusal": target.is_refusal,
                "original_response": ex["response"],
                "rewritten_response": target.response,
                "filter": ex["filter"],
                "num_claims": len(claims),
                "num_knowledge_dependent_claims": sum(c["is_knowledge_dependent"] for c in claims),
                "num_known_claims": sum(c["is_known"] is True for c in claims),
                "num_unknown_claims": sum(c["is_known"] is False for c in claims),
                "claims": claims,
            }
        )
    return out


_CLAIM_FIELDS = (
    "claim_id",
    "text",
    "is_knowledge_dependent",
    "knowledge_dependence_reason",
    "audit_checklist",
    "is_known",
    "is_removed",
    "num_entailed_answers",
    "num_contradicted_answers",
    "num_unrelated_answers",
    "probes",
)


def statistics(full_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The card's statistics table over ``-full`` rows."""
    labels = Counter(
        a["label"] for r in full_rows for c in r["claims"] for p in c["probes"] for a in p["answers"]
    )
    total = sum(labels.values())
    return {
        "examples": len(full_rows),
        "claims": sum(r["num_claims"] for r in full_rows),
        "knowledge_dependent_claims": sum(r["num_knowledge_dependent_claims"] for r in full_rows),
        **{
            f"share_{lab.lower()}": round(labels[lab] / total, 4) if total else 0.0
            for lab in (ENTAILS, UNRELATED, CONTRADICTS)
        },
        "known_claims": sum(r["num_known_claims"] for r in full_rows),
        "unknown_claims": sum(r["num_unknown_claims"] for r in full_rows),
        "non_refusal_responses": sum(not r["is_refusal"] for r in full_rows),
        "refusal_responses": sum(r["is_refusal"] for r in full_rows),
    }


def run_all(
    pairs: Sequence[OasstPair],
    chat: Any,
    base_model: Any,
    base_model_id: str,
    recipe: RecallRecipe = RECALL_OASST1,
    seed: int = DEFAULT_SEED,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, StageOut]]:
    """Every stage in order under ``recipe``: ``(-full rows, -sft rows, stage outputs by name)``."""
    stages: dict[str, StageOut] = {}
    stages["claims"] = claims_stage(pairs, chat, recipe)
    stages["claim_audit"] = audit_stage(stages["claims"].records, chat)
    stages["probes"] = probes_stage(stages["claim_audit"].records, chat, recipe)
    stages["probe_answers"] = answers_stage(stages["probes"].records, base_model, seed, recipe)
    stages["probe_labels"] = labels_stage(stages["probe_answers"].records, chat)
    stages["known_claims"] = known_stage(stages["probe_labels"].records, recipe.thresholds)
    stages["rewrites"] = rewrites_stage(stages["known_claims"].records, chat, base_model_id, recipe)
    full = stages["rewrites"].records
    return full, [sft_row(r) for r in full], stages
