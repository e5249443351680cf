"""A small, coherent partition written with ArtifactStore, for the release tests.

It follows the table contracts (briefs/tables.md): `abstracts` (3 splits), `bridge_pairs`,
`multihop_questions` (hotpot_qa layout, 3 splits), `rag_sft` (rows id, pair_id, messages,
supporting_facts_titles, chunks_total, split), ledger rows of several stages with LLM cache keys,
and the cached calls behind those keys, inserted with ``ragsft_assets.llm.cache.LLMCache.put`` into
``$RAGSFT_HOME/llm_cache`` (and returned as a dict).
"""

from __future__ import annotations

import pyarrow as pa

from ragsft_assets import ids
from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA
from ragsft_assets.ledger import DROPPED, KEPT, Decision, ledger_table
from ragsft_assets.multihop.hotpot_format import MULTIHOP_SCHEMA
from ragsft_assets.resources.store import ArtifactStore

PARTITION = "sample.fr"
QUESTIONS_SCHEMA = MULTIHOP_SCHEMA
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
SFT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("pair_id", pa.string()),
        ("messages", pa.list_(MESSAGE)),
        ("supporting_facts_titles", pa.list_(pa.string())),
        ("chunks_total", pa.int32()),
        ("split", pa.string()),
    ]
)
SPLIT_OF = ["train"] * 6 + ["validation"] * 4 + ["test"] * 4  # 14 documents


def title(i: int) -> str:
    return f"Article {i}"


def sentences(i: int, variant: int = 0) -> list[str]:
    return [f"Article {i} est un sujet numéro {i}.", f"Il est lié à Article {(i + 1) % 14} (v{variant})."]


