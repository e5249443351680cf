"""Clustered contexts (variant 3 of the long-context family): several QA pairs train on one context.

Two seeded k-means clusterings (scikit-learn) of the examples: one over their passage embeddings
(an example's vector is the normalised mean of its oracle passages' vectors) and one over their
question embeddings. Each example becomes one row whose context holds its own oracle passage(s)
plus the passages of other examples from its passage cluster and from its question cluster, and
whose conversation asks their questions too:

- members are ranked by similarity to the example (the inner product of passage vectors for
  passage-cluster members, of question vectors for question-cluster members, the larger when a
  member is in both), then by id; they are added in that order, each with its passages (a passage
  already in the context is not repeated) and its QA pair, while the whole conversation, under the
  trained model's chat template, fits the budget. A member is never cut: the first that does not
  fit ends the list.
- the documents are put in a seeded random order (``oracle_positions`` says where the example's
  own passages went); the QA pairs are asked in a seeded random order (``qa_source_ids``), each a
  user turn answered by an assistant turn.

An example whose own passages and QA pair alone exceed the budget is rejected
(``oracle_over_budget``). Everything is a function of the inputs and the seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragsft_assets.ids import derived_id, item_np_rng
from ragsft_assets.long_context.raft import (
    PROMPT_TASK,
    ChatTokenCounter,
    QAExample,
    RaftOutput,
    answer_for,
    documents_block,
    oracle_over_budget,
    passage_id,
)
from ragsft_assets.prompts import load_prompt

VARIANT = "clustered"
STAGE_KMEANS = "clustered_kmeans"
STAGE_ORDER = "clustered_order"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Budget, cluster count (0: about one cluster per ``cluster_size`` examples) and seed."""

    budget_tokens: int = 32_768
    n_clusters: int = 0
    cluster_size: int = 8
    seed: int = 0
    lang: str = "en"


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def kmeans_labels(vectors: np.ndarray, n_clusters: int, seed: int) -> np.ndarray:
    """Seeded k-means labels (scikit-learn, k-means++ init, 10 restarts, float64 for stability)."""
    from sklearn.cluster import KMeans

    n = vectors.shape[0]
    k = max(1, min(n_clusters, n))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    # The seed of the draw comes from (seed, stage): the same inputs give the same clusters.
    state = int(item_np_rng(seed, STAGE_KMEANS, "all").integers(0, 2**31 - 1))
    km = KMeans(n_clusters=k, n_init=10, random_state=state)
    return km.fit_predict(vectors.astype(np.float64)).astype(np.int64)


def conversation(system_template: str, passages: Sequence[str], qa: Sequence[tuple[str, str]]) -> list[dict]:
    messages = [{"role": "system", "content": system_template.format(documents=documents_block(passages))}]
    for q, a in qa:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages


