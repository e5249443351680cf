"""``ragsft bench release``: the release path at full scale, in bounded memory.

Generates the upstream assets of one partition in the layout the release reads (``abstracts``
per split, ``bridge_pairs``, ``question_drafts``, ``multihop_questions``, ``rag_prompts`` and
``rag_sft`` per split, the ledger of ``question_checks`` and ``ablation_verdicts`` and the LLM
cache behind its keys), by default 800,000 abstracts and 100,000 questions (200,000 ``rag_sft``
examples: each question's answerable example and its twin), then runs the real release steps
(``build_release``, ``write_card``, ``write_manifests``: data files, decisions, lineage, card
statistics and plots, manifests) in a child process that does nothing else, and reports that
process's peak RSS (its ``VmHWM``; see ``_peak_mb``) and times. Bar: peak RSS under 2 GiB. ``ragsft verify`` must pass.

The generated shapes follow the asset schemas and real sizes: abstract texts are 3-8 real
sentences of the sample snapshot and frwiki records (about 100 characters each), 2-14 links each,
questions with 10 context paragraphs (2 gold, 8 distractors of the same split) holding those
documents' sentences; the ``rag_sft`` prompts hold the real system message around those
paragraphs as OpenRAG blocks, whose filenames the citation config's lineage parses. Everything
is generated column-wise with NumPy and Arrow (ids by DuckDB's SHA-256), never row by row in
Python.

``ragsft bench release_unsorted`` is the same run with every upstream file's rows reversed (ids
descending): no data file can then stream through in the assets' order, and each is sorted
(``stream.write_sorted``: DuckDB ranks the keys, the rows go through bucket files on disk). Same bar;
its data files must be byte-identical to those of the sorted run (``test_bench_release``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragsft_assets import published_configs
from ragsft_assets.bench import machine_values
from ragsft_assets.storage import PARQUET_OPTIONS

PARTITION = "bench.fr"
ABSTRACTS = 800_000
QUESTIONS_PER_ABSTRACT = 1 / 8  # 100,000 questions over 800,000 abstracts
RSS_BAR_MB = 2048
SPLITS = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
CONTEXT = 10  # paragraphs per question: 2 gold + 8 distractors
CHUNK = 100_000  # abstracts generated and written per row group
RAG_SFT_CHUNK = 20_000  # rag_sft examples per row group (each holds ~7 KB of prompt text, twice)
SEED = 20260731
MODEL = {"backend": "vllm", "model": "bench/model", "weights_sha256": "0" * 64}


def _write(table: pa.Table, path: Path) -> None:
    from ragsft_assets.storage import write_parquet

    write_parquet(table, path)


def _sql_ids(con: duckdb.DuckDBPyConnection, expr: str, **columns: pa.Array) -> pa.Array:
    """One id per row of ``columns`` (an SQL expression over them, e.g. ``lineage.derived_id_sql``)."""
    con.register("bench_cols", pa.table(columns))
    try:
        return con.sql(f"SELECT {expr} AS v FROM bench_cols").to_arrow_table()["v"].combine_chunks()
    finally:
        con.unregister("bench_cols")


def _lists(offsets: np.ndarray, values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)])


def _pool() -> tuple[pa.Array, pa.Array]:
    """Real sentences (sample snapshot + frwiki records) and the words they are made of."""
    from ragsft_assets.bench.corpus import load_material

    sentences = sorted({s for s, _ in load_material().sentences})
    words = sorted({w.strip(",.;:()«»") for s in sentences for w in s.split() if len(w) > 3} - {""})
    return pa.array(sentences), pa.array(words)


def generate(root: Path, n_abstracts: int, n_questions: int, seed: int = SEED) -> dict[str, int]:
    """Write the partition's upstream assets and the LLM cache under ``root`` (a RAGSFT_HOME)."""
    from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA
    from ragsft_assets.corpus.bridge_pairs import BRIDGE_PAIRS_SCHEMA
    from ragsft_assets.ledger import LEDGER_SCHEMA
    from ragsft_assets.multihop.generation import DRAFTS_SCHEMA
    from ragsft_assets.multihop.hotpot_format import MULTIHOP_SCHEMA
    from ragsft_assets.release.lineage import derived_id_sql, doc_id_sql
    from ragsft_assets.storage import asset_path

    rng = np.random.default_rng(seed)
    assets = root / "assets"
    sentences, words = _pool()
    con = duckdb.connect()
    # Titles "<word> <word> <n>" (unique), their ids as the corpus derives them (SHA-256 of the title).
    w = words.take(pa.array(rng.integers(0, len(words), 2 * n_abstracts)))
    titles = pc.binary_join_element_wise(
        w.slice(0, n_abstracts), w.slice(n_abstracts), pa.array(np.arange(n_abstracts)).cast(pa.string()), " "
    )
    doc_ids = _sql_ids(con, doc_id_sql("t"), t=titles)
    bounds = np.round(np.cumsum([0] + [share for _, share in SPLITS]) * n_abstracts).astype(int)
    q_bounds = np.round(np.cumsum([0] + [share for _, share in SPLITS]) * n_questions).astype(int)
    pairs_parts, drafts_parts, checks, judges = [], [], [], []
    for s, (split, _) in enumerate(SPLITS):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        # Rows in id order (the assets write sorted by id): local row j is global document idx[j].
        idx = lo + np.argsort(
            np.asarray(doc_ids.slice(lo, hi - lo).to_numpy(zero_copy_only=False)), kind="stable"
        )
        m = len(idx)
        n_sent = rng.integers(3, 9, m)
        sent_off = _offsets(n_sent)
        sent_pick = rng.integers(0, len(sentences), int(sent_off[-1]))
        # Every draw of the split is made before it is cut into row groups: the inputs do not depend
        # on CHUNK.
        n_links_all = rng.integers(2, 15, m)
        link_off = _offsets(n_links_all)
        targets_all = rng.integers(0, n_abstracts, int(link_off[-1]))
        link_sent_all = rng.integers(0, 1 << 30, int(link_off[-1])) % np.repeat(n_sent, n_links_all)
        revisions = rng.integers(100_000_000, 1_200_000_000, m)
        path = asset_path(PARTITION, "abstracts", split, assets)
        path.parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(path, ABSTRACTS_SCHEMA, **PARQUET_OPTIONS) as writer:
            for c0 in range(0, m, CHUNK):
                c1 = min(m, c0 + CHUNK)
                g = pa.array(idx[c0:c1])
                sl = _lists(
                    sent_off[c0 : c1 + 1] - sent_off[c0],
                    sentences.take(pa.array(sent_pick[sent_off[c0] : sent_off[c1]])),
                )
                n_links = n_links_all[c0:c1]
                targets = pa.array(targets_all[link_off[c0] : link_off[c1]])
                link_sent = link_sent_all[link_off[c0] : link_off[c1]]
                target_titles = titles.take(targets)
                links = pa.StructArray.from_arrays(
                    [
                        target_titles,
                        doc_ids.take(targets),
                        target_titles,
                        pa.array(link_sent.astype(np.int32)),
                    ],
                    fields=list(ABSTRACTS_SCHEMA.field("links").type.value_type),
                )
                t = titles.take(g)
                chunk = pa.table(
                    {
                        "id": doc_ids.take(g),
                        "title": t,
                        "identifier": pa.array(idx[c0:c1] + 1000),
                        "url": pc.binary_join_element_wise(
                            "https://fr.wikipedia.org/wiki/", pc.replace_substring(t, " ", "_"), ""
                        ),
                        "revision": pa.array(revisions[c0:c1]),
                        "qid": pc.binary_join_element_wise(
                            "Q", pa.array(idx[c0:c1] + 7).cast(pa.string()), ""
                        ),
                        "text": pc.binary_join(sl, " "),
                        "sentences": sl,
                        "links": _lists(_offsets(n_links), links),
                        "split": pa.array([split] * (c1 - c0)),
                    },
                    schema=ABSTRACTS_SCHEMA,
                )
                writer.write_table(chunk)
        # Questions of this split: a, b and 8 distractors drawn from the split's documents.
        q = int(q_bounds[s + 1] - q_bounds[s])
        a = rng.integers(0, m, q)
        b = (a + 1 + rng.integers(0, m - 1, q)) % m
        ids_s, titles_s = doc_ids.take(pa.array(idx)), titles.take(pa.array(idx))
        a_id, b_id, a_t, b_t = (
            ids_s.take(pa.array(a)),
            ids_s.take(pa.array(b)),
            titles_s.take(pa.array(a)),
            titles_s.take(pa.array(b)),
        )
        qid = _sql_ids(con, derived_id_sql("'question'", "a", "b", "0"), a=a_id, b=b_id)
        order = np.argsort(np.asarray(qid.to_numpy(zero_copy_only=False)), kind="stable")
        a, b = a[order], b[order]
        a_id, b_id, a_t, b_t, qid = (x.take(pa.array(order)) for x in (a_id, b_id, a_t, b_t, qid))
        # Distractors: other documents of the split, never a or b (values past min, max(a, b) shift up).
        lo_ab, hi_ab = np.minimum(a, b)[:, None], np.maximum(a, b)[:, None]
        d = rng.integers(0, m - 2, (q, CONTEXT - 2))
        d = d + (d >= lo_ab)
        d = d + (d >= hi_ab)
        docs = np.concatenate([a[:, None], b[:, None], d], axis=1)
        docs = np.take_along_axis(docs, np.argsort(rng.random((q, CONTEXT)), axis=1), axis=1).ravel()
        lengths = n_sent[docs]
        starts = sent_off[docs]
        flat = np.repeat(starts - _offsets(lengths)[:-1], lengths) + np.arange(int(lengths.sum()))
        ctx_sent = _lists(_offsets(lengths), sentences.take(pa.array(sent_pick[flat])))
        ctx_off = np.arange(0, q * CONTEXT + 1, CONTEXT)
        a_sent = rng.integers(0, 1 << 30, q) % n_sent[a]
        two = np.arange(0, 2 * q + 1, 2)
        gold_titles = pa.concat_arrays([a_t, b_t]).take(
            pa.array(np.stack([np.arange(q), q + np.arange(q)], 1).ravel())
        )
        question = pc.binary_join_element_wise(
            "Quel sujet, lié à ",
            a_t,
            ", ",
            pc.utf8_slice_codeunits(sentences.take(pa.array(rng.integers(0, len(sentences), q))), 0, 50),
            " ?",
            "",
        )
        _write(
            pa.table(
                {
                    "id": qid,
                    "question": question,
                    "answer": b_t,
                    "type": pa.array(["bridge"] * q),
                    "level": pa.array(["hard"] * q),
                    "supporting_facts": pa.StructArray.from_arrays(
                        [
                            _lists(two, gold_titles),
                            _lists(
                                two,
                                pa.array(np.stack([a_sent, np.zeros(q, int)], 1).ravel().astype(np.int32)),
                            ),
                        ],
                        fields=list(MULTIHOP_SCHEMA.field("supporting_facts").type),
                    ),
                    "context": pa.StructArray.from_arrays(
                        [_lists(ctx_off, titles_s.take(pa.array(docs))), _lists(ctx_off, ctx_sent)],
                        fields=list(MULTIHOP_SCHEMA.field("context").type),
                    ),
                    "split": pa.array([split] * q),
                },
                schema=MULTIHOP_SCHEMA,
            ),
            asset_path(PARTITION, "multihop_questions", split, assets),
        )
        _write_rag_sft(
            con, assets, split, qid, question, a, b, a_t, b_t, docs, titles_s, pc.binary_join(ctx_sent, " ")
        )
        pid = _sql_ids(con, derived_id_sql("'bridge_pair'", "a", "b"), a=a_id, b=b_id)
        pairs_parts.append(
            pa.table(
                {
                    "id": pid, "a_id": a_id, "a_title": a_t, "b_id": b_id, "b_title": b_t, "alias": b_t,
                    "a_sentence": pa.array(a_sent.astype(np.int32)), "split": pa.array([split] * q),
                    "draw": pa.array(lo + np.arange(q, dtype=np.int64)),  # bridge_pairs' seeded order
                },
                schema=BRIDGE_PAIRS_SCHEMA,
            )
        )  # fmt: skip
        for k in (0, 1):  # two drafts per pair: the first kept by the checks, the second dropped
            did = (
                qid if k == 0 else _sql_ids(con, derived_id_sql("'question'", "a", "b", "1"), a=a_id, b=b_id)
            )
            key = _sql_ids(con, "sha256(concat_ws(chr(31), 'gen', q))", q=did)
            raw = pc.binary_join_element_wise(
                '{"questions": [{"question": "', question, '", "answer": "', b_t, '"}]}', ""
            )
            drafts_parts.append(
                pa.table(
                    {
                        "id": did, "pair_id": pid, "draft_index": pa.array([k] * q, pa.int32()),
                        "split": pa.array([split] * q), "a_id": a_id, "a_title": a_t, "b_id": b_id,
                        "b_title": b_t, "alias": b_t, "question": question, "answer": b_t,
                        "support_a": _lists(np.arange(q + 1), pa.array(a_sent.astype(np.int32))),
                        "support_b": _lists(np.arange(q + 1), pa.array(np.zeros(q, np.int32))),
                        "status": pa.array(["ok"] * q), "error": pa.nulls(q, pa.string()), "raw": raw,
                        "cache_key": key, "template_version": pa.array(["tmplgen1"] * q),
                    },
                    schema=DRAFTS_SCHEMA,
                )
            )  # fmt: skip
            checks.append(
                pa.table(
                    {
                        "candidate_id": did,
                        "verdict": pa.array(["kept" if k == 0 else "dropped"] * q),
                        "reason": pa.array(["" if k == 0 else "answer_not_in_b"] * q),
                        "cache_keys": _lists(np.arange(q + 1), key),
                    }
                )
            )
        judge_keys = _sql_ids(
            con, "sha256(concat_ws(chr(31), 'judge', q, CAST(j AS VARCHAR)))",
            q=pa.array(np.repeat(qid.to_numpy(zero_copy_only=False), 4)), j=pa.array(np.tile(np.arange(4), q)),
        )  # fmt: skip
        judges.append(
            pa.table(
                {
                    "candidate_id": qid,
                    "verdict": pa.array(["kept"] * q),
                    "reason": pa.array([""] * q),
                    "cache_keys": _lists(np.arange(0, 4 * q + 1, 4), judge_keys),
                }
            )
        )
    _write(pa.concat_tables(pairs_parts).sort_by("id"), asset_path(PARTITION, "bridge_pairs", "all", assets))
    _write(
        pa.concat_tables(drafts_parts).sort_by("id"), asset_path(PARTITION, "question_drafts", "all", assets)
    )
    n_keys = 0
    for stage, parts, detail in (
        ("question_checks", checks, None),
        ("ablation_verdicts", judges, '{"ablations":4}'),
    ):
        t = pa.concat_tables(parts).sort_by("candidate_id")
        n = t.num_rows
        ledger = pa.table(
            {
                "partition": pa.array([PARTITION] * n),
                "product": pa.array(["multihop"] * n),
                "candidate_id": t["candidate_id"],
                "stage": pa.array([stage] * n),
                "verdict": t["verdict"],
                "reason": t["reason"],
                "detail": pa.array([detail] * n, pa.string()),
                "cache_keys": t["cache_keys"],
            },
            schema=LEDGER_SCHEMA,
        )
        _write(ledger, assets / PARTITION / "_ledger" / f"{stage}.parquet")
        n_keys += _fill_cache(root, con, ledger, temperature=0.7 if stage == "question_checks" else 0.0)
    con.close()
    return {"abstracts": n_abstracts, "questions": n_questions, "cache_entries": n_keys}


