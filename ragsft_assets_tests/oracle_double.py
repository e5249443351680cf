"""An "oracle" test double that plays every LLM role of the whole graph competently.

It reads the prompts the way a good model would (the documents, the question) and answers
what the pipeline hopes for, so that an end-to-end run keeps rows at every stage. It remembers
the questions it wrote, which lets it judge ablations and write cited answers for them.
Tests only: it knows the prompt layouts of this package and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from ragsft_assets_tests.llm_double import ScriptedChatModel

_DOC_RE = re.compile(r"Document ([AB]) ?: (.+)\n((?:\[\d+\] .*\n?)+)")
_ALIAS_RE = re.compile(r"(?:« |\")(.+?)(?: »|\"), (?:qui|which)")
_YEAR_RE = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_SOURCE_RE = re.compile(
    r"\[Source (\d+)\]\n\* filename: ([^\n]*)\n\n\[CHUNK_START\]\n\n(.*?)\n\n\[CHUNK_END\]", re.S
)
_QUESTION_RE = re.compile(r"Question ?: (.+)")


@dataclass(frozen=True)
class Written:
    answer: str
    a_title: str
    b_title: str
    alias: str


_CRITERIA = (
    "correct_answer", "bridge_in_a", "fact_in_b", "both_documents_needed", "clear_question", "minimal_answer"
)  # fmt: skip


class Oracle:
    def __init__(self) -> None:
        self.questions: dict[str, Written] = {}

    # -- roles -------------------------------------------------------------------------------
    def __call__(self, messages: Sequence[dict[str, str]]) -> str:
        text = "\n".join(m["content"] for m in messages)
        if '"minimal_answer"' in text:  # criteria_annotation: the oracle's questions meet all six
            return orjson.dumps({c: True for c in _CRITERIA}).decode()
        if '"b_only_candidate"' in text:  # bridge_judge: the oracle's bridge is B alone
            reply = {"analysis": "oracle", "descriptor": "", "candidates": [], "b_only_candidate": True}
            return orjson.dumps({**reply, "a_states_relation": True, "question_names_b": False}).decode()
        if '"publishability"' in text:  # publishability_score (train): publishable as it is
            return orjson.dumps({"analysis": "oracle", "publishability": 5}).decode()
        if '"descriptor_in_question"' in text:  # descriptor_check (train)
            checks = ("descriptor_in_question", "descriptor_hides_bridge", "descriptor_stated_by_a")
            return orjson.dumps({"analysis": "oracle", **{c: True for c in checks}}).decode()
        if '"no_meta_wording"' in text:  # language_judge
            checks = ("fluent", "unique_referents", "no_meta_wording", "answer_type_and_scope")
            return orjson.dumps({"analysis": "oracle", **{c: True for c in checks}}).decode()
        if '"questions"' in text and "Document A" in text:
            return self.write_questions(text)
        if '"refuses"' in text:
            refuses = "ne permettent pas" in text or "do not allow" in text
            return orjson.dumps({"refuses": refuses, "reason": "oracle"}).decode()
        if "Réponse de référence" in text or "Reference answer" in text:
            return self.grade(text)
        if '"score"' in text:
            return orjson.dumps({"score": 5, "reason": "oracle"}).decode()
        if "[CHUNK_START]" in text:
            return self.answer_with_citations(messages)
        if '"status"' in text and ("désigne une entité" in text or "points to an entity" in text):
            return self.first_hop(text)
        if "IMPOSSIBLE" in text:
            return self.ablation(text)
        return "?"

    def write_questions(self, prompt: str) -> str:
        docs = {m.group(1): (m.group(2).strip(), m.group(3)) for m in _DOC_RE.finditer(prompt)}
        alias_m = _ALIAS_RE.search(prompt)
        if set(docs) != {"A", "B"} or not alias_m:
            return '{"questions": []}'
        (a_title, a_block), (b_title, b_block) = docs["A"], docs["B"]
        alias = alias_m.group(1)
        a_lines = [ln.split("] ", 1)[1] for ln in a_block.strip().splitlines()]
        b_lines = [ln.split("] ", 1)[1] for ln in b_block.strip().splitlines()]
        support_a = next((i for i, s in enumerate(a_lines) if alias in s), 0)
        out = []
        seen: set[str] = set()
        for j, sentence in enumerate(b_lines):
            for year in _YEAR_RE.findall(sentence):
                if year in seen or year in " ".join(a_lines):
                    continue
                seen.add(year)
                q = f"Quelle année du texte ({len(out) + 1}) concerne le sujet évoqué dans « {a_title} » ?"
                self.questions[q] = Written(year, a_title, b_title, alias)
                out.append({"question": q, "answer": year, "support_a": [support_a], "support_b": [j]})
        return orjson.dumps({"questions": out[:3]}).decode()

    def ablation(self, prompt: str) -> str:
        m = _QUESTION_RE.findall(prompt)
        known = self.questions.get(m[-1].strip()) if m else None
        if known is None:
            return "IMPOSSIBLE"
        both = f": {known.a_title}\n" in prompt and f": {known.b_title}\n" in prompt
        return known.answer if both else "IMPOSSIBLE"

    def first_hop(self, prompt: str) -> str:
        # The first_hop judge (A alone): the oracle names B through the alias its question used.
        m = _QUESTION_RE.findall(prompt)
        known = self.questions.get(m[-1].strip()) if m else None
        if known is None:
            return orjson.dumps({"entity": None, "status": "none"}).decode()
        return orjson.dumps({"entity": known.alias or known.b_title, "status": "one"}).decode()

    def answer_with_citations(self, messages: Sequence[dict[str, str]]) -> str:
        system = messages[0]["content"]
        question = messages[-1]["content"]
        known = next((w for q, w in self.questions.items() if q in question), None)
        sources = {title.strip(): (int(n), body) for n, title, body in _SOURCE_RE.findall(system)}
        refusal = "Les documents fournis ne permettent pas de répondre à cette question."
        if known is None or known.a_title not in sources or known.b_title not in sources:
            return refusal
        na, a_body = sources[known.a_title]
        nb, b_body = sources[known.b_title]
        if known.alias not in a_body or known.answer not in b_body:
            return refusal
        if 'forme <ref id="N"/>' in system or 'form <ref id="N"/>' in system:
            return f'La réponse est {known.answer}.\n\nReferences:\n<ref id="{na}"/>\n<ref id="{nb}"/>'
        # Quote the whole sentence holding the alias (the answer): a bare name or year is too short
        # a quote for the strict citation verifier.
        return (
            f'La réponse est {known.answer} <ref id="{na}">{_sentence_with(a_body, known.alias)}</ref> '
            f'<ref id="{nb}">{_sentence_with(b_body, known.answer)}</ref>.'
        )

    def grade(self, prompt: str) -> str:
        ref = re.search(r"(?:Réponse de référence|Reference answer) ?: (.+)", prompt)
        tail = prompt.split("Réponse de l'assistant", 1)[-1] if "Réponse de l'assistant" in prompt else prompt
        score = 5 if ref and ref.group(1).strip() in tail else 1
        return orjson.dumps({"score": score, "reason": "oracle"}).decode()


def oracle_model() -> ScriptedChatModel:
    """One scripted model playing generator, judge and base model (they share the memory)."""
    return ScriptedChatModel(Oracle(), model_id="oracle-double")


def _sentence_with(body: str, needle: str) -> str:
    """The first sentence of ``body`` that holds ``needle`` (the needle itself if none does)."""
    return next((s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if needle in s), needle)
