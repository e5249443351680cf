"""Which model roles the current run's selection uses: the one-GPU split counts only their engines.

Registered with ``llm.gpu_share.set_selection_provider`` by ``defs/resources``. Inside a step, the
run's selected assets (every asset of its job when the run selects none) and the resources they
require: a role's resource key is its name (``generator``, ``judge``, ``annotator``, ``base_model``,
``embedder``). Outside a step (a notebook, a bench), None: every role of the environment counts.
"""

from __future__ import annotations


def run_roles() -> frozenset[str] | None:
    """The resource keys the current run's selected assets require; None outside a step."""
    from dagster._core.execution.context.compute import current_execution_context

    ctx = current_execution_context.get()
    if ctx is None:
        return None
    op_ctx = ctx.op_execution_context
    graph = op_ctx.job_def.asset_layer.asset_graph
    keys = op_ctx.dagster_run.asset_selection or graph.get_all_asset_keys()
    roles: set[str] = set()
    for key in keys:
        if graph.has(key) and graph.get(key).is_materializable:
            roles |= set(graph.get(key).assets_def.required_resource_keys)
    return frozenset(roles)
