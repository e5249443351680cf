"""Reading an outside question set into HotpotQA-layout rows, through a preset or a mapping file.

A *mapping* names, for each field of the HotpotQA layout, the source column holding it::

    {"id": "_id", "question": "question", "answer": "answer", "context": "context",
     "supporting_facts": "supporting_facts", "type": "type", "level": "level", "split": null}

``context`` may be the original list of ``[title, [sentences]]`` or the hub's struct of lists
``{title: [...], sentences: [[...]]}``; ``supporting_facts`` likewise (``[[title, sent_id]]`` or
``{title, sent_id}``). ``id``, ``type``, ``level`` and ``split`` are optional: a missing id is
24 hex chars of SHA-256 over the question and its document titles, so a question repeated with
other documents gets another id. Presets are mappings for known sources; a mapping file (JSON or
YAML) does the same for any other QA set.

A source whose evidence is one plain text per record (NarrativeQA's summary) maps ``passage``
instead of ``context`` and ``supporting_facts``: the passage becomes the record's one context
paragraph (title: the passage's 24-hex id, ``passage_title``; sentences: the text, whole, as its one
sentence) and that paragraph is the supporting fact. ``answer`` may be a list of reference answers
(NarrativeQA has two): the first non-empty one is the answer.

A conversational source (ChatQA's ``synthetic_convqa``: a document and a conversation) maps
``conversation`` to a list of ``{role, content}`` turns: the last turn, a user's, is the question;
the earlier turns ride along as ``history`` (a column only such sources have) and go into the
training conversation before it; ``answer`` is the target. A source whose documents and question
are one RAG-TGE prompt (``Document [n](Title: t): text`` lines, then ``Question: q``) maps
``prompt``: its documents become the context, the documents the answer cites (``[n]``) the
supporting facts, and the answer keeps its ``[n]`` markers, renumbered to the cited documents'
order (``[1]`` = the first supporting fact): the long-context family renumbers them again to where
each document is shown (``SourceRead.cites``).

A field may name a nested column with dots (``question.text``, ``document.summary.text``); over a
list of objects it takes each one's field (``answers.text``): the hub's ``deepmind/narrativeqa``
rows are read this way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragsft_assets.arrow_schemas import MESSAGES
from ragsft_assets.ids import derived_id
from ragsft_assets.multihop.hotpot_format import records_table
from ragsft_assets.sources.records import SUFFIXES, SourceError, file_format, read_records

SOURCE_CONFIG = "source.json"  # written by `ragsft sources add` beside the data files
HUB_STATE = "hub.json"  # written by `ragsft sources add --hub` (sources/hub.py): not data
FIELDS = (
    *("id", "question", "answer", "context", "supporting_facts", "type", "level", "split", "passage"),
    *("conversation", "prompt"),
)
REQUIRED = ("question", "answer", "context", "supporting_facts")  # or question, answer, passage
PASSAGE_REQUIRED = ("question", "answer", "passage")
CONVERSATION_REQUIRED = ("conversation", "answer", "passage")  # the question is the last user turn
PROMPT_REQUIRED = ("prompt", "answer")  # documents and question are in the prompt
HISTORY_TYPE = MESSAGES

PRESETS: dict[str, dict[str, str | None]] = {
    # The original HotpotQA distractor JSON / JSON lines (`_id`) and the hub's `hotpot_qa`
    # Parquet, `distractor` config (`id`): both spellings of the id are looked up.
    "hotpotqa": {
        "id": "_id|id",
        "question": "question",
        "answer": "answer",
        "context": "context",
        "supporting_facts": "supporting_facts",
        "type": "type",
        "level": "level",
        "split": None,
    },
    # NarrativeQA, summary setting: passage = the plot summary. Two layouts: JSON lines {question,
    # answer: [refs], passage} (the 50 test questions of ragsft_assets_tests/data/narrativeqa), and
    # the hub's deepmind/narrativeqa rows, nested: {document: {summary: {text}}, question: {text},
    # answers: [{text}]}.
    "narrativeqa": {
        "id": "id|_id",
        "question": "question.text|question",
        "answer": "answers.text|answer|answers",
        "passage": "document.summary.text|passage|summary",
        "split": None,
    },
    # ChatQA's synthetic_convqa (nvidia/ChatQA-Training-Data): {messages: [{role, content}...] ending
    # with the user's question, document, answers: [...]}. No real row offline: fixtures only.
    "synthetic_convqa": {
        "id": "id|_id",
        "conversation": "messages|conversation",
        "passage": "document|passage",
        "answer": "answers|answer",
        "split": None,
    },
    # RAG-TGE (tdolega/rag-tge_finetuning-dataset): {prompt: "Document [n](Title: t): text" lines
    # then "Question: q", answer: sentences citing [n]}. No real row offline: fixtures only.
    "rag_tge": {"id": "id|_id", "prompt": "prompt", "answer": "answer", "split": None},
    # Trust-Align SFT rows (ALCE / Trust-Score layout: question, docs[{title, text}], answer with
    # [N] citations, gold qa_pairs / answers): not a column mapping but a reader of its own,
    # sources/trust_align.py (multi-answer rows with their reference and BM25 distractors).
    "trust_align": {"layout": "trust_align", "question": "question", "answer": "answer", "context": "docs"},
}


@dataclass(frozen=True, slots=True)
class SourceRead:
    """The rows read from a source, in the HotpotQA layout with a ``split`` column."""

    table: pa.Table
    files: list[str]
    rows_per_file: dict[str, int]
    cites: bool = False  # the answers cite their supporting facts as [n], in their order (RAG-TGE)

    @property
    def num_rows(self) -> int:
        return self.table.num_rows


@dataclass(frozen=True, slots=True)
class SourceScan:
    """What :func:`scan_source` found: the questions a read would give, without holding them."""

    num_rows: int
    files: list[str]
    rows_per_file: dict[str, int]


def load_mapping(preset: str | None = None, mapping_file: Path | None = None) -> dict[str, str | None]:
    """The mapping of a preset or of a mapping file (JSON or YAML); raises SourceError when invalid."""
    if (preset is None) == (mapping_file is None):
        raise SourceError("give exactly one of a preset or a mapping file")
    if preset is not None:
        if preset not in PRESETS:
            raise SourceError(f"unknown preset {preset!r}; known presets: {', '.join(sorted(PRESETS))}")
        return dict(PRESETS[preset])
    assert mapping_file is not None
    if not mapping_file.is_file():
        raise SourceError(f"mapping file {mapping_file} does not exist")
    import yaml  # YAML is a superset of JSON: one parser for both spellings

    try:
        raw = yaml.safe_load(mapping_file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SourceError(f"mapping file {mapping_file}: not JSON or YAML ({exc})") from exc
    if not isinstance(raw, Mapping):
        raise SourceError(f"mapping file {mapping_file}: expected an object of field -> column")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise SourceError(f"mapping file {mapping_file}: unknown field(s) {unknown}; fields are {FIELDS}")
    missing = [f for f in _required(raw) if not raw.get(f)]
    if missing:
        raise SourceError(f"mapping file {mapping_file}: no column for required field(s) {missing}")
    return {f: (str(raw[f]) if raw.get(f) else None) for f in FIELDS}


def _required(mapping: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields a mapping must name, by the shape of its source."""
    if mapping.get("prompt"):
        return PROMPT_REQUIRED
    if mapping.get("conversation"):
        return CONVERSATION_REQUIRED
    return PASSAGE_REQUIRED if mapping.get("passage") else REQUIRED


