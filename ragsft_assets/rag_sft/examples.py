"""Building the RAG prompts: documents, instruction variants, unanswerable twins.

Every draw comes from ``ids.item_rng`` / ``ids.item_uniform`` keyed by the seed, a stage name
and the question id, or the pair id for what twins must share (instruction variants), never
from processing order: the same records and seed give the same prompts in any order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from ragsft_assets import ids
from ragsft_assets.arrow_schemas import STRING_LIST, columns, strings
from ragsft_assets.ledger import DROPPED, KEPT, Decision, DecisionLog
from ragsft_assets.prompts import load_prompt
from ragsft_assets.rag_sft.citations import INLINE, REFERENCE
from ragsft_assets.rag_sft.hotpot_input import HotpotRecord
from ragsft_assets.rag_sft.layout import collides, join_sentences, render_documents
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE, RagSftRecipe

ANSWERABLE = "answerable"
UNANSWERABLE = "unanswerable"
GENERIC = "generic"
STRICT = "strict"
TWIN_BOTH = "both"
TWIN_ONE = "one"

# The five exact refusal phrases the strict rule dictates (one drawn per pair).
REFUSAL_PHRASES: dict[str, tuple[str, ...]] = {
    "en": (
        "The documents provided do not contain the information needed to answer this question.",
        "I cannot answer this question from the documents provided.",
        "The available documents do not allow me to answer this question.",
        "This information is not in the documents provided.",
        "I do not have enough information in these documents to answer.",
    ),
    "fr": (
        "Les documents fournis ne contiennent pas les informations nécessaires pour répondre à cette question.",
        "Je ne peux pas répondre à cette question à partir des documents fournis.",
        "Les documents disponibles ne me permettent pas de répondre à cette question.",
        "Cette information ne figure pas dans les documents fournis.",
        "Je n'ai pas assez d'informations dans ces documents pour répondre.",
    ),
}

LANGUAGE_NAMES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian"}

STAGE_DROP = "rag_prompts.distractors"
STAGE_TWIN = "rag_prompts.twin"
STAGE_TWIN_KIND = "rag_prompts.twin_kind"
STAGE_TWIN_GOLD = "rag_prompts.twin_gold"
STAGE_REPLACEMENT = "rag_prompts.replacement"
STAGE_CITATION = "rag_prompts.citation_style"
STAGE_REFUSAL = "rag_prompts.refusal_rule"
STAGE_PHRASE = "rag_prompts.refusal_phrase"


def refusal_phrases(lang: str) -> tuple[str, ...]:
    return REFUSAL_PHRASES.get(lang, REFUSAL_PHRASES["en"])


@dataclass(slots=True)
class RagPrompt:
    """One example's prompt and everything later stages need to judge and format it."""

    id: str
    pair_id: str
    question_id: str
    kind: str  # answerable | unanswerable
    twin_kind: str  # "" | both | one
    split: str
    language: str
    question: str
    answer: str
    titles: list[str]
    paragraphs: list[str]
    gold_titles: list[str]  # empty for unanswerable examples
    removed_titles: list[str]
    citation_style: str  # inline | reference
    refusal_rule: str  # generic | strict
    refusal_phrase: str  # the dictated phrase under the strict rule, else ""
    system: str
    user: str
    chunks_total: int
    distractors_total: int
    distractors_dropped: int


PROMPT_SCHEMA = pa.schema(
    [
        *strings("id", "pair_id", "question_id", "kind", "twin_kind", "split", "language", "question"),
        ("answer", pa.string()),
        *columns(STRING_LIST, "titles", "paragraphs", "gold_titles", "removed_titles"),
        *strings("citation_style", "refusal_rule", "refusal_phrase", "system", "user"),
        *columns(pa.int32(), "chunks_total", "distractors_total", "distractors_dropped"),
    ]
)


def example_id(question_id: str, kind: str) -> str:
    """Id of one example: from the question id and whether it is the answerable one or its twin."""
    return ids.derived_id("rag_example", question_id, kind)


def prompts_table(prompts: Sequence[RagPrompt]) -> pa.Table:
    rows = sorted((asdict(p) for p in prompts), key=lambda r: r["id"])
    return pa.Table.from_pylist(rows, schema=PROMPT_SCHEMA)


def prompts_from_table(table: pa.Table) -> list[RagPrompt]:
    return [RagPrompt(**row) for row in table.to_pylist()]


