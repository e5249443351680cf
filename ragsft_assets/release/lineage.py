"""Lineage down to the row: each product id -> question -> bridge pair (a, b) -> documents -> articles.

``provenance/<config>/lineage.parquet`` has one row per product id (``LINEAGE_SCHEMA``). The links
are recovered from the ids, which are derived from inputs (``ids.py``), never from model text:

- SFT row -> question: the row's ``question_id`` column when it has one, else the ``rag_prompts``
  row of the same id, else the question whose ``ids.pair_id(question_id)`` equals the row's
  ``pair_id`` (twins share it), else a question with the row's own id.
- question -> bridge pair: the ``question_drafts`` asset when it carries ``a_id``/``b_id``, else
  the bridge pair whose ``ids.question_id(a_id, b_id, k)`` equals the question id for a draft
  index ``k < max_drafts``.
- documents: for a question, its context titles (gold = supporting-fact titles); for an SFT row,
  the ``* filename: <title>`` lines of the prompt (the documents the model really saw); ids are
  ``ids.doc_id(title)``, joined with ``abstracts`` for the identifier, URL and revision.
- cache keys: every ledger row whose candidate is the row, its question, its twin pair or its
  bridge pair.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa

from ragsft_assets import ids
from ragsft_assets.storage import asset_files

DOC_STRUCT = pa.struct(
    [
        ("doc_id", pa.string()),
        ("title", pa.string()),
        ("role", pa.string()),  # "self" | "gold_a" | "gold_b" | "gold" | "context"
        ("identifier", pa.int64()),
        ("url", pa.string()),
        ("revision", pa.int64()),
    ]
)
LINEAGE_SCHEMA = pa.schema(
    [
        ("config", pa.string()),
        ("id", pa.string()),
        ("question_id", pa.string()),
        ("twin_pair_id", pa.string()),
        ("bridge_pair_id", pa.string()),
        ("a_id", pa.string()),
        ("b_id", pa.string()),
        ("doc_ids", pa.list_(pa.string())),
        ("documents", pa.list_(DOC_STRUCT)),
        ("cache_keys", pa.list_(pa.string())),
        ("resolution", pa.string()),  # how the question -> pair link was found
    ]
)
FILENAME_RE = re.compile(r"^\* filename: (.*)$", re.MULTILINE)


def _read(assets_root: Path, partition: str, asset: str, columns: list[str] | None = None) -> pa.Table | None:
    import pyarrow.parquet as pq

    files = asset_files(partition, asset, assets_root)
    if not files:
        return None
    tables = []
    for f in files:
        names = pq.read_schema(f).names
        cols = [c for c in columns if c in names] if columns else None
        tables.append(pq.read_table(f, columns=cols))
    return pa.concat_tables(tables, promote_options="default")


class LineageSources:
    """The upstream tables of one partition, indexed for lookups (read once, used for every config)."""

    def __init__(
        self,
        assets_root: Path,
        partition: str,
        ledger: pa.Table | None = None,
        max_drafts: int = 10,
    ) -> None:
        self.articles: dict[str, dict] = {}
        abstracts = _read(
            assets_root, partition, "abstracts", ["id", "title", "identifier", "url", "revision"]
        )
        if abstracts is not None:
            for row in abstracts.to_pylist():
                self.articles[row["id"]] = row
        self.questions: dict[str, dict] = {}
        mq = _read(assets_root, partition, "multihop_questions", ["id", "supporting_facts", "context"])
        if mq is not None:
            for row in mq.to_pylist():
                self.questions[row["id"]] = row
        self.question_by_twin = {ids.pair_id(q): q for q in self.questions}
        # rag_prompts (rag_sft family) carries each example's question id.
        self.question_of_example: dict[str, str] = {}
        prompts = _read(assets_root, partition, "rag_prompts", ["id", "question_id"])
        if prompts is not None and "question_id" in prompts.column_names:
            self.question_of_example = dict(
                zip(prompts["id"].to_pylist(), prompts["question_id"].to_pylist(), strict=True)
            )
        self.pair_of_question: dict[str, tuple[str, str, str, str]] = {}  # q -> (pair id, a, b, how)
        self._resolve_pairs(assets_root, partition, max_drafts)
        self.cache_keys: dict[str, set[str]] = {}
        if ledger is not None and ledger.num_rows:
            for cid, keys in zip(
                ledger["candidate_id"].to_pylist(), ledger["cache_keys"].to_pylist(), strict=True
            ):
                if keys:
                    self.cache_keys.setdefault(cid, set()).update(keys)

    def _resolve_pairs(self, assets_root: Path, partition: str, max_drafts: int) -> None:
        pairs = _read(assets_root, partition, "bridge_pairs", ["id", "a_id", "b_id"])
        pair_id_of = {}
        if pairs is not None:
            for row in pairs.to_pylist():
                pair_id_of[(row["a_id"], row["b_id"])] = row["id"]
        drafts = _read(assets_root, partition, "question_drafts")
        if drafts is not None and {"a_id", "b_id"} <= set(drafts.column_names):
            qcol = "question_id" if "question_id" in drafts.column_names else "id"
            for row in drafts.select([qcol, "a_id", "b_id"]).to_pylist():
                a, b = row["a_id"], row["b_id"]
                pid = pair_id_of.get((a, b)) or ids.derived_id("bridge_pair", a, b)
                self.pair_of_question[row[qcol]] = (pid, a, b, "question_drafts")
        wanted = set(self.questions) - set(self.pair_of_question)
        if wanted and pair_id_of:
            for (a, b), pid in pair_id_of.items():
                for k in range(max_drafts):
                    q = ids.question_id(a, b, k)
                    if q in wanted:
                        self.pair_of_question[q] = (pid, a, b, "bridge_pairs")

    def document(self, title: str, role: str) -> dict:
        did = ids.doc_id(title)
        art = self.articles.get(did, {})
        return {
            "doc_id": did,
            "title": title,
            "role": role,
            "identifier": art.get("identifier"),
            "url": art.get("url"),
            "revision": art.get("revision"),
        }

    def keys_for(self, candidates: Iterable[str | None]) -> list[str]:
        out: set[str] = set()
        for c in candidates:
            if c:
                out |= self.cache_keys.get(c, set())
        return sorted(out)


def _question_documents(src: LineageSources, q: dict, a_id: str | None, b_id: str | None) -> list[dict]:
    gold = set((q.get("supporting_facts") or {}).get("title") or [])
    docs = []
    for title in (q.get("context") or {}).get("title") or []:
        did = ids.doc_id(title)
        role = (
            "gold_a" if did == a_id else "gold_b" if did == b_id else "gold" if title in gold else "context"
        )
        docs.append(src.document(title, role))
    return docs


def _row(config: str, rid: str, **kw: object) -> dict:
    base = {name: None for name in LINEAGE_SCHEMA.names}
    base.update(config=config, id=rid, doc_ids=[], documents=[], cache_keys=[], resolution="none")
    base.update(kw)
    base["doc_ids"] = [d["doc_id"] for d in base["documents"]]  # type: ignore[union-attr]
    return base


def _question_fields(src: LineageSources, qid: str | None) -> dict:
    if not qid:
        return {}
    pid, a, b, how = src.pair_of_question.get(qid, (None, None, None, "none"))
    return {"question_id": qid, "bridge_pair_id": pid, "a_id": a, "b_id": b, "resolution": how}


def lineage_table(config: str, family: str, table: pa.Table, src: LineageSources) -> pa.Table:
    """The lineage rows of one config's product table (one row per id, sorted by id).

    Args:
        config: the release config name.
        family: ``corpus``, ``multihop`` or ``rag_sft``: how the product's rows are made.
        table: the product rows (all splits), with an ``id`` column.
        src: the partition's upstream tables.
    """
    rows = []
    cols = set(table.column_names)
    for r in table.to_pylist():
        rid = r["id"]
        if family == "corpus":
            doc = src.document(r.get("title") or "", "self")
            rows.append(_row(config, rid, documents=[doc], resolution="document"))
        elif family == "multihop":
            qf = _question_fields(src, rid)
            q = src.questions.get(rid) or r
            docs = _question_documents(src, q, qf.get("a_id"), qf.get("b_id"))
            keys = src.keys_for([rid, qf.get("bridge_pair_id")])
            rows.append(_row(config, rid, documents=docs, cache_keys=keys, **qf))
        else:
            twin = r.get("pair_id")
            qid = r.get("question_id") if "question_id" in cols else None
            qid = (
                qid
                or src.question_of_example.get(rid)
                or src.question_by_twin.get(twin or "")
                or (rid if rid in src.questions else None)
            )
            qf = _question_fields(src, qid)
            gold = set(r.get("supporting_facts_titles") or [])
            prompt = "\n".join(
                m.get("content") or "" for m in (r.get("messages") or []) if m.get("role") != "assistant"
            )
            docs = []
            for title in FILENAME_RE.findall(prompt):
                title = title.strip()
                did = ids.doc_id(title)
                role = (
                    "gold_a"
                    if did == qf.get("a_id")
                    else "gold_b"
                    if did == qf.get("b_id")
                    else "gold"
                    if title in gold
                    else "context"
                )
                docs.append(src.document(title, role))
            keys = src.keys_for([rid, twin, qid, qf.get("bridge_pair_id")])
            rows.append(_row(config, rid, twin_pair_id=twin, documents=docs, cache_keys=keys, **qf))
    rows.sort(key=lambda x: x["id"])
    return pa.Table.from_pylist(rows, schema=LINEAGE_SCHEMA)


def lineage_tables(
    tables: Mapping[str, Mapping[str, pa.Table]], families: Mapping[str, str], src: LineageSources
) -> dict[str, pa.Table]:
    """Lineage per config from ``{config: {split: table}}`` and ``{config: family}``."""
    out = {}
    for config, splits in tables.items():
        whole = pa.concat_tables(list(splits.values()), promote_options="default")
        out[config] = lineage_table(config, families[config], whole, src)
    return out
