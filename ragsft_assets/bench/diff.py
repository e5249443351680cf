"""``ragsft bench diff``: ``ragsft diff`` of two full-size releases in bounded memory (issue 39).

Generates two release folders as the release writes them (README header, ``provenance/configs.json``,
data files per split, ``provenance/<config>/lineage.parquet``, ``provenance/decisions.parquet``) for
two snapshots of one language: by default 2,600,000 abstracts (``corpus``: id, title, text,
sentences, qid; the texts 3-8 real sentences of the sample snapshot and frwiki records) and 300,000
questions (``default``: ``_id``, question, answer, supporting facts, 10 context paragraphs holding
their documents' sentences, and the lineage's documents and revisions). The second snapshot
removes 1% of the articles and adds 1%, gives 1% a new revision and text and 0.5% a new text
under the same revision (every question whose context holds one of them changes with it), drops
1% of the questions, lets 1% new ones in, and has the judge decide 2% otherwise. Everything is
DuckDB SQL streamed to Parquet, never Python rows.

Then ``diff_releases`` runs in a child process that does nothing else, and the bench reports its
peak RSS (``VmHWM``, as ``bench release``) and time. Bar: peak RSS under 2 GiB, and the counts equal
to the ones the generation rules give (computed here with NumPy).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ragsft_assets.bench import machine_values
from ragsft_assets.bench.release import run_child
from ragsft_assets.sql import sql_literal

OLD, NEW = "20240901.fr", "20241001.fr"
ABSTRACTS = 2_600_000
QUESTIONS = 300_000
RSS_BAR_MB = 2048
CONTEXT = 10  # paragraphs per question: 2 gold + 8 distractors
SPLITS = (("train", "sx < 8"), ("validation", "sx = 8"), ("test", "sx = 9"))  # sx = index % 10
# The generation rules (index i of an article, k of a question), the same for every size.
IN_OLD, IN_NEW = "{x} % 100 <> 0", "{x} % 100 <> 1"  # 1% added (only new), 1% removed (only old)
REVISED, REWORDED = "i % 100 = 2", "i % 200 = 3"  # new revision and text; new text, same revision
JUDGED = "k % 50 = 7"  # the judge decided otherwise (another verdict detail, a new question text)
MIX = (7919, 104729)  # question k's paragraph p is article (k * 7919 + p * 104729) % n


def _rule(template: str, x: str) -> str:
    return template.format(x=x)


def _setup(con: duckdb.DuckDBPyConnection, n: int) -> None:
    from ragsft_assets.bench.release import _pool

    sentences, _ = _pool()
    con.register("pool_arrow", pa.table({"s": [sentences.to_pylist()], "n": [len(sentences)]}))
    con.execute("CREATE OR REPLACE TABLE pool AS SELECT * FROM pool_arrow")
    con.unregister("pool_arrow")
    # An article's sentences: 3-8 of the pool, drawn from its index (v = 1: its rewritten version).
    con.execute(
        "CREATE OR REPLACE MACRO sents(d, v, s, m) AS list_transform(range(3 + d % 6), "
        "lambda j: s[1 + ((hash(d, j) >> 20) % m)::BIGINT]) || CASE WHEN v = 1 THEN ['Texte réécrit.'] ELSE [] END"
    )
    con.execute("CREATE OR REPLACE MACRO did(d) AS substr(sha256('doc' || d), 1, 24)")
    con.execute(f"CREATE OR REPLACE MACRO ctx(k, p) AS (k * {MIX[0]} + p * {MIX[1]}) % {n}")


def _copy(con: duckdb.DuckDBPyConnection, sql: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con.execute(
        f"COPY ({sql}) TO {sql_literal(path)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 65536)"
    )


def write_release(home: Path, key: str, n: int, q: int) -> Path:
    """Write the release folder of ``key`` (OLD or NEW) for ``n`` articles and ``q`` questions."""
    from ragsft_assets.release import layout

    new = key == NEW
    folder = home / "releases" / key
    rev = f"500000000 + i + CASE WHEN {new} AND {REVISED} THEN 1 ELSE 0 END"
    var = f"CASE WHEN {new} AND ({REVISED} OR {REWORDED}) THEN 1 ELSE 0 END"
    present_i = _rule(IN_NEW if new else IN_OLD, "i")
    present_k = _rule(IN_NEW if new else IN_OLD, "k")
    files: dict[str, dict[str, str]] = {"default": {}, "corpus": {}}
    con = duckdb.connect()
    try:
        con.execute("SET memory_limit = '1GB'")
        con.execute("SET preserve_insertion_order = false")
        _setup(con, n)
        # The article of index d in this snapshot: its variant (rewritten or not) and revision.
        dvar = f"CASE WHEN {new} AND ((d % 100 = 2) OR (d % 200 = 3)) THEN 1 ELSE 0 END"
        drev = f"500000000 + d + CASE WHEN {new} AND d % 100 = 2 THEN 1 ELSE 0 END"
        articles = (
            f"SELECT i, i % 10 AS sx, did(i) AS id, 'Article ' || i AS title, sents(i, {var}, pool.s, pool.n) AS sentences, "
            f"{rev} AS revision FROM range({n}) t(i), pool WHERE {present_i}"
        )
        questions = f"""
            SELECT k, k % 10 AS sx, substr(sha256('question' || k), 1, 24) AS qid,
                   'Quelle est la question numéro ' || k || CASE WHEN {new} AND {JUDGED} THEN ' (réécrite)' ELSE '' END
                       || ' ?' AS question,
                   list_transform(range({CONTEXT}), lambda p: ctx(k, p)) AS docs
            FROM range({q}) t(k) WHERE {present_k}"""
        for split, cond in SPLITS:
            rel = layout.data_file("corpus", split)
            _copy(
                con,
                f"SELECT id, title, array_to_string(sentences, ' ') AS text, sentences, 'Q' || i AS qid "
                f"FROM ({articles}) WHERE {cond}",
                folder / rel,
            )
            files["corpus"][split] = rel
            rel = layout.data_file("default", split)
            _copy(
                con,
                f"""SELECT qid AS _id, question, 'numéro ' || k AS answer, 'bridge' AS type, 'hard' AS level,
                       {{'title': ['Article ' || docs[1], 'Article ' || docs[2]], 'sent_id': [0, 1]}} AS supporting_facts,
                       {{'title': list_transform(docs, lambda d: 'Article ' || d),
                         'sentences': list_transform(docs, lambda d: sents(d, {dvar}, pool.s, pool.n))}} AS context
                    FROM ({questions}), pool WHERE {cond}""",
                folder / rel,
            )
            files["default"][split] = rel
        prov = folder / layout.PROVENANCE
        _copy(
            con,
            f"""SELECT 'corpus' AS config, id, NULL::VARCHAR AS question_id, NULL::VARCHAR AS twin_pair_id,
                       NULL::VARCHAR AS bridge_pair_id, [id] AS doc_ids,
                       [{{'doc_id': id, 'title': title, 'role': 'self', 'identifier': i, 'url': NULL::VARCHAR,
                          'revision': revision}}] AS documents, []::VARCHAR[] AS cache_keys
                FROM ({articles})""",
            prov / "corpus" / "lineage.parquet",
        )
        keys = f"['gen' || k || CASE WHEN {new} AND {JUDGED} THEN 'b' ELSE '' END, 'judge' || k]"
        _copy(
            con,
            f"""SELECT 'default' AS config, qid AS id, qid AS question_id, NULL::VARCHAR AS twin_pair_id,
                       substr(sha256('pair' || k), 1, 24) AS bridge_pair_id,
                       list_transform(docs, lambda d: did(d)) AS doc_ids,
                       list_transform(docs, lambda d: {{'doc_id': did(d), 'title': 'Article ' || d, 'role': 'context',
                           'identifier': d, 'url': NULL::VARCHAR, 'revision': {drev}}}) AS documents,
                       {keys} AS cache_keys
                FROM ({questions})""",
            prov / "default" / "lineage.parquet",
        )
        # Final decisions: articles kept by `abstracts`; questions decided by the judge (a question of
        # the other snapshot only: dropped here).
        here, there = _rule(IN_NEW if new else IN_OLD, "k"), _rule(IN_OLD if new else IN_NEW, "k")
        _copy(
            con,
            f"""SELECT {sql_literal(key)} AS partition, 'corpus' AS product, did(i) AS candidate_id,
                       'abstracts' AS stage, 'kept' AS verdict, '' AS reason, '' AS detail,
                       []::VARCHAR[] AS cache_keys, 1 AS stages_seen
                FROM range({n}) t(i) WHERE {present_i}
                UNION ALL
                SELECT {sql_literal(key)}, 'multihop', substr(sha256('question' || k), 1, 24), 'ablation_verdicts',
                       CASE WHEN {here} THEN 'kept' ELSE 'dropped' END,
                       CASE WHEN {here} THEN '' ELSE 'answerable_alone' END,
                       CASE WHEN {new} AND {JUDGED} THEN '{{"ablations": 3}}' ELSE '{{"ablations": 4}}' END,
                       ['judge' || k], 2
                FROM range({q}) t(k) WHERE {here} OR {there}""",
            prov / "decisions.parquet",
        )
    finally:
        con.close()
    layout.write_configs(folder, [layout.CONFIGS_BY_NAME["default"], layout.CONFIGS_BY_NAME["corpus"]])
    layout.write_readme(folder, files, f"# bench release `{key}`\n", f"bench {key}")
    return folder


def expected(n: int, q: int) -> dict[str, dict[str, int]]:
    """The counts the generation rules give, per config (NumPy over the indexes, no file read)."""
    i = np.arange(n)
    both = (i % 100 != 0) & (i % 100 != 1)
    touched = (i % 100 == 2) | (i % 200 == 3)
    k = np.arange(q)
    qboth = (k % 100 != 0) & (k % 100 != 1)
    docs = (k[:, None] * MIX[0] + np.arange(CONTEXT)[None, :] * MIX[1]) % n
    qtouched = ((docs % 100 == 2) | (docs % 200 == 3)).any(axis=1) | (k % 50 == 7)
    return {
        "corpus": {
            "added": int((i % 100 == 0).sum()),
            "removed": int((i % 100 == 1).sum()),
            "changed": int((both & touched).sum()),
            "unchanged": int((both & ~touched).sum()),
        },
        "default": {
            "added": int((k % 100 == 0).sum()),
            "removed": int((k % 100 == 1).sum()),
            "changed": int((qboth & qtouched).sum()),
            "unchanged": int((qboth & ~qtouched).sum()),
        },
    }


def diff_child(home: str) -> dict[str, Any]:
    """``diff_releases`` alone (run in the child process): its result's counts, time and peak RSS."""
    from ragsft_assets.bench.release import _peak_mb
    from ragsft_assets.release.diff import COUNTS, Release, diff_releases

    root = Path(home) / "releases"
    t0 = time.perf_counter()
    result = diff_releases(
        Release.open(root / OLD, OLD), Release.open(root / NEW, NEW), limit=5, databases=[]
    )
    return {
        "diff_s": time.perf_counter() - t0,
        "peak_rss_mb": _peak_mb(),
        "counts": {c: {k: v[k] for k in COUNTS} for c, v in result["configs"].items()},
        "reasons": {c: v["changed_reasons"] for c, v in result["configs"].items()},
    }