def _system_frame() -> tuple[str, str]:
    """The real French system message around its documents: the text before and after them."""
    from ragsft_assets.rag_sft.citations import INLINE
    from ragsft_assets.rag_sft.examples import GENERIC, REFUSAL_PHRASES, system_message
    from ragsft_assets.rag_sft.layout import render_documents

    mark = render_documents([("\x00", "\x00")])
    head, tail = system_message([("\x00", "\x00")], "fr", INLINE, GENERIC, REFUSAL_PHRASES["fr"][0]).split(
        mark
    )
    return head, tail


def _numbered_blocks(titles: pa.Array, texts: pa.Array, numbers: np.ndarray) -> pa.Array:
    """One OpenRAG block per document (``rag_sft.layout.BLOCK_TEMPLATE``), column-wise."""
    return pc.binary_join_element_wise(
        "[Source ", pa.array(numbers).cast(pa.string()), "]\n* filename: ", titles,
        "\n\n[CHUNK_START]\n\n", texts, "\n\n[CHUNK_END]", "",
    )  # fmt: skip


def _write_rag_sft(
    con: duckdb.DuckDBPyConnection,
    assets: Path,
    split: str,
    qid: pa.Array,
    question: pa.Array,
    a: np.ndarray,
    b: np.ndarray,
    a_t: pa.Array,
    b_t: pa.Array,
    docs: np.ndarray,
    titles_s: pa.Array,
    doc_texts: pa.Array,
) -> None:
    """The ``rag_prompts`` and ``rag_sft`` split files of one split: per question an answerable
    example over its 10 paragraphs and its unanswerable twin without gold document a (9 paragraphs),
    with the real system message around OpenRAG blocks (the lineage parses their filenames).

    Rows are sorted by id, as the assets write them, and built ``RAG_SFT_CHUNK`` at a time in that order
    (row r < q: question r's answerable example, else question r - q's twin), so the prompts'
    gigabyte of text is never all in memory.
    """
    from ragsft_assets.rag_sft.examples import ANSWERABLE, PROMPT_SCHEMA, REFUSAL_PHRASES, UNANSWERABLE
    from ragsft_assets.rag_sft.formatting import SFT_SCHEMA
    from ragsft_assets.rag_sft.layout import SEPARATOR
    from ragsft_assets.release.lineage import derived_id_sql
    from ragsft_assets.storage import asset_path

    q = len(qid)
    grid = docs.reshape(q, CONTEXT)
    head, tail = _system_frame()
    refusal = REFUSAL_PHRASES["fr"][0]
    ids_all = pa.concat_arrays(
        [
            _sql_ids(con, derived_id_sql("'rag_example'", "q", f"'{kind}'"), q=qid)
            for kind in (ANSWERABLE, UNANSWERABLE)
        ]
    )
    pair = _sql_ids(con, derived_id_sql("'pair'", "q"), q=qid)
    order = np.argsort(np.asarray(ids_all.to_numpy(zero_copy_only=False)), kind="stable")
    paths = [asset_path(PARTITION, asset, split, assets) for asset in ("rag_prompts", "rag_sft")]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    with (
        pq.ParquetWriter(paths[0], PROMPT_SCHEMA, **PARQUET_OPTIONS) as prompts_out,
        pq.ParquetWriter(paths[1], SFT_SCHEMA, **PARQUET_OPTIONS) as sft_out,
    ):
        for c0 in range(0, 2 * q, RAG_SFT_CHUNK):
            rows = order[c0 : c0 + RAG_SFT_CHUNK]
            n = len(rows)
            qi, twin = rows % q, rows >= q
            g = grid[qi]
            keep = ~(twin[:, None] & (g == a[qi][:, None]))  # the twin loses gold a
            n_docs = keep.sum(axis=1)
            off = _offsets(n_docs)
            flat = pa.array((qi[:, None] * CONTEXT + np.arange(CONTEXT))[keep])  # positions in doc_texts
            titles_k = titles_s.take(pa.array(g[keep]))
            texts_k = doc_texts.take(flat)
            blocks = _numbered_blocks(titles_k, texts_k, np.cumsum(keep, axis=1)[keep])
            system = pc.binary_join_element_wise(
                head, pc.binary_join(_lists(off, blocks), SEPARATOR), tail, ""
            )
            b_pos = (g == b[qi][:, None]).argmax(axis=1)  # answerable rows keep all 10: number = pos + 1
            cited = pc.binary_join_element_wise(
                b_t.take(pa.array(qi)), " <ref id=\"", pa.array(b_pos + 1).cast(pa.string()), "\">",
                pc.utf8_slice_codeunits(doc_texts.take(pa.array(qi * CONTEXT + b_pos)), 0, 80), "</ref>", "",
            )  # fmt: skip
            is_twin = pa.array(twin)
            answer = pc.if_else(is_twin, refusal, cited)
            both = np.stack([np.arange(n), n + np.arange(n)], axis=1)
            gold = _lists(
                _offsets(2 - twin),
                pa.concat_arrays([a_t.take(pa.array(qi)), b_t.take(pa.array(qi))]).take(
                    pa.array(both[np.stack([~twin, np.ones(n, bool)], axis=1)])
                ),
            )
            removed = _lists(_offsets(twin.astype(int)), a_t.take(pa.array(qi[twin])))
            q_k = question.take(pa.array(qi))
            contents = pa.concat_arrays([system, q_k, answer]).take(
                pa.array(np.stack([np.arange(n), n + np.arange(n), 2 * n + np.arange(n)], 1).ravel())
            )
            messages = _lists(
                np.arange(0, 3 * n + 1, 3),
                pa.StructArray.from_arrays(
                    [pa.array(np.tile(["system", "user", "assistant"], n)), contents],
                    fields=list(SFT_SCHEMA.field("messages").type.value_type),
                ),
            )

            def const(value: object, type_: pa.DataType | None = None, n: int = n) -> pa.Array:
                return pa.array([value] * n, type_ or pa.string())

            ids_k, pair_k = ids_all.take(pa.array(rows)), pair.take(pa.array(qi))
            chunks_total = pa.array(n_docs.astype(np.int32))
            prompts_out.write_table(
                pa.table(
                    {
                        "id": ids_k, "pair_id": pair_k, "question_id": qid.take(pa.array(qi)),
                        "kind": pc.if_else(is_twin, UNANSWERABLE, ANSWERABLE), "twin_kind": const("one"),
                        "split": const(split), "language": const("fr"), "question": q_k,
                        "answer": b_t.take(pa.array(qi)), "titles": _lists(off, titles_k),
                        "paragraphs": _lists(off, texts_k), "gold_titles": gold, "removed_titles": removed,
                        "citation_style": const("inline"), "refusal_rule": const("generic"),
                        "refusal_phrase": const(refusal), "system": system, "user": q_k,
                        "chunks_total": chunks_total, "distractors_total": const(8, pa.int32()),
                        "distractors_dropped": const(0, pa.int32()),
                    },
                    schema=PROMPT_SCHEMA,
                )
            )  # fmt: skip
            sft_out.write_table(
                pa.table(
                    {
                        "id": ids_k, "pair_id": pair_k, "messages": messages, "supporting_facts_titles": gold,
                        "chunks_total": chunks_total, "split": const(split),
                    },
                    schema=SFT_SCHEMA,
                )
            )  # fmt: skip


