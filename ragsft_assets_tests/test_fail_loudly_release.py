"""A run whose LLM stage failed publishes no release; the previous release stays as it was.

The release assets need nothing of their own for this: the LLM stage fails its step
(``llm.transport_errors``) and Dagster runs nothing downstream of a failed step. Shown with the
project's assets: a release is published, then a run of ``first_hop -> mechanical_rules ->
multihop_filtered -> release`` whose judge answers HTTP 500 to every call. With the rule, the step
fails and the release folder is byte-identical; with the rule switched off for the judge
(``RAGSFT_JUDGE_MAX_ERROR_SHARE=1``), the same run "succeeds" and republishes the release built from
failed calls, which is what happened before the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from ragsft_assets.defs.multihop.assets import question_drafts
from ragsft_assets.defs.multihop.filters import CONFIG_ASSETS, first_hop, mechanical_rules
from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
from ragsft_assets.defs.resources import llm_for_role
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.fake_openai import FakeOpenAI
from ragsft_assets_tests.release_fixtures import PARTITION, write_world


def _broken(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    return 500, {}, {"error": "down"}


def _role(monkeypatch: pytest.MonkeyPatch, role: str, url: str, **extra: str) -> None:
    settings = {"BACKEND": "openai", "BASE_URLS": url, "MODEL": "served-model", "MAX_RETRIES": "0", **extra}
    for name, value in settings.items():
        monkeypatch.setenv(f"RAGSFT_{role.upper()}_{name}", value)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("rule", ["on", "off"])
def test_a_failed_llm_stage_publishes_no_release(
    rule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    store = ArtifactStore()
    write_world(store)
    pairs = store.read(PARTITION, "bridge_pairs")  # the draw order bridge_pairs records: the rows' order
    store.write(
        pairs.append_column("draw", pa.array(range(pairs.num_rows), pa.int64())), PARTITION, "bridge_pairs"
    )
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    published = dg.materialize(
        [release], resources={"store": store}, partition_key=PARTITION, instance=instance
    )
    assert published.success
    folder = tmp_path / "releases" / PARTITION
    before = _files(folder)
    assert before

    with FakeOpenAI().running() as healthy, FakeOpenAI(_broken).running() as broken:
        _role(monkeypatch, "generator", healthy.url)
        assert dg.materialize(
            [question_drafts],
            # question_drafts also holds the judge and annotator roles (its stream, off here, sends
            # the cascade and the judges' calls)
            resources={"store": store, **{r: llm_for_role(r) for r in ("generator", "judge", "annotator")}},
            partition_key=PARTITION,
            instance=instance,
        ).success  # the judged stages' input
        _role(monkeypatch, "judge", broken.url, **({"MAX_ERROR_SHARE": "1"} if rule == "off" else {}))
        _role(monkeypatch, "annotator", broken.url)
        run = dg.materialize(
            [first_hop, mechanical_rules, CONFIG_ASSETS["filtered"], release, dataset_card, release_manifest],
            selection=[first_hop, mechanical_rules, CONFIG_ASSETS["filtered"], release],
            resources={
                "store": store,
                "snapshots": SnapshotSource(),
                "judge": llm_for_role("judge"),
                "annotator": llm_for_role("annotator"),
            },
            partition_key=PARTITION,
            instance=instance,
            raise_on_error=False,
        )
    steps = {e.step_key: e.event_type for e in run.all_events if e.step_key and e.is_step_event}
    if rule == "on":
        assert not run.success
        assert steps["first_hop"] == dg.DagsterEventType.STEP_FAILURE
        assert "release" not in {e.step_key for e in run.all_events if e.event_type_value == "STEP_START"}
        assert _files(folder) == before  # byte for byte: the previous release stays in place
    else:  # what the rule prevents: a "successful" run republishing from failed calls
        assert run.success, steps
        assert _files(folder) != before