def source_files(path: Path) -> list[Path]:
    """The data files of a file or folder (``*.json``, ``*.jsonl``, ``*.jsonl.gz``, ``*.parquet``), sorted."""
    if path.is_file():
        if file_format(path) not in SUFFIXES:
            raise SourceError(f"{path}: unknown format {path.suffix!r}; expected one of {SUFFIXES}")
        return [path]
    if not path.is_dir():
        raise SourceError(f"{path} does not exist")
    files = sorted(
        p
        for p in path.iterdir()
        if p.is_file() and file_format(p) in SUFFIXES and p.name not in (SOURCE_CONFIG, HUB_STATE)
    )
    if not files:
        raise SourceError(f"no data file ({', '.join('*' + s for s in SUFFIXES)}) in {path}")
    return files


def _nested(value: Any, path: list[str]) -> Any:
    """``value``'s field at a dotted path; over a list of objects, the list of their fields."""
    for i, key in enumerate(path):
        if isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value):
            return [_nested(v, path[i:]) for v in value]
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _column(row: Mapping[str, Any], spec: str | None) -> Any:
    if not spec:
        return None
    for name in spec.split("|"):  # "a|b": the first present column; "a.b": a nested field
        value = row.get(name) if "." not in name else _nested(row, name.split("."))
        if value is not None:
            return value
    return None


def passage_title(text: str) -> str:
    """The context title of a ``passage``-mapped record: 24 hex of SHA-256 of the text."""
    return derived_id("passage", text)


def _answer(value: Any) -> str | None:
    """The answer of a record: the value itself, or the first non-empty of a list of references."""
    if isinstance(value, list | tuple):
        return next((str(v) for v in value if v is not None and str(v).strip()), None)
    return None if value is None else str(value)  # a plain value as it is (as before lists were read)


def _pairs(value: Any, keys: tuple[str, str]) -> list[tuple[Any, Any]]:
    """``[[a, b], ...]`` or ``{keys[0]: [...], keys[1]: [...]}`` as a list of pairs."""
    if isinstance(value, Mapping):
        return list(zip(value[keys[0]], value[keys[1]], strict=True))
    return [(a, b) for a, b in value]