def _fill_cache(root: Path, con: duckdb.DuckDBPyConnection, ledger: pa.Table, temperature: float) -> int:
    """The cached calls behind the ledger's keys, in the LLM cache's own database (bulk insert)."""
    from ragsft_assets.home import llm_cache_dir
    from ragsft_assets.llm.cache import KEY_FORMAT, LLMCache, canonical_json
    from ragsft_assets.llm.types import SamplingParams
    from ragsft_assets.sql import sql_literal

    cache = LLMCache(llm_cache_dir(root))  # creates the schema
    cache.close()
    head = canonical_json(
        {
            "format": KEY_FORMAT,
            "json_schema": None,
            "model": MODEL,
            "params": SamplingParams(temperature=temperature).to_dict(),
        }
    ).decode()[:-1]
    con.register("bench_ledger", ledger)
    rows = con.sql(
        "SELECT k, " + sql_literal(head) + ' || \',"messages":[{"content":"\' || k || '
        '\'","role":"user"}],"template_version":"tmpl0001"}\' AS req '
        "FROM (SELECT DISTINCT unnest(cache_keys) AS k FROM bench_ledger) ORDER BY k"
    ).fetchall()
    con.unregister("bench_ledger")
    db = sqlite3.connect(llm_cache_dir(root) / "calls.sqlite")
    try:
        with db:
            db.executemany(
                "INSERT OR IGNORE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    (k, MODEL["backend"], MODEL["model"], MODEL["weights_sha256"], "tmpl0001", req.encode(),
                     b'{"text":"IMPOSSIBLE"}', 300, 20, 0.0)
                    for k, req in rows
                ),
            )  # fmt: skip
    finally:
        db.close()
    return len(rows)


