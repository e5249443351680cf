"""The ``trust_align`` source: Trust-Align SFT rows (ALCE / Trust-Score layout) as multi-answer questions.

Each input item holds ``question``, ``docs[{title, text}]`` (the 5 retrieved Wikipedia passages), an
``answer`` (the GPT-4 target, citing passages as ``[N]``) and, where the row carries them, the gold
answers as ``qa_pairs[{short_answers}]`` (ASQA) or ``answers`` (QAMPARI: a list of alias lists).
ELI5 rows are left out. Gold answers missing from a row are joined, by question, from the gold
records among the source's files (records without ``docs``): raw ASQA (``ambiguous_question``,
``qa_pairs``) and QAMPARI (``question``, ``answers``).

The GPT-4 target only chooses the reference: the *supporting documents* are the passages it cites,
the *reference answers* the gold answers it contains. Whether a row is unanswerable follows
Trust-Align's own label where the row carries one (:func:`label_of`: a boolean ``answerable`` /
``unanswerable`` field, a ``label``-like field such as ``refusal`` / ``positive``, or the
``refusal_demos`` / ``positive_demos`` list of a prompt file); a row without a label is inferred
from its target (no gold answer in it: unanswerable). Either way an unanswerable row is kept only
when no gold answer string occurs in its passages, and the row's ``label_origin`` says which was
used (``source`` or ``inferred``). The unanswerable rows are then sampled down to a share of the rows (default 20%), by a draw keyed on (seed, stage,
row id). Each row then gets 4 BM25 distractors from the passages of the other questions (BM25 ranks
1-4 and any passage holding one of its gold answers skipped); the chain's prompt stage later drops
up to 70% of the non-supporting documents and shuffles them.

The output is the HotpotQA layout the SFT chain reads (one paragraph per passage, title made
unique, supporting facts = the cited passages, sentence 0), plus ``gold_answers``,
``reference_answers``, ``answers_present`` (how many gold answers the passages hold) and
``label_origin``. ``type`` is the subset (``asqa``/``qampari``) and ``level`` whether the row is
``answerable`` or ``unanswerable``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets import ids
from ragsft_assets.ids import derived_id
from ragsft_assets.multihop.hotpot_format import records_table
from ragsft_assets.sources.records import read_records

PRESET = "trust_align"
HUB_ID = "declare-lab/Trust-Score"  # the card's hub source (also published as declare-lab/Trust-Data)
HUB_DATA_DIR = "Trust-Align/sft"
HUB_REVISION = "0b89ac0"  # the card's commit
SUBSETS = ("asqa", "qampari")
ANSWERABLE = "answerable"
UNANSWERABLE = "unanswerable"
DEFAULT_UNANSWERABLE_SHARE = 0.2
N_DISTRACTORS = 4
SKIP_RANKS = 4  # BM25 ranks 1-4 are too close to the question: possibly unlabelled evidence
STAGE_UNANSWERABLE = "trust_align.unanswerable_sample"

_CITE_RE = re.compile(r"\[(\d+)\]")
_WS_RE = re.compile(r"\s+")


class TrustAlignError(ValueError):
    """A Trust-Align item that cannot be read: the message names the file, the record and the field."""


@dataclass(frozen=True, slots=True)
class Item:
    """One ASQA/QAMPARI row of the Trust-Align SFT data, gold answers as alias groups."""

    id: str
    subset: str
    question: str
    docs: tuple[tuple[str, str], ...]  # (title, text)
    target: str
    gold: tuple[tuple[str, ...], ...]  # each gold answer: its aliases
    split: str
    label: str | None = None  # Trust-Align's own answerable / unanswerable label; None: none carried


@dataclass(slots=True)
class TrustAlignRead:
    """The rows kept, with every row left out counted by reason (and listed with its id)."""

    rows: list[dict[str, Any]]
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (item id, reason)
    funnel: Counter = field(default_factory=Counter)


def norm(text: str) -> str:
    """Lower case, whitespace collapsed: how gold strings are looked up in targets and passages."""
    return _WS_RE.sub(" ", text).strip().lower()


def contains(text: str, aliases: Iterable[str]) -> bool:
    """Whether any alias occurs in ``text`` (normalized, on word boundaries)."""
    t = norm(text)
    for a in aliases:
        a = norm(a)
        if a and re.search(rf"(?<!\w){re.escape(a)}(?!\w)", t):
            return True
    return False


def cited_docs(target: str, n_docs: int) -> list[int]:
    """The 1-based passage numbers a target cites with ``[N]``, in order of first citation."""
    return list(dict.fromkeys(int(m) for m in _CITE_RE.findall(target) if 1 <= int(m) <= n_docs))


def subset_of(row: Mapping[str, Any], file_name: str) -> str:
    """``asqa``/``qampari``/``eli5``: the row's own field, else the file name, else the gold's shape."""
    for key in ("dataset", "source", "data_source", "subset"):
        v = row.get(key)
        if isinstance(v, str) and v.strip():
            low = v.lower()
            for s in (*SUBSETS, "eli5"):
                if s in low:
                    return s
    low = file_name.lower()
    for s in (*SUBSETS, "eli5"):
        if s in low:
            return s
    if row.get("qa_pairs"):
        return "asqa"
    if row.get("answers"):
        return "qampari"
    if row.get("claims"):
        return "eli5"
    return ""


def gold_of(row: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Gold answers of a row: ASQA ``qa_pairs[].short_answers`` or QAMPARI ``answers`` (alias lists)."""
    out: list[tuple[str, ...]] = []
    for pair in row.get("qa_pairs") or []:
        aliases = tuple(str(a) for a in (pair.get("short_answers") or []) if str(a).strip())
        if aliases:
            out.append(aliases)
    if not out:
        for ans in row.get("answers") or []:
            aliases = tuple(str(a) for a in (ans if isinstance(ans, list) else [ans]) if str(a).strip())
            if aliases:
                out.append(aliases)
    return tuple(dict.fromkeys(out))