def _conversation(value: Any, where: str, column: str | None) -> tuple[str, list[dict[str, str]]]:
    """(question, earlier turns) of a list of ``{role, content}`` turns ending with a user turn."""
    try:
        turns = [{"role": str(t["role"]), "content": str(t["content"])} for t in value]
    except (KeyError, TypeError) as exc:
        raise SourceError(
            f"{where}: field {column!r} (conversation) is not a list of {{role, content}}"
        ) from exc
    if not turns or turns[-1]["role"] != "user":
        raise SourceError(f"{where}: field {column!r} (conversation) does not end with a user turn")
    bad = sorted({t["role"] for t in turns} - {"user", "assistant"})
    if bad:
        raise SourceError(f"{where}: field {column!r} (conversation) has turn role(s) {bad}")
    return turns[-1]["content"], turns[:-1]


_TGE_DOCUMENT = re.compile(r"Document \[(\d+)\]\(Title: (.*?)\): ?(.*)")
_TGE_CITATION = re.compile(r" ?\[(\d+)\]")


def _rag_tge_prompt(prompt: Any, answer: str, where: str) -> tuple[str, list, list, str]:
    """(question, context pairs, supporting facts, answer without markers) of a RAG-TGE prompt."""
    if not isinstance(prompt, str):
        raise SourceError(f"{where}: field 'prompt' is not a string")
    docs: list[tuple[str, list[str]]] = []
    question = None
    for line in prompt.splitlines():
        if m := _TGE_DOCUMENT.fullmatch(line.strip()):
            if int(m.group(1)) != len(docs) + 1:
                raise SourceError(f"{where}: prompt document [{m.group(1)}] out of order")
            docs.append((m.group(2), [m.group(3)]))
        elif line.startswith("Question:"):
            question = line[len("Question:") :].strip()
    if question is None or not docs:
        raise SourceError(f"{where}: field 'prompt' is not a RAG-TGE prompt (Document [n] lines, Question:)")
    cited = sorted({int(n) for n in _TGE_CITATION.findall(answer) if 1 <= int(n) <= len(docs)})
    facts = [(docs[n - 1][0], 0) for n in cited]  # none cited: no oracle, a counted rejection later
    rank = {n: i + 1 for i, n in enumerate(cited)}  # [n] -> the cited document's place among facts

    def renumber(m: re.Match[str]) -> str:
        n = rank.get(int(m.group(1)))
        return "" if n is None else f" [{n}]" if m.group(0).startswith(" ") else f"[{n}]"

    return question, docs, facts, _TGE_CITATION.sub(renumber, answer).strip()


def map_record(row: Any, mapping: Mapping[str, str | None], where: str, default_split: str) -> dict[str, Any]:
    """One source record as an HotpotQA-layout row; raises SourceError naming ``where`` and the field."""
    if not isinstance(row, Mapping):
        raise SourceError(f"{where}: expected an object, got {type(row).__name__}")
    values = {f: _column(row, mapping.get(f)) for f in FIELDS}
    by_passage = bool(mapping.get("passage"))
    for f in _required(mapping):
        if values[f] is None:
            raise SourceError(f"{where}: missing field {mapping.get(f)!r} ({f})")
    answer = _answer(values["answer"])
    if answer is None:
        raise SourceError(f"{where}: field {mapping.get('answer')!r} (answer) holds no non-empty answer")
    history: list[dict[str, str]] | None = None
    if mapping.get("conversation"):
        values["question"], history = _conversation(values["conversation"], where, mapping["conversation"])
    if mapping.get("prompt"):
        values["question"], values["context"], values["supporting_facts"], answer = _rag_tge_prompt(
            values["prompt"], answer, where
        )
    if by_passage:
        text = values["passage"]
        if not isinstance(text, str) or not text.strip():
            raise SourceError(
                f"{where}: field {mapping.get('passage')!r} (passage) is not a non-empty string"
            )
        values["context"] = [[passage_title(text), [text]]]
        values["supporting_facts"] = [[passage_title(text), 0]]
    field = "context"
    try:
        context = [
            (str(t), [str(s) for s in sents])
            for t, sents in _pairs(values["context"], ("title", "sentences"))
        ]
        field = "supporting_facts"
        facts = [(str(t), int(i)) for t, i in _pairs(values["supporting_facts"], ("title", "sent_id"))]
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"{where}: field {mapping.get(field)!r} ({field}) is malformed: {exc}") from exc
    if not context:
        raise SourceError(f"{where}: field {mapping.get('context')!r} (context) is empty")
    titles = [t for t, _ in context]
    question = str(values["question"])
    # a conversation's earlier turns are part of its identity (one document, many conversations)
    turns = [f"{t['role']}:{t['content']}" for t in history or ()]
    rid = str(values["id"]) if values["id"] is not None else derived_id(question, *titles, *turns)
    out = {
        "id": rid,
        "question": question,
        "answer": answer,
        "type": str(values["type"] or ""),
        "level": str(values["level"] or ""),
        "supporting_facts": {"title": [t for t, _ in facts], "sent_id": [i for _, i in facts]},
        "context": {"title": titles, "sentences": [s for _, s in context]},
        "split": str(values["split"] or default_split),
    }
    if history is not None:
        out["history"] = history
    return out