def reverse_rows(assets: Path) -> int:
    """Rewrite every upstream file under ``assets`` that has an ``id`` column with its rows in reverse
    order, one row group at a time (bounded memory; the ledger stays as it is). Returns the files."""
    from ragsft_assets.storage import LEDGER_DIR

    files = sorted(f for f in assets.rglob("*.parquet") if LEDGER_DIR not in f.parts)
    done = 0
    for path in files:
        source = pq.ParquetFile(path)
        if "id" not in source.schema_arrow.names:
            continue
        tmp = path.with_name(path.name + ".reversed")
        with pq.ParquetWriter(tmp, source.schema_arrow, **PARQUET_OPTIONS) as out:
            for g in reversed(range(source.num_row_groups)):
                group = source.read_row_group(g)
                out.write_table(group.take(pa.array(np.arange(group.num_rows - 1, -1, -1))))
        source.close()
        tmp.replace(path)
        done += 1
    return done


def build_child(home: str) -> dict[str, Any]:
    """The release steps alone (run in the child process): times and this process's peak RSS."""
    from ragsft_assets.release import build

    root = Path(home)
    folder = root / "releases" / PARTITION
    times = {}
    t0 = time.perf_counter()
    built = build.build_release(root / "assets", PARTITION, folder)
    times["build_s"] = time.perf_counter() - t0
    peaks = {"build": _peak_mb()}  # max RSS so far: which step set the peak
    t1 = time.perf_counter()
    build.write_card(folder, PARTITION, {})
    times["card_s"] = time.perf_counter() - t1
    peaks["card"] = _peak_mb()
    t2 = time.perf_counter()
    build.write_manifests(folder, PARTITION, root / "assets", root / "snapshots", run_config={"seed": SEED})
    times["manifests_s"] = time.perf_counter() - t2
    peaks["manifests"] = _peak_mb()
    return {
        **times,
        "rows": built.rows,
        "lineage_rows": built.lineage_rows,
        "decisions": built.decisions,
        "peak_rss_mb": peaks["manifests"],
        "peak_step": next(step for step, mb in peaks.items() if mb == peaks["manifests"]),
    }