def clustered_examples(
    examples: Sequence[QAExample],
    passage_vectors: np.ndarray,
    question_vectors: np.ndarray,
    counter: ChatTokenCounter,
    config: ClusterConfig = ClusterConfig(),
    *,
    passage_keys: dict[str, str] | None = None,
    question_keys: Sequence[str] | None = None,
) -> tuple[RaftOutput, dict[str, np.ndarray]]:
    """Variant 3's rows (see the module docstring) and both label arrays (``passage``, ``question``).

    Args:
        examples: the examples, in a fixed order (by id).
        passage_vectors: one vector per example (its oracle passages' mean), row-aligned.
        question_vectors: one vector per example (its question's embedding), row-aligned.
        counter: the trained model's token counter.
        config: budget, clusters, seed.
        passage_keys: passage id -> embedding cache key (lineage).
        question_keys: per example, its question's embedding cache key (lineage).
    """
    n = len(examples)
    prompt = load_prompt(PROMPT_TASK, config.lang)
    out = RaftOutput()
    if n == 0:
        return out, {"passage": np.zeros(0, np.int64), "question": np.zeros(0, np.int64)}
    pv, qv = _normalise(passage_vectors.astype(np.float64)), _normalise(question_vectors.astype(np.float64))
    k = config.n_clusters or max(1, round(n / max(1, config.cluster_size)))
    labels = {"passage": kmeans_labels(pv, k, config.seed), "question": kmeans_labels(qv, k, config.seed + 1)}
    vecs = {"passage": pv, "question": qv}
    members_of = {
        kind: {c: np.flatnonzero(lab == c) for c in np.unique(lab).tolist()} for kind, lab in labels.items()
    }
    ids = [e.id for e in examples]
    qa_cost = counter.count_texts([f"{e.question}\n{e.answer}\n" for e in examples])
    doc_cost = {
        passage_id(p): c
        for e in examples
        for p, c in zip(
            e.passages, counter.count_texts([f"Document 000:\n{p}\n\n" for p in e.passages]), strict=True
        )
    }
    for i, ex in enumerate(examples):
        own = list(dict.fromkeys(ex.passages))
        base = counter.count(conversation(prompt.text, own, [(ex.question, ex.answer)]))
        if base > config.budget_tokens:
            out.rejections.append(oracle_over_budget(ex.id, base, config.budget_tokens))
            continue
        score: dict[int, float] = {}
        for kind in ("passage", "question"):
            # similarities within the cluster only: memory stays O(cluster), not O(n^2)
            js = members_of[kind][int(labels[kind][i])]
            sims = np.round(vecs[kind][js] @ vecs[kind][i], 6)
            for j, sim in zip(js.tolist(), sims.tolist(), strict=True):
                if j != i:
                    score[j] = max(score.get(j, -np.inf), float(sim))
        ranked = sorted(score, key=lambda j: (-score[j], ids[j]))
        members: list[int] = []
        total, seen = base, {passage_id(p) for p in own}
        for j in ranked:
            new = [p for p in dict.fromkeys(examples[j].passages) if passage_id(p) not in seen]
            cost = qa_cost[j] + sum(doc_cost[passage_id(p)] for p in new)
            if total + cost > config.budget_tokens:
                break
            members.append(j)
            total += cost
            seen.update(passage_id(p) for p in new)
        rng_id = ex.id
        while True:  # the estimate is not exact at boundaries: drop the last member until it fits
            docs: list[tuple[str, int]] = [(p, i) for p in own]  # (text, example that brought it)
            have = {passage_id(p) for p in own}
            for j in members:
                for p in dict.fromkeys(examples[j].passages):
                    if passage_id(p) not in have:
                        have.add(passage_id(p))
                        docs.append((p, j))
            rng = item_np_rng(config.seed, STAGE_ORDER, rng_id)
            doc_order = rng.permutation(len(docs)).tolist()
            qa_members = [i, *members]
            qa_order = rng.permutation(len(qa_members)).tolist()
            placed = [docs[d] for d in doc_order]
            asked = [qa_members[q] for q in qa_order]
            shown = [p for p, _ in placed]
            messages = conversation(
                prompt.text, shown, [(examples[j].question, answer_for(examples[j], shown)) for j in asked]
            )
            n_tokens = counter.count(messages)
            if n_tokens <= config.budget_tokens or not members:
                break
            members.pop()
        if n_tokens > config.budget_tokens:  # cannot happen (base fits); never ship an over-budget row
            out.rejections.append({"id": ex.id, "reason": "over_budget", "detail": f"{n_tokens} tokens"})
            continue
        rid = derived_id(VARIANT, ex.id)
        own_ids = {passage_id(p) for p in own}
        out.rows.append(
            {
                "id": rid,
                "variant": VARIANT,
                "source_id": ex.id,
                "messages": messages,
                "oracle_positions": [k for k, (p, _) in enumerate(placed) if passage_id(p) in own_ids],
                "distractor_ids": [passage_id(p) for p, _ in placed if passage_id(p) not in own_ids],
                "distractor_scores": [score[j] for p, j in placed if passage_id(p) not in own_ids],
                "num_tokens": n_tokens,
                "qa_source_ids": [ids[j] for j in asked],
                "passage_cluster": int(labels["passage"][i]),
                "question_cluster": int(labels["question"][i]),
            }
        )
        pids = [passage_id(p) for p, _ in placed]
        out.lineage.append(
            {
                "id": rid,
                "source_id": ex.id,
                "passage_ids": pids,
                "oracle_passage_ids": [passage_id(p) for p in ex.passages],
                "embedding_keys": [passage_keys[p] for p in pids] if passage_keys else [],
                "oracle_kept": True,
                "qa_source_ids": [ids[j] for j in asked],
                "question_embedding_keys": [question_keys[j] for j in asked] if question_keys else [],
            }
        )
    return out, labels