PROMPT_TASKS = (
    "rag_system",
    "rag_rule_cite_inline",
    "rag_rule_cite_references",
    "rag_rule_refusal_generic",
    "rag_rule_refusal_strict",
)
# The citation rule of the system prompt, as the card quotes it ("The citation rule of the system
# prompt reads:"), word for word and whole in the inline-citation template (rag_rule_cite_inline.en.txt):
# no backticks around the tags, no sentence of ours appended (the card puts none after it).
CARD_CITATION_SENTENCES = (
    'When quoting from the context, wrap each excerpt inline with <ref id="N">excerpt</ref>, where N '
    "is the number of the cited document (the N of its [Source N] marker) and excerpt is copied "
    "verbatim from that document.",
    'From a table, quote the row you use as it is written, e.g. <ref id="N">| Revenue | 1,234 | '
    "1,100 |</ref>, and give any value you compute from it after the tag.",
)


def prompt_template_versions(lang: str) -> dict[str, str]:
    """Version hash of every template the prompts use (provenance and code versions)."""
    return {t: load_prompt(t, lang).version for t in PROMPT_TASKS}


def prompt_parts(lang: str) -> dict[str, object]:
    """What the system prompt in ``lang`` quotes from the card and what is ours, for the card.

    ``quoted``: the card's sentences found word for word, with the template holding them;
    ``ours``: every other part (the templates' other sentences: framing, the ellipsis rule, the
    References placement, the refusal rules); ``versions``: each template's version hash.
    """
    inline = load_prompt("rag_rule_cite_inline", lang)
    quoted = [s for s in CARD_CITATION_SENTENCES if s in inline.text]
    # The template is the card's rule alone when nothing but the quoted sentences is left in it.
    rest = inline.text
    for sentence in quoted:
        rest = rest.replace(sentence, "")
    whole = bool(quoted) and not rest.strip()
    return {
        "quoted": {inline.name: quoted} if quoted else {},
        "ours": [
            f"{t}.{load_prompt(t, lang).lang}"
            + (" (its other sentences)" if t == "rag_rule_cite_inline" and quoted else "")
            for t in PROMPT_TASKS
            if not (t == "rag_rule_cite_inline" and whole)
        ],
        "versions": prompt_template_versions(lang),
    }


def system_message(
    documents: Sequence[tuple[str, str]], lang: str, citation_style: str, refusal_rule: str, phrase: str
) -> str:
    """The system message: instructions with the drawn variants, then the OpenRAG documents."""
    cite = load_prompt(
        "rag_rule_cite_references" if citation_style == REFERENCE else "rag_rule_cite_inline", lang
    )
    if refusal_rule == STRICT:
        refuse = load_prompt("rag_rule_refusal_strict", lang).render(phrase=phrase).strip()
    else:
        refuse = load_prompt("rag_rule_refusal_generic", lang).text.strip()
    return (
        load_prompt("rag_system", lang)
        .render(citation_rule=cite.text.strip(), refusal_rule=refuse, documents=render_documents(documents))
        .strip()
    )


@dataclass(slots=True)
class _PoolEntry:
    title: str
    text: str
    lowered: str


def replacement_pool(records: Sequence[HotpotRecord]) -> list[_PoolEntry]:
    """Non-gold paragraphs of every record, one per title (from the smallest record id), by title.

    Paragraphs with colliding markup never enter the pool, so a replacement cannot break a twin.
    """
    best: dict[str, tuple[str, str]] = {}
    for rec in records:
        gold = set(rec.supporting_titles)
        for title, sents in rec.context:
            if title in gold or not sents:
                continue
            text = join_sentences(sents)
            if not text or collides(title) or collides(text) or "\n" in title:
                continue
            if title not in best or rec.id < best[title][0]:
                best[title] = (rec.id, text)
    return [_PoolEntry(t, best[t][1], best[t][1].lower()) for t in sorted(best)]


