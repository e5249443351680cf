"""Thinking mode and token budgets: what a request really asks of the model, resolved once.

Three places can say whether a chat call thinks (``enable_thinking`` of the model's chat
template), and the first that is set wins:

1. the role (``LLMResource.enable_thinking``, ``RAGSFT_<ROLE>_ENABLE_THINKING``): the user's word;
2. the task (``SamplingParams.enable_thinking``, or ``chat_template_kwargs={"enable_thinking": ...}``
   passed to ``chat``): the default the stage's card gives;
3. neither: nothing is sent and the model's own default applies.

A call that thinks gets the task's ``thinking_max_tokens`` (else the role's, else
``max_tokens``) as its budget, because the reasoning counts against it. OpenAI reasoning
models always reason: they get the same budget and no ``chat_template_kwargs`` (their API
refuses unknown fields).

``effective_request`` returns the request a backend receives and the cache key is computed
from: the resolved switch inside ``chat_template_kwargs``, the resolved ``max_tokens``, and the
two task fields cleared, so a stage that states its default either way gets the same key.
"""

from __future__ import annotations

from dataclasses import replace

from ragsft_assets.llm.backends.base import Request

# Budget of a reasoning-model call whose task and role set none: room for the reasoning.
DEFAULT_REASONING_BUDGET = 4096


def effective_request(
    req: Request,
    role_thinking: bool | None = None,
    role_thinking_max_tokens: int | None = None,
    *,
    template_kwargs: bool = True,
    reasoning_model: bool = False,
) -> Request:
    """The request as sent: thinking switch and budget resolved (see the module docstring).

    Args:
        req: the stage's request.
        role_thinking: the role's ``enable_thinking`` (None: unset).
        role_thinking_max_tokens: the role's budget for calls that think (None: unset).
        template_kwargs: whether the backend takes ``chat_template_kwargs`` at all.
        reasoning_model: an OpenAI reasoning model (it always reasons).
    """
    p = req.params
    if req.is_completion:  # raw prompts have no chat template: nothing to switch
        if p.enable_thinking is None and p.thinking_max_tokens is None:
            return req
        return replace(req, params=replace(p, enable_thinking=None, thinking_max_tokens=None))
    kwargs = dict(req.chat_template_kwargs) if req.chat_template_kwargs else {}
    task = p.enable_thinking if p.enable_thinking is not None else kwargs.get("enable_thinking")
    thinking = role_thinking if role_thinking is not None else task
    if thinking is None:
        kwargs.pop("enable_thinking", None)
    else:
        kwargs["enable_thinking"] = bool(thinking)
    max_tokens = p.max_tokens
    if thinking or reasoning_model:
        budget = p.thinking_max_tokens or role_thinking_max_tokens
        if budget is None and reasoning_model:
            budget = max(p.max_tokens, DEFAULT_REASONING_BUDGET)
        max_tokens = budget or p.max_tokens
    if not template_kwargs or reasoning_model:
        kwargs = {}
    params = p
    if p.enable_thinking is not None or p.thinking_max_tokens is not None or max_tokens != p.max_tokens:
        params = replace(p, max_tokens=max_tokens, enable_thinking=None, thinking_max_tokens=None)
    new_kwargs = kwargs or None
    if params is p and new_kwargs == (dict(req.chat_template_kwargs) if req.chat_template_kwargs else None):
        return req
    return replace(req, params=params, chat_template_kwargs=new_kwargs)


def thinks(req: Request) -> bool | None:
    """The resolved thinking switch of an ``effective_request`` (None: the model's default)."""
    if not req.chat_template_kwargs:
        return None
    value = req.chat_template_kwargs.get("enable_thinking")
    return None if value is None else bool(value)