def write_world(store: ArtifactStore, partition: str = PARTITION, variant: int = 0) -> dict[str, dict]:
    """Write every upstream table of a partition; returns the cached calls ``{cache_key: entry}``.

    ``variant`` changes one abstract's text (an input change that must show in the manifests).
    """
    docs = []
    for i in range(14):
        sents = sentences(i, variant if i == 0 else 0)
        tgt = title((i + 1) % 14)
        docs.append(
            {
                "id": ids.doc_id(title(i)),
                "title": title(i),
                "identifier": 1000 + i,
                "url": f"https://fr.wikipedia.org/wiki/Article_{i}",
                "revision": 500000 + i if i != 13 else None,
                "qid": f"Q{i}" if i % 2 == 0 else None,
                "text": " ".join(sents),
                "sentences": sents,
                "links": [{"target_title": tgt, "target_id": ids.doc_id(tgt), "anchor": tgt, "sentence": 1}],
                "split": SPLIT_OF[i],
            }
        )
    store.write_splits(
        pa.Table.from_pylist(sorted(docs, key=lambda d: d["id"]), ABSTRACTS_SCHEMA), partition, "abstracts"
    )

    # Bridge pairs (a -> a+1) within each split; questions from draft indexes 0 and 1.
    pairs, questions, sft, cache = [], [], [], {}
    check_rows, judge_rows, rag_rows = [], [], []
    by_split: dict[str, list[int]] = {}
    for i, s in enumerate(SPLIT_OF):
        by_split.setdefault(s, []).append(i)
    for split, members in by_split.items():
        for a, b in zip(members[:-1], members[1:], strict=True):
            a_id, b_id = ids.doc_id(title(a)), ids.doc_id(title(b))
            pid = ids.derived_id("bridge_pair", a_id, b_id)
            pairs.append(
                {
                    "id": pid,
                    "a_id": a_id,
                    "a_title": title(a),
                    "b_id": b_id,
                    "b_title": title(b),
                    "alias": title(b),
                    "a_sentence": 1,
                    "split": split,
                }
            )
            for k in (0, 1):
                qid = ids.question_id(a_id, b_id, k)
                gen_key = ids.derived_id("gen", qid)
                cache[gen_key] = {
                    "request": {"messages": [{"role": "user", "content": f"write {qid}"}]},
                    "response": {"text": f"question {qid}"},
                }
                if k == 1:  # the second draft is dropped by the local checks
                    check_rows.append(Decision(qid, DROPPED, "answer_not_in_b", cache_keys=[gen_key]))
                    continue
                check_rows.append(Decision(qid, KEPT, "", cache_keys=[gen_key]))
                judge_key = ids.derived_id("judge", qid)
                cache[judge_key] = {
                    "request": {"messages": [{"role": "user", "content": f"judge {qid}"}]},
                    "response": {"text": "IMPOSSIBLE"},
                }
                judge_rows.append(Decision(qid, KEPT, "", detail={"ablations": 4}, cache_keys=[judge_key]))
                distractors = [m for m in members if m not in (a, b)][:2]
                ctx = [title(a), title(b)] + [title(m) for m in distractors]
                questions.append(
                    {
                        "id": qid,
                        "question": f"Quel sujet suit celui lié à {title(a)} ?",
                        "answer": f"numéro {b}",
                        "type": "bridge",
                        "level": "hard",
                        "supporting_facts": {"title": [title(a), title(b)], "sent_id": [1, 0]},
                        "context": {"title": ctx, "sentences": [sentences(int(t.split()[1])) for t in ctx]},
                        "split": split,
                    }
                )
                twin = ids.pair_id(qid)
                resp_key = ids.derived_id("response", qid)
                cache[resp_key] = {
                    "request": {"messages": [{"role": "user", "content": f"answer {qid}"}]},
                    "response": {"text": "numéro"},
                }
                rag_rows.append(Decision(twin, KEPT, "", cache_keys=[resp_key]))
                blocks = "\n\n".join(
                    f"[Source {n}]\n* filename: {t}\n\n[CHUNK_START]\n\ntext\n\n[CHUNK_END]"
                    for n, t in enumerate(ctx, 1)
                )
                for kind, gold in (("answerable", [title(a), title(b)]), ("unanswerable", [])):
                    sft.append(
                        {
                            "id": ids.derived_id("rag_example", qid, kind),
                            "pair_id": twin,
                            "messages": [
                                {"role": "system", "content": "Answer from the documents.\n\n" + blocks},
                                {"role": "user", "content": f"Quel sujet suit {title(a)} ?"},
                                {"role": "assistant", "content": f'numéro {b} <ref id="2">Article {b}</ref>'},
                            ],
                            "supporting_facts_titles": gold,
                            "chunks_total": len(ctx),
                            "split": split,
                        }
                    )
    store.write(pa.Table.from_pylist(sorted(pairs, key=lambda r: r["id"])), partition, "bridge_pairs")
    store.write_splits(
        pa.Table.from_pylist(sorted(questions, key=lambda r: r["id"]), QUESTIONS_SCHEMA),
        partition,
        "multihop_questions",
    )
    store.write_splits(
        pa.Table.from_pylist(sorted(sft, key=lambda r: r["id"]), SFT_SCHEMA), partition, "rag_sft"
    )
    store.write_ledger(
        ledger_table(partition, "multihop", "question_checks", check_rows), partition, "question_checks"
    )
    store.write_ledger(
        ledger_table(partition, "multihop", "ablation_verdicts", judge_rows), partition, "ablation_verdicts"
    )
    store.write_ledger(
        ledger_table(partition, "hotpotqa_cite", "rag_verdicts", rag_rows), partition, "rag_verdicts"
    )
    store_in_llm_cache(store, cache)
    return cache


MODEL = {"backend": "double", "model": "scripted-double", "weights_sha256": "0" * 64}


def store_in_llm_cache(store: ArtifactStore, cache: dict[str, dict]) -> None:
    """Insert the calls through the LLM cache module (``LLMCache.put``), as the LLM layer does."""
    from ragsft_assets.home import llm_cache_dir
    from ragsft_assets.llm.cache import LLMCache
    from ragsft_assets.llm.types import SamplingParams

    db = LLMCache(llm_cache_dir(store.home_path))
    try:
        for key, entry in sorted(cache.items()):
            temperature = 0.0 if entry["response"]["text"] == "IMPOSSIBLE" else 0.7
            request = {
                "model": MODEL,
                "params": SamplingParams(temperature=temperature).to_dict(),
                "messages": entry["request"]["messages"],
                "json_schema": None,
                "template_version": "tmpl0001",
            }
            entry["request"] = request
            db.put(key, request, entry["response"])
    finally:
        db.close()
