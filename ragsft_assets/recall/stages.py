"""The stages of Recall Rewrite as plain functions over a chat model and a completion model.

Each stage takes the previous stage's records, makes its calls in one batch (the LLM layer's cache,
resume and budget apply) and returns its records plus ledger decisions with counted reasons. Model
output that does not parse is a verdict (``unreadable``), never a crash.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragsft_assets.ids import DEFAULT_SEED, item_rng
from ragsft_assets.ledger import DROPPED, KEPT, Decision
from ragsft_assets.llm.types import SamplingParams
from ragsft_assets.prompts import load_prompt
from ragsft_assets.recall.oasst import OasstPair
from ragsft_assets.recall.rewrite import ClaimState, decide_target, needs_rewriter
from ragsft_assets.recall.rule import (
    CONTRADICTS,
    DEFAULT_THRESHOLDS,
    ENTAILS,
    LABELS,
    UNRELATED,
    Thresholds,
    is_known,
)
from ragsft_assets.recall.schema import AUDIT_CHECKLIST, sft_row

NUM_PROBES = 5
ANSWERS_PER_PROBE = 2
ANSWER_TEMPERATURE = 0.5
QA_STOP = ("\nQ:", "\n\n")  # an answer ends where the next few-shot item would begin
PROMPT_TASKS = (
    "recall_claims",
    "recall_audit",
    "recall_probes",
    "recall_base_qa",
    "recall_label",
    "recall_rewrite",
)

# Bounded so that a model stuck repeating one claim (small models do) still closes the JSON within
# max_tokens instead of being cut mid-array (unreadable); repeats are collapsed after parsing.
MAX_CLAIMS = 40
CLAIMS_SCHEMA = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "maxItems": MAX_CLAIMS,
        }
    },
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
PROBES_SCHEMA = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": NUM_PROBES,
            "maxItems": NUM_PROBES,
        }
    },
    "required": ["questions"],
}
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


def claims_stage(pairs: Sequence[OasstPair], model: Any, params: SamplingParams | None = None) -> StageOut:
    """Stage 1: each gold response as atomic claims (at most ``MAX_CLAIMS``, repeats collapsed); an
    unparseable decomposition drops the example."""
    tpl = load_prompt("recall_claims", "en")
    params = params or SamplingParams(temperature=0.0, max_tokens=1024)
    convs = [_user(tpl.render(prompt=p.prompt, response=p.response)) for p in pairs]
    batch = model.chat(convs, params, json_schema=CLAIMS_SCHEMA, template_version=tpl.version)
    out = StageOut()
    for p, res in zip(pairs, batch.results, strict=True):
        # a claim repeated word for word is one claim (first occurrence kept, order kept)
        claims = (
            list(dict.fromkeys(c.strip() for c in (res.parsed or {}).get("claims", []) if c.strip()))
            if res.ok
            else []
        )
        if not res.ok:
            out.drop(p.id, f"claims_{res.status}", [res.cache_key])
            continue
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
                "claims": [{"claim_id": f"{p.id}-c{i:02d}", "text": c} for i, c in enumerate(claims)],
            }
        )
    return out


def _yes(text: str) -> bool:
    return text.strip().lower().startswith("yes")


def audit_stage(
    examples: Sequence[dict[str, Any]], model: Any, params: SamplingParams | None = None
) -> StageOut:
    """Stage 2: the four-item checklist per claim; an unreadable audit drops the example (no claim of
    it could be trusted as kept or probed)."""
    tpl = load_prompt("recall_audit", "en")
    params = params or SamplingParams(temperature=0.0, max_tokens=512)
    flat = [(ex, c) for ex in examples for c in ex["claims"]]
    batch = model.chat(
        [_user(tpl.render(prompt=ex["prompt"], claim=c["text"])) for ex, c in flat],
        params,
        json_schema=AUDIT_SCHEMA,
        template_version=tpl.version,
    )
    by_claim = {c["claim_id"]: res for (_, c), res in zip(flat, batch.results, strict=True)}
    out = StageOut()
    for ex in examples:
        results = [by_claim[c["claim_id"]] for c in ex["claims"]]
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
    examples: Sequence[dict[str, Any]], model: Any, params: SamplingParams | None = None
) -> StageOut:
    """Stage 3: five probing questions per knowledge-dependent claim; unreadable drops the example."""
    tpl = load_prompt("recall_probes", "en")
    params = params or SamplingParams(temperature=0.0, max_tokens=512)
    flat = [(ex, c) for ex in examples for c in ex["claims"] if c["is_knowledge_dependent"]]
    batch = model.chat(
        [_user(tpl.render(claim=c["text"])) for _, c in flat],
        params,
        json_schema=PROBES_SCHEMA,
        template_version=tpl.version,
    )
    by_claim = {c["claim_id"]: res for (_, c), res in zip(flat, batch.results, strict=True)}
    out = StageOut()
    for ex in examples:
        results = {cid: by_claim[cid] for cid in (c["claim_id"] for c in ex["claims"]) if cid in by_claim}
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


def answers_stage(
    examples: Sequence[dict[str, Any]], base_model: Any, seed: int = DEFAULT_SEED, max_tokens: int = 96
) -> StageOut:
    """Stage 4: the base model answers each question twice (temperature 0.5, few-shot QA prompt).

    Each answer's seed comes from (seed, stage, claim id, probe index, answer index), so a rerun
    draws the same answers whatever the batching.
    """
    tpl = load_prompt("recall_base_qa", "en")
    jobs = []
    for ex in examples:
        for c in ex["claims"]:
            for qi, probe in enumerate(c["probes"]):
                for ai in range(ANSWERS_PER_PROBE):
                    draw = item_rng(seed, "probe_answers", f"{c['claim_id']}/{qi}/{ai}").randrange(2**31)
                    jobs.append((c["claim_id"], qi, ai, tpl.render(question=probe["question"]), draw))
    # one call per distinct seed: the engine takes one SamplingParams per batch
    texts: dict[tuple[str, int, int], tuple[str, str, str]] = {}
    by_seed: dict[int, list[tuple[str, int, int, str, int]]] = {}
    for job in jobs:
        by_seed.setdefault(job[4], []).append(job)
    for draw, group in sorted(by_seed.items()):
        params = SamplingParams(
            temperature=ANSWER_TEMPERATURE, max_tokens=max_tokens, seed=draw, stop=QA_STOP
        )
        batch = base_model.complete([g[3] for g in group], params, template_version=tpl.version)
        for g, res in zip(group, batch.results, strict=True):
            texts[g[:3]] = (res.text.strip() if res.ok else "", res.status, res.cache_key)
    out = StageOut()
    for ex in examples:
        claims, keys, errors = [], [], 0
        for c in ex["claims"]:
            probes = []
            for qi, probe in enumerate(c["probes"]):
                answers = []
                for ai in range(ANSWERS_PER_PROBE):
                    text, status, key = texts[(c["claim_id"], qi, ai)]
                    errors += status != "ok"
                    keys.append(key)
                    answers.append({"text": text, "status": status})
                probes.append({**probe, "answers": answers})
            claims.append({**c, "probes": probes})
        if errors:
            out.drop(ex["id"], "base_model_error", keys, failed_answers=errors)
            continue
        out.keep(ex["id"], "answered", keys)
        out.records.append({**ex, "claims": claims})
    return out


def labels_stage(
    examples: Sequence[dict[str, Any]], judge: Any, params: SamplingParams | None = None
) -> StageOut:
    """Stage 5: ENTAILS / CONTRADICTS / UNRELATED per answer. An unreadable label counts as UNRELATED
    (it decides nothing) and is counted as a reason."""
    tpl = load_prompt("recall_label", "en")
    params = params or SamplingParams(temperature=0.0, max_tokens=64)
    flat = [
        (c, qi, ai, probe["question"], a["text"])
        for ex in examples
        for c in ex["claims"]
        for qi, probe in enumerate(c["probes"])
        for ai, a in enumerate(probe["answers"])
    ]
    batch = judge.chat(
        [_user(tpl.render(claim=c["text"], question=q, answer=a or "(no answer)")) for c, _, _, q, a in flat],
        params,
        json_schema=LABEL_SCHEMA,
        template_version=tpl.version,
    )
    got = {(c["claim_id"], qi, ai): res for (c, qi, ai, _, _), res in zip(flat, batch.results, strict=True)}
    out = StageOut()
    for ex in examples:
        claims, keys, unreadable = [], [], 0
        for c in ex["claims"]:
            probes = []
            for qi, probe in enumerate(c["probes"]):
                answers = []
                for ai, a in enumerate(probe["answers"]):
                    res = got[(c["claim_id"], qi, ai)]
                    keys.append(res.cache_key)
                    label = res.parsed["label"] if res.ok else UNRELATED
                    unreadable += not res.ok
                    answers.append({"text": a["text"], "label": label})
                probes.append({"question": probe["question"], "answers": answers})
            claims.append({**c, "probes": probes})
        out.keep(ex["id"], "labelled", keys, unreadable_labels=unreadable)
        if unreadable:
            out.reasons["label_unreadable_as_unrelated"] += unreadable
        out.records.append({**ex, "claims": claims})
    return out


def known_stage(examples: Sequence[dict[str, Any]], t: Thresholds = DEFAULT_THRESHOLDS) -> StageOut:
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
    params: SamplingParams | None = None,
) -> StageOut:
    """Stage 7: remove unknown claims with minimal edits, or the fixed refusal; records are ``-full`` rows.

    A response with nothing removed is kept as it is, with no rewriter call. An unreadable rewrite
    drops the example with a reason.
    """
    tpl = load_prompt("recall_rewrite", "en")
    params = params or SamplingParams(temperature=0.0, max_tokens=1024)
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
        if res is not None and not res.ok:
            out.drop(ex["id"], f"rewrite_{res.status}", [res.cache_key])
            continue
        target = decide_target(
            ex["response"],
            states[ex["id"]],
            res.parsed["rewritten_response"] if res else None,
            res.parsed["has_substantive_content"] if res else None,
        )
        out.keep(ex["id"], target.reason, [res.cache_key] if res else [])
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
    t: Thresholds = DEFAULT_THRESHOLDS,
    seed: int = DEFAULT_SEED,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, StageOut]]:
    """Every stage in order: ``(-full rows, -sft rows, stage outputs by name)``."""
    stages: dict[str, StageOut] = {}
    stages["claims"] = claims_stage(pairs, chat)
    stages["claim_audit"] = audit_stage(stages["claims"].records, chat)
    stages["probes"] = probes_stage(stages["claim_audit"].records, chat)
    stages["probe_answers"] = answers_stage(stages["probes"].records, base_model, seed)
    stages["probe_labels"] = labels_stage(stages["probe_answers"].records, chat)
    stages["known_claims"] = known_stage(stages["probe_labels"].records, t)
    stages["rewrites"] = rewrites_stage(stages["known_claims"].records, chat, base_model_id)
    full = stages["rewrites"].records
    return full, [sft_row(r) for r in full], stages