def read_source(path: Path, mapping: Mapping[str, str | None], default_split: str = "train") -> SourceRead:
    """Every record of a file or folder, mapped; the first bad record raises SourceError.

    Args:
        path: a data file or a folder of them (``source.json`` and other files are ignored).
        mapping: field -> column (:data:`PRESETS` or :func:`load_mapping`).
        default_split: the split of records whose mapping gives none (a file named
            ``validation*``/``dev*``/``test*`` gives that split instead).
    """
    rows: list[dict[str, Any]] = []
    per_file: dict[str, int] = {}
    files = source_files(path)
    if mapping.get("layout") == "trust_align":
        from ragsft_assets.sources import trust_align

        try:
            built = trust_align.read_files(files, lambda name: _split_from_name(name, default_split))
        except trust_align.TrustAlignError as exc:
            raise SourceError(str(exc)) from exc
        return SourceRead(trust_align.rows_table(built.rows), [f.name for f in files], dict(built.funnel))
    seen: dict[str, str] = {}
    for r in _mapped_rows(path, files, mapping, default_split, per_file):
        _check_split(path, r, seen)
        rows.append(r)
    unique = list({r["id"]: r for r in rows}.values())  # a record repeated verbatim is read once
    table = records_table(unique)
    if mapping.get("conversation"):  # the earlier turns: a column of conversational sources only
        by_id = {r["id"]: r["history"] for r in unique}
        table = table.append_column(
            "history", pa.array([by_id[i] for i in table["id"].to_pylist()], HISTORY_TYPE)
        )
    return SourceRead(table, [f.name for f in files], per_file, cites=bool(mapping.get("prompt")))


def _mapped_rows(
    path: Path,
    files: list[Path],
    mapping: Mapping[str, str | None],
    default_split: str,
    per_file: dict[str, int],
) -> Iterator[dict[str, Any]]:
    """Every record of ``files`` mapped, one at a time; counts them per file into ``per_file``."""
    for f in files:
        split = _split_from_name(f.name, default_split)
        n = 0
        for where, rec in read_records(f):
            yield map_record(rec, mapping, f"{f}, {where}", split)
            n += 1
        per_file[f.name] = n


def _check_split(path: Path, row: Mapping[str, Any], seen: dict[str, str]) -> None:
    """SourceError when ``row``'s id was seen in another split; records the id's split in ``seen``."""
    rid, split = row["id"], row["split"]
    if rid in seen and seen[rid] != split:
        raise SourceError(f"{path}: id {rid!r} appears in splits {seen[rid]!r} and {split!r}")
    seen[rid] = split


def scan_source(path: Path, mapping: Mapping[str, str | None], default_split: str = "train") -> SourceScan:
    """Check every record of a file or folder as :func:`read_source` does, keeping none of them.

    Records are streamed and mapped one at a time (only each id and its split are kept), so
    ``ragsft sources add`` validates a source of any size in flat memory. The Trust-Align layout,
    whose reader builds its rows as a whole, is read with :func:`read_source`.
    """
    if mapping.get("layout") == "trust_align":
        read = read_source(path, mapping, default_split)
        return SourceScan(read.num_rows, read.files, read.rows_per_file)
    files = source_files(path)
    per_file: dict[str, int] = {}
    seen: dict[str, str] = {}
    for r in _mapped_rows(path, files, mapping, default_split, per_file):
        _check_split(path, r, seen)
    return SourceScan(len(seen), [f.name for f in files], per_file)


def _split_from_name(name: str, default: str) -> str:
    low = name.lower()
    if "validation" in low or "dev" in low:
        return "validation"
    if "test" in low:
        return "test"
    return default


def read_source_folder(folder: Path, default_split: str = "train") -> SourceRead:
    """Read an installed source folder with the preset or mapping its ``source.json`` names."""
    cfg_path = folder / SOURCE_CONFIG
    if not cfg_path.is_file():
        raise SourceError(f"{folder} has no {SOURCE_CONFIG}: install it with `ragsft sources add`")
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    mapping = cfg.get("mapping") or PRESETS[cfg["preset"]]
    return read_source(folder, mapping, default_split)