def _draw_replacements(
    pool: Sequence[_PoolEntry], k: int, rec: HotpotRecord, rng_key: tuple[int, str], exclude: set[str]
) -> list[_PoolEntry] | None:
    """k distinct pool paragraphs about unrelated entities (not a title of the record, nor mentioning
    its gold titles or answer), drawn with the pair's RNG; None when the pool has too few."""
    rng = ids.item_rng(rng_key[0], STAGE_REPLACEMENT, rng_key[1])
    banned_titles = {t for t, _ in rec.context} | exclude
    needles = [t.lower() for t in rec.supporting_titles] + (
        [rec.answer.lower()] if len(rec.answer) > 2 else []
    )

    def fits(e: _PoolEntry) -> bool:
        return e.title not in banned_titles and not any(n in e.lowered for n in needles)

    chosen: list[_PoolEntry] = []
    seen: set[int] = set()
    # Rejection sampling first (cheap on large pools), then a seeded scan for small ones.
    for _ in range(64 * k):
        if len(chosen) == k or len(seen) == len(pool):
            break
        i = rng.randrange(len(pool)) if pool else 0
        if not pool or i in seen:
            continue
        seen.add(i)
        if fits(pool[i]):
            chosen.append(pool[i])
    if len(chosen) < k and pool:
        start = rng.randrange(len(pool))
        for j in range(len(pool)):
            e = pool[(start + j) % len(pool)]
            if len(chosen) == k:
                break
            if e not in chosen and fits(e):
                chosen.append(e)
    return chosen if len(chosen) == k else None


@dataclass(slots=True)
class PromptBuild(DecisionLog):
    prompts: list[RagPrompt] = field(default_factory=list)


def build_prompts(
    records: Sequence[HotpotRecord],
    *,
    seed: int = ids.DEFAULT_SEED,
    lang: str = "en",
    recipe: RagSftRecipe = HOTPOTQA_CITE_RECIPE,
    pool_records: Sequence[HotpotRecord] | None = None,
) -> PromptBuild:
    """Prompts for every record: the answerable example, and for a drawn share its unanswerable twin.

    Args:
        records: the questions to build (already limited by ``max_questions``).
        seed: the run seed.
        lang: language of the instructions and refusal phrases.
        recipe: the drawn shares (twins, both golds, References, strict rule, distractors
            dropped), the instructions' language (the refusal phrases, the prompt's ``language``
            and so the judges stay in ``lang``) and ``multi_answer``: a record whose ``level`` is
            ``unanswerable`` (no supporting document, no answer) becomes one unanswerable example
            with every document a distractor (trust_align's own unanswerable rows).
        pool_records: records whose non-gold paragraphs may replace removed golds (default:
            ``records``).

    Returns:
        the prompts (unsorted), one ledger decision per question (kept, or dropped with a reason)
        and a funnel of counts.
    """
    out = PromptBuild()
    pool = replacement_pool(pool_records if pool_records is not None else records)
    for rec in records:
        out.funnel["questions"] += 1
        decision = _build_one(rec, seed, lang, recipe, pool, out)
        out.decisions.append(decision)
        out.funnel[f"{decision.verdict}:{decision.reason}" if decision.verdict != KEPT else "kept"] += 1
    out.funnel["examples"] = len(out.prompts)
    out.funnel["examples_answerable"] = sum(p.kind == ANSWERABLE for p in out.prompts)
    out.funnel["examples_unanswerable"] = sum(p.kind == UNANSWERABLE for p in out.prompts)
    return out