def _peak_mb() -> float:
    """This process's own peak RSS in MiB: ``VmHWM`` of its address space.

    Not ``getrusage``'s ``ru_maxrss`` where ``/proc`` has it: Linux carries the high-water mark of
    the address space replaced by ``exec`` into ``ru_maxrss``, so a child forked from the generator
    (1.3 GiB) would report the parent's footprint, not the build's.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_child(home: Path, module: str, function: str, what: str) -> tuple[dict[str, Any], float]:
    """``module.function(home)`` in a fresh Python (its own peak RSS, see ``_peak_mb``), with
    ``RAGSFT_HOME=home``; returns the JSON it prints last and the child's wall seconds.

    Raises:
        RuntimeError: the child failed; the message holds ``what`` and the end of its stderr.
    """
    code = f"import json; from {module} import {function}; print(json.dumps({function}({str(home)!r})))"
    env = {**os.environ, "RAGSFT_HOME": str(home)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


# The assets whose configs' rows the bench counts (``rows_<config>``): the questions, the corpus and
# the citation config's SFT examples; their names come from published_configs.
COUNTED_ASSETS = ("multihop_questions", "abstracts", "rag_sft")


def rows_key(asset: str) -> str:
    """The result key of the row count of the config that ships ``asset``: ``rows_<its name>``."""
    return f"rows_{published_configs.by_asset(asset).name}"


def verdict(values: dict[str, Any], rss_bar_mb: float = RSS_BAR_MB) -> bool:
    """Passed: peak RSS under the bar, the release verifies, every product row has its lineage row."""
    rows = {a: values[rows_key(a)] for a in COUNTED_ASSETS}
    return (
        values["peak_rss_mb"] < rss_bar_mb
        and bool(values["verify"])
        and values["lineage_complete"]
        and rows["multihop_questions"] == values["questions"]
        and rows["abstracts"] == values["abstracts"]
        and rows["rag_sft"] == 2 * values["questions"]
    )


def run(
    size: int | None = None,
    workdir: str | None = None,
    rss_bar_mb: float = RSS_BAR_MB,
    upstream_sorted: bool = True,
) -> dict[str, object]:
    """Generate, build the release in a child process, verify; returns the ordered key=value results.

    Args:
        size: abstracts (default 800,000); questions are an eighth of it.
        workdir: the scratch home (default: a temp folder, removed after).
        rss_bar_mb: the peak-RSS bar of the child that builds the release.
        upstream_sorted: False reverses every upstream file's rows (see :func:`reverse_rows`), so the
            release sorts each data file (``stream.write_sorted``) instead of streaming it.
    """
    from ragsft_assets.release.verify import verify_release

    n_abstracts = size or ABSTRACTS
    n_questions = max(3, round(n_abstracts * QUESTIONS_PER_ABSTRACT))
    home = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-release-"))
    try:
        t0 = time.perf_counter()
        generated = generate(home, n_abstracts, n_questions)
        reversed_files = 0 if upstream_sorted else reverse_rows(home / "assets" / PARTITION)
        gen_s = time.perf_counter() - t0
        print(f"generated {n_abstracts} abstracts, {n_questions} questions in {gen_s:.1f}s", flush=True)
        child, wall = run_child(home, "ragsft_assets.bench.release", "build_child", "release build")
        folder = home / "releases" / PARTITION
        report = verify_release(folder)
        size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
        print(
            f"release built in {wall:.1f}s (build {child['build_s']:.1f}s, card {child['card_s']:.1f}s, "
            f"manifests {child['manifests_s']:.1f}s), peak RSS {child['peak_rss_mb']:.0f} MiB, {size_mb:.0f} MiB on disk",
            flush=True,
        )
        rows = {c: sum(s.values()) for c, s in child["rows"].items()}
        values: dict[str, Any] = {
            "abstracts": n_abstracts,
            "questions": n_questions,
            "upstream_sorted": upstream_sorted,
            "reversed_files": reversed_files,
            "peak_rss_mb": round(child["peak_rss_mb"]),
            "peak_step": child["peak_step"],
            "rss_bar_mb": rss_bar_mb,
            "release_s": round(wall, 1),
            "build_s": round(child["build_s"], 1),
            "card_s": round(child["card_s"], 1),
            "manifests_s": round(child["manifests_s"], 1),
            "generate_s": round(gen_s, 1),
            "release_mb": round(size_mb),
            **{rows_key(a): rows.get(published_configs.by_asset(a).name, 0) for a in COUNTED_ASSETS},
            "decisions": child["decisions"],
            "cache_entries": generated["cache_entries"],
            "lineage_complete": child["lineage_rows"] == rows,
            "verify": report.ok,
        }
        values["passed"] = verdict(values, rss_bar_mb)
        return {**values, **machine_values("matplotlib")}
    finally:
        if not workdir:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":  # python -m ragsft_assets.bench.release [size]
    from ragsft_assets.cli.bench import format_line

    print(format_line("release", run(int(sys.argv[1]) if len(sys.argv) > 1 else None)))