def run(
    size: int | None = None, workdir: str | None = None, rss_bar_mb: float = RSS_BAR_MB
) -> dict[str, object]:
    """Generate the two releases, diff them in a child process; returns the ordered key=value results.

    Args:
        size: abstracts (default 2,600,000); questions keep the ratio 300,000 / 2,600,000 (at least 20).
        workdir: the scratch home (default: a temp folder, removed after).
        rss_bar_mb: the peak-RSS bar of the child that diffs.
    """
    n = size or ABSTRACTS
    q = max(20, round(n * QUESTIONS / ABSTRACTS))
    home = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-diff-"))
    try:
        t0 = time.perf_counter()
        for key in (OLD, NEW):
            write_release(home, key, n, q)
        gen_s = time.perf_counter() - t0
        print(f"generated two releases of {n} abstracts and {q} questions in {gen_s:.1f}s", flush=True)
        child, wall = run_child(home, "ragsft_assets.bench.diff", "diff_child", "diff")
        want = expected(n, q)
        size_mb = sum(p.stat().st_size for p in (home / "releases").rglob("*") if p.is_file()) / 2**20
        c, d = child["counts"]["corpus"], child["counts"]["default"]
        values: dict[str, Any] = {
            "abstracts": n,
            "questions": q,
            "peak_rss_mb": round(child["peak_rss_mb"]),
            "rss_bar_mb": rss_bar_mb,
            "diff_s": round(child["diff_s"], 1),
            "child_s": round(wall, 1),
            "generate_s": round(gen_s, 1),
            "releases_mb": round(size_mb),
            **{f"corpus_{k}": v for k, v in c.items()},
            **{f"default_{k}": v for k, v in d.items()},
            "reasons_default": ",".join(f"{r}:{m}" for r, m in child["reasons"]["default"].items()),
            "counts_match": child["counts"] == want,
        }
        values["passed"] = values["peak_rss_mb"] < rss_bar_mb and values["counts_match"]
        return {**values, **machine_values()}
    finally:
        if not workdir:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":  # python -m ragsft_assets.bench.diff [size]
    from ragsft_assets.cli.bench import format_line

    print(format_line("diff", run(int(sys.argv[1]) if len(sys.argv) > 1 else None)))