def _build_one(
    rec: HotpotRecord,
    seed: int,
    lang: str,
    recipe: RagSftRecipe,
    pool: Sequence[_PoolEntry],
    out: PromptBuild,
) -> Decision:
    qid = rec.id
    pid = ids.pair_id(qid)
    titles_in_context = [t for t, _ in rec.context]
    # A multi-answer source brings its own unanswerable rows: no answer, no supporting document.
    own_unanswerable = recipe.multi_answer and rec.level == UNANSWERABLE and not rec.supporting_titles
    if not rec.question.strip() or (
        not own_unanswerable and (not rec.answer.strip() or not rec.supporting_titles)
    ):
        return Decision(qid, DROPPED, "bad_record", {"pair_id": pid})
    if len(set(titles_in_context)) != len(titles_in_context):
        return Decision(qid, DROPPED, "duplicate_titles", {"pair_id": pid})
    paragraphs = {t: join_sentences(s) for t, s in rec.context}
    golds = list(rec.supporting_titles)
    if any(not paragraphs.get(g) for g in golds):
        return Decision(qid, DROPPED, "gold_missing", {"pair_id": pid})
    distractors = [t for t in titles_in_context if t not in golds]

    rng = ids.item_rng(seed, STAGE_DROP, qid)
    n_drop = rng.randint(0, math.floor(recipe.max_drop_fraction * len(distractors) + 1e-9))
    dropped = set(rng.sample(distractors, n_drop))
    shown = [t for t in titles_in_context if t not in dropped]
    rng.shuffle(shown)

    docs = [(t, paragraphs[t]) for t in shown]
    if any(not p for _, p in docs) or any("\n" in t for t, _ in docs):
        return Decision(qid, DROPPED, "markup_collision", {"pair_id": pid, "markup": "newline_or_empty"})
    for text in [rec.question, *(t for t, _ in docs), *(p for _, p in docs)]:
        hit = collides(text)
        if hit:
            return Decision(qid, DROPPED, "markup_collision", {"pair_id": pid, "markup": hit})

    citation_style = (
        REFERENCE if ids.item_uniform(seed, STAGE_CITATION, pid) < recipe.references_share else INLINE
    )
    strict = ids.item_uniform(seed, STAGE_REFUSAL, pid) < recipe.strict_share
    phrases = refusal_phrases(lang)
    phrase = phrases[ids.item_rng(seed, STAGE_PHRASE, pid).randrange(len(phrases))] if strict else ""
    rule = STRICT if strict else GENERIC

    def make(
        kind: str, twin_kind: str, documents: list[tuple[str, str]], gold: list[str], removed: list[str]
    ) -> RagPrompt:
        return RagPrompt(
            id=example_id(qid, kind),
            pair_id=pid,
            question_id=qid,
            kind=kind,
            twin_kind=twin_kind,
            split=rec.split,
            language=lang,
            question=rec.question,
            answer=rec.answer,
            titles=[t for t, _ in documents],
            paragraphs=[p for _, p in documents],
            gold_titles=gold,
            removed_titles=removed,
            citation_style=citation_style,
            refusal_rule=rule,
            refusal_phrase=phrase,
            system=system_message(documents, recipe.instructions_language, citation_style, rule, phrase),
            user=rec.question,
            chunks_total=len(documents),
            distractors_total=len(distractors),
            distractors_dropped=n_drop,
        )

    made = [
        make(UNANSWERABLE, "", docs, [], []) if own_unanswerable else make(ANSWERABLE, "", docs, golds, [])
    ]
    detail: dict[str, object] = {
        "pair_id": pid,
        "citation_style": citation_style,
        "refusal_rule": rule,
        "distractors_dropped": n_drop,
        "chunks_total": len(docs),
    }
    if ids.item_uniform(seed, STAGE_TWIN, qid) < recipe.twin_share:
        twin_kind = (
            TWIN_BOTH if ids.item_uniform(seed, STAGE_TWIN_KIND, pid) < recipe.twin_both_share else TWIN_ONE
        )
        gold_shown = [g for g in golds if g in shown]
        if twin_kind == TWIN_BOTH or len(gold_shown) < 2:
            removed = gold_shown
        else:
            removed = [gold_shown[ids.item_rng(seed, STAGE_TWIN_GOLD, pid).randrange(len(gold_shown))]]
        repl = _draw_replacements(pool, len(removed), rec, (seed, pid), set())
        if repl is None:
            out.funnel["twin_no_replacement"] += 1
            detail["twin"] = "no_replacement"
        else:
            by_title = dict(zip(removed, repl, strict=True))
            twin_docs = [(by_title[t].title, by_title[t].text) if t in by_title else (t, p) for t, p in docs]
            made.append(make(UNANSWERABLE, twin_kind, twin_docs, [], removed))
            detail["twin"] = twin_kind
            detail["replacements"] = [e.title for e in repl]
    out.prompts.extend(made)
    return Decision(qid, KEPT, "prompted", detail)


OVER_TOKEN_BUDGET = "over_token_budget"


def within_token_budget(
    records: Sequence[HotpotRecord], count_tokens: Callable[[Sequence[str]], list[int]], budget: int
) -> tuple[list[HotpotRecord], list[Decision]]:
    """The records whose documents fit ``budget`` tokens, and a dropped decision for each other one.

    A question's documents are every paragraph of its context (golds and distractors, before any
    is dropped), each joined as the layout shows it; the count is the sum over them. ``budget``
    <= 0 keeps every record. A dropped question gets no twin, so twins go together.
    """
    if budget <= 0 or not records:
        return list(records), []
    texts = [join_sentences(s) for r in records for _, s in r.context]
    counts = iter(count_tokens(texts))
    kept: list[HotpotRecord] = []
    dropped: list[Decision] = []
    for r in records:
        n = sum(next(counts) for _ in r.context)
        if n > budget:
            dropped.append(Decision(r.id, DROPPED, OVER_TOKEN_BUDGET, {"tokens": n, "budget": budget}))
        else:
            kept.append(r)
    return kept, dropped