def gold_index(records: Iterable[Mapping[str, Any]]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Normalized question -> gold answers, from raw ASQA (``ambiguous_question``) and QAMPARI records."""
    index: dict[str, tuple[tuple[str, ...], ...]] = {}
    for r in records:
        q = r.get("ambiguous_question") or r.get("question")
        gold = gold_of(r)
        if q and gold:
            index.setdefault(norm(str(q)), gold)
    return index


LABEL_SOURCE = "source"  # label_origin: the row's own label
LABEL_INFERRED = "inferred"  # label_origin: inferred from the target
DEMO_LABELS = {"positive_demos": ANSWERABLE, "refusal_demos": UNANSWERABLE}
_LABEL_FIELDS = ("label", "answer_type", "category", "demo_type")
_UNANSWERABLE_WORDS = ("refus", "unanswerable", "negative", "reject")
_ANSWERABLE_WORDS = ("positive", "answerable")


def label_of(row: Mapping[str, Any]) -> str | None:
    """Trust-Align's own label of a row, ``answerable`` / ``unanswerable``, or None when it has none.

    Read from a boolean ``answerable`` or ``unanswerable`` field, else a string field among
    ``label``, ``answer_type``, ``category``, ``demo_type`` naming a refusal (``refusal``,
    ``unanswerable``, ``negative``, ``rejection``) or a positive row (``positive``, ``answerable``).
    """
    if isinstance(row.get("answerable"), bool):
        return ANSWERABLE if row["answerable"] else UNANSWERABLE
    if isinstance(row.get("unanswerable"), bool):
        return UNANSWERABLE if row["unanswerable"] else ANSWERABLE
    for key in _LABEL_FIELDS:
        value = row.get(key)
        if isinstance(value, str):
            low = value.strip().lower()
            if any(w in low for w in _UNANSWERABLE_WORDS):
                return UNANSWERABLE
            if any(w in low for w in _ANSWERABLE_WORDS):
                return ANSWERABLE
    return None


def item_from_row(row: Any, where: str, file_name: str, split: str) -> Item | None:
    """One item, or None for an ELI5 row; raises TrustAlignError naming ``where`` and the field."""
    if not isinstance(row, Mapping):
        raise TrustAlignError(f"{where}: expected an object, got {type(row).__name__}")
    subset = subset_of(row, file_name)
    if subset == "eli5":
        return None
    for f in ("question", "docs", "answer"):
        if row.get(f) is None:
            raise TrustAlignError(f"{where}: missing field {f!r}")
    try:
        docs = tuple((str(d["title"]), str(d["text"])) for d in row["docs"])
    except (KeyError, TypeError) as exc:
        raise TrustAlignError(f"{where}: field 'docs' is malformed (want [{{title, text}}]): {exc}") from exc
    if not docs:
        raise TrustAlignError(f"{where}: field 'docs' is empty")
    question = str(row["question"])
    rid = row.get("id") or row.get("sample_id")
    rid = str(rid) if rid else derived_id(question, *(t for t, _ in docs))
    return Item(rid, subset, question, docs, str(row["answer"]), gold_of(row), split, label_of(row))


def _records(path: Path) -> Iterable[tuple[str, Any]]:
    """(where, record) of a data file; an ALCE/Trust-Score prompt file's demos are records too."""
    if path.suffix == ".json" and path.read_text(encoding="utf-8").lstrip()[:1] == "{":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            data = None  # JSON lines under a .json name: read as such
        if isinstance(data, Mapping):
            demos = [k for k in ("demos", "positive_demos", "refusal_demos") if isinstance(data.get(k), list)]
            if not demos:
                raise TrustAlignError(f"{path}: a JSON object without demos/positive_demos/refusal_demos")
            for k in demos:  # a prompt file's refusal / positive demos carry their label in the list's name
                label = DEMO_LABELS.get(k)
                yield from (
                    (f"{k}[{i}]", {"label": label, **r} if label and isinstance(r, Mapping) else r)
                    for i, r in enumerate(data[k], 1)
                )
            return
    yield from read_records(path)


def is_gold_record(row: Any) -> bool:
    """A record without ``docs``: raw ASQA (``ambiguous_question``) or QAMPARI gold, joined by question."""
    return isinstance(row, Mapping) and "docs" not in row and ("qa_pairs" in row or "answers" in row)


def read_items(files: Sequence[Path], split_of: Any) -> tuple[list[Item], list[Mapping[str, Any]], int]:
    """Items of the data files (``split_of(name)`` gives a file's split), the gold records among
    them (:func:`is_gold_record`) and the number of ELI5 rows left out."""
    items, gold, eli5 = [], [], 0
    seen: set[tuple[str, str]] = set()
    for f in files:
        for where, rec in _records(f):
            if is_gold_record(rec):
                gold.append(rec)
                continue
            it = item_from_row(rec, f"{f}, {where}", f.name, split_of(f.name))
            if it is None:
                eli5 += 1
            # The same row twice in a split (a demo in two prompt files) is read once; in train
            # and validation, the validation copy goes later (validation_without_train).
            elif (it.id, it.split) not in seen:
                seen.add((it.id, it.split))
                items.append(it)
    return items, gold, eli5


def join_gold(items: Sequence[Item], index: Mapping[str, tuple[tuple[str, ...], ...]]) -> list[Item]:
    """Items whose row carries no gold answers get those of ``index`` (by normalized question)."""
    out = []
    for it in items:
        if not it.gold and norm(it.question) in index:
            it = replace(it, gold=index[norm(it.question)])
        out.append(it)
    return out


def validation_without_train(items: Sequence[Item]) -> tuple[list[Item], list[Item]]:
    """The items kept and those removed: a test/validation item whose question is also in train goes."""
    train_q = {norm(it.question) for it in items if it.split == "train"}
    kept, removed = [], []
    for it in items:
        (removed if it.split != "train" and norm(it.question) in train_q else kept).append(it)
    return kept, removed


def sample_unanswerable(
    answerable: Sequence[str], unanswerable: Sequence[str], share: float, seed: int
) -> tuple[list[str], list[str]]:
    """The unanswerable ids kept so that they make up at most ``share`` of the rows, and those dropped.

    The kept ones are those of lowest draw ``item_uniform(seed, stage, id)``: independent of order.
    """
    if not 0.0 <= share < 1.0:
        raise ValueError(f"unanswerable share must be in [0, 1), not {share}")
    n = min(len(unanswerable), int(share * len(answerable) / (1.0 - share) + 1e-9))
    ranked = sorted(unanswerable, key=lambda i: (ids.item_uniform(seed, STAGE_UNANSWERABLE, i), i))
    return sorted(ranked[:n]), sorted(ranked[n:])


def bm25_distractors(
    items: Sequence[Item], n: int = N_DISTRACTORS, skip: int = SKIP_RANKS
) -> dict[str, list[tuple[str, str]]]:
    """For each item, ``n`` passages of other questions by BM25 on its question.

    Ranks 1..``skip`` are skipped, and so is any passage holding one of the item's gold answers or
    already among its own passages; ties are broken by the passage's position in the pool.
    """
    import bm25s

    pool: list[tuple[str, str]] = []
    owners: list[set[str]] = []
    where: dict[tuple[str, str], int] = {}
    for it in items:
        for d in it.docs:
            if d not in where:
                where[d] = len(pool)
                pool.append(d)
                owners.append(set())
            owners[where[d]].add(it.id)
    out: dict[str, list[tuple[str, str]]] = {}
    if not pool:
        return out
    retriever = bm25s.BM25()
    corpus = bm25s.tokenize([f"{t} {x}" for t, x in pool], stopwords="en", show_progress=False)
    retriever.index(corpus, show_progress=False)
    for it in items:
        query = bm25s.tokenize([it.question], stopwords="en", return_ids=False, show_progress=False)[0]
        # A question of stopwords only scores every passage 0: pool order decides.
        scores = retriever.get_scores(query) if query else [0.0] * len(pool)
        order = sorted(range(len(pool)), key=lambda k: (-float(scores[k]), k))
        others = [k for k in order if it.id not in owners[k]]
        picked = []
        for k in others[skip:]:
            if len(picked) == n:
                break
            if any(contains(pool[k][1], g) for g in it.gold) or pool[k] in it.docs:
                continue
            picked.append(pool[k])
        out[it.id] = picked
    return out


def _unique_titles(docs: Sequence[tuple[str, str]]) -> list[str]:
    """Titles made unique (the chain keys documents by title): a repeated title gets `` (2)``, ..."""
    seen: Counter = Counter()
    out = []
    for t, _ in docs:
        seen[t] += 1
        out.append(t if seen[t] == 1 else f"{t} ({seen[t]})")
    return out


def build_rows(
    items: Sequence[Item],
    *,
    unanswerable_share: float = DEFAULT_UNANSWERABLE_SHARE,
    seed: int = ids.DEFAULT_SEED,
) -> TrustAlignRead:
    """The chain's input rows from the items: reference, unanswerable filter and share, distractors."""
    out = TrustAlignRead(rows=[])
    kept, dup = validation_without_train(items)
    out.rejected += [(it.id, "validation_question_in_train") for it in dup]
    chosen: dict[str, tuple[Item, list[int], list[tuple[str, ...]], str]] = {}
    for it in kept:
        if not it.gold:
            out.rejected.append((it.id, "no_gold_answers"))
            continue
        refs = [g for g in it.gold if contains(it.target, g)]
        cites = cited_docs(it.target, len(it.docs))
        gold_in_passages = any(contains(text, g) for _, text in it.docs for g in it.gold)
        unanswerable = it.label == UNANSWERABLE if it.label is not None else not refs
        if unanswerable:
            if gold_in_passages:
                out.rejected.append((it.id, "unanswerable_but_gold_in_passages"))
            else:
                chosen[it.id] = (it, [], [], UNANSWERABLE)
        elif refs and cites:
            chosen[it.id] = (it, cites, refs, ANSWERABLE)
        elif refs:
            out.rejected.append((it.id, "answer_without_citation"))
        else:  # labelled answerable, yet its target holds no gold answer: no reference to keep
            out.rejected.append((it.id, "answerable_without_gold_in_target"))
    for split in sorted({c[0].split for c in chosen.values()}):
        ans = [i for i, c in chosen.items() if c[3] == ANSWERABLE and c[0].split == split]
        una = [i for i, c in chosen.items() if c[3] == UNANSWERABLE and c[0].split == split]
        _, dropped = sample_unanswerable(ans, una, unanswerable_share, seed)
        for i in dropped:
            del chosen[i]
            out.rejected.append((i, "unanswerable_over_share"))
    distractors = bm25_distractors([c[0] for c in chosen.values()])
    for rid in sorted(chosen):
        it, cites, refs, kind = chosen[rid]
        docs = list(it.docs) + distractors.get(rid, [])
        titles = _unique_titles(docs)
        present = sum(any(contains(x, g) for _, x in it.docs) for g in it.gold)
        out.rows.append(
            {
                "id": it.id,
                "question": it.question,
                "answer": "; ".join(g[0] for g in refs),
                "type": it.subset,
                "level": kind,
                "supporting_facts": {"title": [titles[c - 1] for c in cites], "sent_id": [0] * len(cites)},
                "context": {"title": titles, "sentences": [[x] for _, x in docs]},
                "split": it.split,
                "gold_answers": [list(g) for g in it.gold],
                "reference_answers": [list(g) for g in refs],
                "answers_present": present,
                "label_origin": LABEL_SOURCE if it.label is not None else LABEL_INFERRED,
            }
        )
        out.funnel[f"label:{LABEL_SOURCE if it.label is not None else LABEL_INFERRED}"] += 1
        out.funnel[f"{it.split}:{kind}"] += 1
        out.funnel[f"{it.split}:{it.subset}"] += 1
    for _, reason in out.rejected:
        out.funnel[f"rejected:{reason}"] += 1
    return out


EXTRA_SCHEMA = [
    ("gold_answers", pa.list_(pa.list_(pa.string()))),
    ("reference_answers", pa.list_(pa.list_(pa.string()))),
    ("answers_present", pa.int32()),
    ("label_origin", pa.string()),  # whether "unanswerable" is the row's own label or inferred
]


def rows_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The rows as the chain's HotpotQA-layout table with the multi-answer columns appended."""
    base = records_table([{k: v for k, v in r.items() if k not in dict(EXTRA_SCHEMA)} for r in rows])
    for name, typ in EXTRA_SCHEMA:
        base = base.append_column(name, pa.array([r[name] for r in rows], type=typ))
    return base


def read_files(
    files: Sequence[Path],
    split_of: Any,
    *,
    unanswerable_share: float = DEFAULT_UNANSWERABLE_SHARE,
    seed: int = ids.DEFAULT_SEED,
) -> TrustAlignRead:
    """Read the data files, join the gold answers of their gold records, build the rows.

    ``split_of`` maps a file name to its split; a ``test`` file gives the ``validation`` split.
    """

    def split(name: str) -> str:
        s = split_of(name)
        return "validation" if s == "test" else s

    items, gold, eli5 = read_items(files, split)
    built = build_rows(join_gold(items, gold_index(gold)), unanswerable_share=unanswerable_share, seed=seed)
    built.funnel["eli5_left_out"] = eli5
    built.funnel["gold_records"] = len(gold)
    return built
