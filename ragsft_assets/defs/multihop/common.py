"""What every multihop asset shares: the asset decorator, the recipe config, ledger and documents.

No ``from __future__ import annotations``: Dagster resolves config and resource types at
decoration time.
"""

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import dagster as dg

from ragsft_assets import recipes
from ragsft_assets import stage_versions as versions
from ragsft_assets.defs.automation.policies import LLM_RETRY_POLICY
from ragsft_assets.defs.partitions import snapshot_language, snapshot_partitions
from ragsft_assets.ledger import Decision, ledger_table
from ragsft_assets.llm.types import ChatModel
from ragsft_assets.multihop import generation
from ragsft_assets.multihop import recipes as mh_recipes
from ragsft_assets.multihop.stage_fields import stage_field_rows
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.stage_versions import TemplateText as TemplateText
from ragsft_assets.stage_versions import shipped_template as shipped_template
from ragsft_assets.stage_versions import template_folder as template_folder

GROUP = "multihop"
PRODUCT = generation.PRODUCT  # ledger product of the production (``default``)
# The filters decide membership of the filtered configurations, not of ``default``: their ledger rows
# carry this product so a question of ``default`` keeps its final verdict there.
FILTER_PRODUCT = f"{generation.PRODUCT}_filtered"
KEPT = "kept"


def multihop_asset(
    *, llm: bool = False, retry: bool = False, group: str = GROUP, **kwargs: Any
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """``dg.asset`` on snapshot partitions, Parquet, the family's group; ``llm`` runs it in the GPU
    pool (two never share one GPU) and ``retry`` adds the LLM retry policy."""
    extra: dict[str, Any] = {"pool": "gpu"} if llm else {}
    if retry:
        extra["retry_policy"] = LLM_RETRY_POLICY
    return dg.asset(
        partitions_def=snapshot_partitions, group_name=group, kinds={"parquet"}, **extra, **kwargs
    )


# asset -> the prompt tasks its code version follows; filled as the stages are declared
# (:func:`stage_version`), so a test can recompute every version from other template texts.
STAGE_TASKS: dict[str, tuple[str, ...]] = {}
PROMPT_LANGS = ("en", "fr")


def _recipe_fields(asset: str) -> dict[str, Any] | None:
    """The recipe fields ``asset`` reads (``stage_fields.STAGE_FIELDS``) of the config it builds."""
    if asset not in mh_recipes.ASSET_RECIPE:
        return None
    rows = stage_field_rows(asset, recipes.record(mh_recipes.resolve(asset, None)))
    return {r["field"]: r["value"] for r in rows}


def stage_version(asset: str, tasks: Sequence[str] = (), texts: TemplateText | None = None) -> str:
    """The code version of a multihop stage, derived, never bumped by hand
    (``stage_versions.derived_version``): its prompt templates (every task, in each of
    :data:`PROMPT_LANGS`) and the recipe fields it reads of the config it builds
    (``multihop.recipes.ASSET_RECIPE``, ``multihop.stage_fields``). ``texts``: where template texts
    come from (the shipped ones by default). Records the tasks in :data:`STAGE_TASKS` and the stage
    in ``stage_versions.STAGES``."""
    STAGE_TASKS[asset] = tuple(tasks)
    spec = versions.StageSpec(tuple(tasks), PROMPT_LANGS, partial(_recipe_fields, asset))
    versions.STAGES[asset] = spec
    return spec.version(texts)


def stage_versions(texts: TemplateText | None = None) -> dict[str, str]:
    """Every declared stage's code version, from ``texts`` (a patched template folder in a test)."""
    return {a: stage_version(a, tasks, texts) for a, tasks in sorted(STAGE_TASKS.items())}


class RecipeConfig(dg.Config):
    """The recipe an asset applies: the card's values for a config, some fields overridden."""

    # None: the recipe of the config this asset builds (default, filtered, ...: one per entry of
    # published_configs.py, ``multihop.recipes.ASSET_RECIPE``); another name applies that config's
    # card values
    recipe: str | None = None
    overrides: dict[str, Any] = {}  # fields of the recipe, e.g. {"max_per_bridge": 3}

    def resolved(self, asset: str) -> mh_recipes.MultihopRecipe:
        return mh_recipes.resolve(asset, self.recipe, self.overrides)


def recipe_metadata(
    store: ArtifactStore, partition: str, asset: str, recipe: mh_recipes.MultihopRecipe
) -> dict[str, Any]:
    """Write the recipe record beside the asset's files and return it as the ``recipe`` metadata."""
    rec = recipes.record(recipe)
    recipes.write_record(store.root / partition / asset, rec)
    return {
        # first: the fields this stage reads, each beside the card's value (the record has them all)
        "recipe_fields": recipe_fields_table(asset, rec),
        "recipe": dg.MetadataValue.json(rec),
        "recipe_card": recipes.card_sentence(rec),
    }


RECIPE_FIELDS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("field", "string"),
        dg.TableColumn("value", "string", description="what this run used"),
        dg.TableColumn("card", "string", description="the card's value"),
        dg.TableColumn("as_card", "bool", description="whether the run used the card's value"),
    ]
)


def recipe_fields_table(asset: str, rec: dict[str, Any]) -> dg.TableMetadataValue:
    """The recipe fields ``asset`` reads (``multihop.stage_fields``) as a table value."""
    rows = [
        dg.TableRecord({**r, "value": json.dumps(r["value"]), "card": json.dumps(r["card"])})
        for r in stage_field_rows(asset, rec)
    ]
    return dg.MetadataValue.table(rows, schema=RECIPE_FIELDS_SCHEMA)


def write_ledger(
    store: ArtifactStore, partition: str, stage: str, decisions: Sequence[Decision], product: str = PRODUCT
) -> int:
    store.write_ledger(ledger_table(partition, product, stage, list(decisions)), partition, stage)
    return len(decisions)


def role_model(stage: str, role: str, **models: ChatModel) -> ChatModel:
    """The model bound to the LLM ``role`` a stage's recipe names, among the ones it accepts.

    Raises:
        ValueError: a role the stage does not take (the message lists those it does).
    """
    if role not in models:
        raise ValueError(f"{stage} role {role!r} is not one of {sorted(models)}")
    return models[role]


def language(partition: str, configured: str | None = None) -> str:
    """The prompt language: the run config's, else the partition key's (20240916.fr -> fr)."""
    return configured or snapshot_language(partition)


def docs(store: ArtifactStore, partition: str) -> dict[str, generation.Doc]:
    return generation.docs_by_id(store.read(partition, "abstracts"))


def pair_documents(
    store: ArtifactStore, partition: str
) -> tuple[dict[str, generation.Doc], dict[str, dict[str, Any]]]:
    """The partition's abstracts by id and its question drafts by question id (A and B of each question)."""
    drafts = {d["id"]: d for d in store.read(partition, "question_drafts").to_pylist()}
    return docs(store, partition), drafts


def questions(store: ArtifactStore, partition: str) -> list[dict[str, Any]]:
    """``id, question, answer`` of every question of ``default`` (none when it is not written)."""
    if not store.files(partition, "multihop_questions"):
        return []
    return store.read(partition, "multihop_questions").select(["id", "question", "answer"]).to_pylist()
