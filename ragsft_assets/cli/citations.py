"""``ragsft citations check FILE``: check responses with the rules that built the RAG SFT data."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import click
import orjson

from ragsft_assets.rag_sft.citations import MIN_WORDS, PARTIAL_WORD, TOO_SHORT, check_response
from ragsft_assets.rag_sft.layout import parse_documents


def check_row(row: Any, *, strict: bool = True, min_words: int = MIN_WORDS) -> dict[str, object]:
    """The report of one JSON row (chat row or documents row); raises ValueError on a bad shape.

    Chat row: ``{"messages": [...], "supporting_facts_titles": [...]?}``: the documents are the
    OpenRAG blocks of the system message(s), the response the last assistant message.
    Documents row: ``{"documents": [{"title", "text"}], "response": str, "gold_titles": [...]?}``.
    ``strict`` and ``min_words`` are the verifier's strict quoting (``partial_word``,
    ``too_short``), as a recipe's ``citation_check``/``min_quote_words`` set them. Whatever
    ``strict`` says, the report holds both checks: ``passes_card`` (the card's check: verbatim, or
    fragments verbatim and in order around an ellipsis, plus the citation F1) and ``quote_flags``
    (the stricter rules the tags break, which the card's configs flag without dropping).
    """
    if not isinstance(row, dict):
        raise ValueError("a row must be a JSON object")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("'messages' must be a list of objects")
        system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        assistant = [m for m in messages if m.get("role") == "assistant"]
        if not assistant:
            raise ValueError("no assistant message")
        response = assistant[-1].get("content")
        docs = parse_documents(system)
        titles = [t for t, _ in docs]
        texts = [p for _, p in docs]
        gold = row.get("supporting_facts_titles")
    elif "documents" in row and "response" in row:
        documents = row["documents"]
        if not isinstance(documents, list) or not all(isinstance(d, dict) for d in documents):
            raise ValueError("'documents' must be a list of {title, text} objects")
        titles = [str(d.get("title", "")) for d in documents]
        texts = [str(d.get("text", "")) for d in documents]
        response = row["response"]
        gold = row.get("gold_titles")
    else:
        raise ValueError("expected 'messages' or 'documents' + 'response'")
    if not isinstance(response, str):
        raise ValueError("the response must be a string")
    if gold is not None and (not isinstance(gold, list) or not all(isinstance(g, str) for g in gold)):
        raise ValueError("gold titles must be a list of strings")
    report = check_response(
        response, texts, titles, gold or None, strict=strict, min_words=min_words
    ).to_dict()
    card = check_response(response, texts, titles, gold or None, strict=False)
    stricter = check_response(response, texts, titles, gold or None, strict=True, min_words=min_words)
    report["passes_card"] = card.passes
    report["quote_flags"] = sorted(
        {t.verdict for t in stricter.tags if t.verdict in (PARTIAL_WORD, TOO_SHORT)}
    )
    return report


def check_lines(
    lines: Iterable[str], *, strict: bool = True, min_words: int = MIN_WORDS
) -> Iterator[tuple[bytes, bool]]:
    """One output JSON line per non-blank input line, and whether it is an error row."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            yield orjson.dumps({"line": n, "error": f"invalid JSON: {exc}"}), True
            continue
        try:
            yield orjson.dumps({"line": n, **check_row(row, strict=strict, min_words=min_words)}), False
        except ValueError as exc:
            yield orjson.dumps({"line": n, "error": str(exc)}), True


@click.group()
def citations() -> None:
    """Citation tools for RAG SFT data and the models trained on it."""


@click.command("check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--out", type=click.Path(dir_okay=False, writable=True), default=None, help="Write here, not stdout."
)
@click.option(
    "--strict/--no-strict",
    default=True,
    show_default=True,
    help="Strict quoting: a fragment cut inside a word (partial_word) or shorter than --min-words "
    "(too_short) fails its tag (a recipe's citation_check: drop). --no-strict checks as the card "
    "(citation_check: flag). Every row reports both: passes_card and quote_flags.",
)
@click.option(
    "--min-words",
    type=click.IntRange(min=1),
    default=MIN_WORDS,
    show_default=True,
    help="The fewest words a quoted fragment may hold under --strict.",
)
def check(file: str, out: str | None, strict: bool, min_words: int) -> None:
    """Check the citations of each JSON line of FILE; print one JSON report per line.

    Each line is a chat row (``messages``, optional ``supporting_facts_titles``) or
    ``{"documents": [{"title", "text"}], "response", "gold_titles"}``. Reports hold ``tags``
    (id, verdict: ok/unknown_id/not_found/out_of_order/partial_word/too_short/malformed),
    ``defects``, ``tags_valid``, ``precision``/``recall``/``f1`` (null without golds) and
    ``passes``; the same fields with or without ``--strict``. Both checks are reported on every
    row: ``passes_card`` (the card's check, no stricter rule) and ``quote_flags`` (the stricter
    rules the tags break: partial_word, too_short). Lines that are not valid JSON get
    an error row; the exit code is then 1.
    """
    errors = 0
    src: TextIO = sys.stdin if file == "-" else open(file, encoding="utf-8")  # noqa: SIM115
    dst: Any = open(out, "wb") if out else sys.stdout.buffer  # noqa: SIM115
    try:
        for data, is_error in check_lines(src, strict=strict, min_words=min_words):
            errors += is_error
            dst.write(data + b"\n")
    finally:
        if src is not sys.stdin:
            src.close()
        if out:
            dst.close()
        else:
            dst.flush()
    if errors:
        click.echo(f"{errors} row(s) could not be checked", err=True)
        sys.exit(1)


citations.add_command(check)
