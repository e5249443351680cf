"""Turning a model's raw text into (answer, reasoning, parsed JSON, status). Never raises."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
import orjson

from ragsft_assets.llm.types import STATUS_OK, STATUS_UNREADABLE

_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Separate ``<think>...</think>`` blocks from the answer.

    Returns (answer, reasoning); an unclosed ``<think>`` swallows the rest (the model
    never answered), which leaves an empty answer.
    """
    blocks = _THINK_RE.findall(text)
    if not blocks and "</think>" not in text:
        return text.strip(), None
    if not blocks:  # some templates open the think block in the prompt: only the closing tag shows
        reasoning, _, answer = text.partition("</think>")
        return answer.strip(), reasoning.strip()
    answer = _THINK_RE.sub("", text)
    return answer.strip(), "\n".join(b.strip() for b in blocks)


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parse a JSON answer, tolerating a code fence or prose around one object.

    Returns (value, error): error is None on success.
    """
    candidate = text.strip()
    m = _FENCE_RE.match(candidate)
    if m:
        candidate = m.group(1)
    try:
        return orjson.loads(candidate), None
    except orjson.JSONDecodeError:
        pass
    start, end = candidate.find("{"), candidate.rfind("}")
    if start != -1 and end > start:
        try:
            return orjson.loads(candidate[start : end + 1]), None
        except orjson.JSONDecodeError as exc:
            return None, f"invalid JSON: {exc}"
    return None, "no JSON object in the answer"


@lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Any:
    # ``jsonschema.validate`` checks the schema against its meta-schema on every call, which costs
    # more than the validation itself; a batch of thousands of answers shares a handful of schemas.
    schema = orjson.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_error(value: Any, json_schema: Mapping[str, Any]) -> str | None:
    """The message of the best-matching schema violation of ``value`` (None when it matches)."""
    validator = _validator(orjson.dumps(json_schema, option=orjson.OPT_SORT_KEYS))
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return None if error is None else error.message


def interpret(
    text: str, json_schema: Mapping[str, Any] | None
) -> tuple[str, str | None, Any, str, str | None]:
    """Interpret raw model text.

    Returns (answer, reasoning, parsed, status, error): ``parsed`` is the validated JSON
    object when a schema is given; status is ``unreadable`` when it does not parse or
    match (the raw answer is kept either way).
    """
    answer, reasoning = split_reasoning(text)
    if json_schema is None:
        return answer, reasoning, None, STATUS_OK, None
    value, error = parse_json(answer)
    if error is not None:
        return answer, reasoning, None, STATUS_UNREADABLE, error
    mismatch = schema_error(value, json_schema)
    if mismatch is not None:
        return answer, reasoning, None, STATUS_UNREADABLE, f"schema mismatch: {mismatch}"
    return answer, reasoning, value, STATUS_OK, None
