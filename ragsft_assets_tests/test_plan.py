"""``ragsft plan``: the forecast's arithmetic through the funnel, and a real sample run on the sample
snapshot with the oracle double behind the real client and cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.defs.plan import record
from ragsft_assets.defs.plan.sample import ledger_upstreams, run_sample, scratch_home
from ragsft_assets.defs.resources import default_resources
from ragsft_assets.llm import engines
from ragsft_assets.plan import forecast as fc
from ragsft_assets.plan import measure
from ragsft_assets.plan.report import compare_table, plan_table
from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedBackend
from ragsft_assets_tests.oracle_double import Oracle

KEY = "sample.fr"


def _stage(
    name: str, upstream: str | None, items: int, kept: int, requests: int = 0, **kw: float
) -> fc.StageSample:
    return fc.StageSample(
        name, upstream, items, kept, requests, kw.get("p", 10 * requests), kw.get("c", 2 * requests)
    )


def test_extrapolation_follows_the_funnel() -> None:
    samples = [
        _stage("drafts", None, 30, 20, 30),  # 3 drafts per pair, 2 of 3 kept
        _stage("checks", "drafts", 20, 10),  # no LLM
        _stage("judge", "checks", 10, 5, 40),  # 4 calls per item (a cascade)
    ]
    plan = fc.forecast(samples, sample_items=10, input_items=1000)
    assert plan.stages["drafts"].items == pytest.approx(3000)
    assert plan.stages["checks"].items == pytest.approx(2000)
    assert plan.stages["judge"].items == pytest.approx(1000)
    assert plan.stages["judge"].calls == pytest.approx(4000)
    assert plan.stages["judge"].prompt_tokens == pytest.approx(40000)
    assert plan.total["calls"] == pytest.approx(3000 + 4000)
    j = plan.stages["judge"]
    assert j.calls_low < j.calls < j.calls_high  # upstream keep-rate uncertainty widens the range
    assert plan.stages["drafts"].calls_low == plan.stages["drafts"].calls  # no stage above the first


def test_a_stage_that_keeps_nothing_forecasts_nothing_downstream() -> None:
    samples = [_stage("drafts", None, 30, 0, 30), _stage("judge", "drafts", 0, 0, 0)]
    plan = fc.forecast(samples, sample_items=10, input_items=1000)
    assert plan.stages["judge"].items == 0 and plan.stages["judge"].calls == 0
    assert plan.stages["judge"].calls_high == 0


def test_budget_warnings_and_json_shape() -> None:
    samples = [_stage("drafts", None, 30, 20, 30)]
    plan = fc.forecast(samples, 10, 1000, budgets={"budget_calls": 100, "budget_tokens": None})
    assert len(plan.warnings) == 1 and "budget_calls=100" in plan.warnings[0]
    assert fc.forecast(samples, 10, 1000, budgets={"budget_calls": 10_000}).warnings == []
    out = plan.to_json()
    assert set(out["stages"]["drafts"]) >= {
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "keep_rate",
        "calls_low",
        "calls_high",
    }
    assert set(out["total"]) >= {"calls", "prompt_tokens", "completion_tokens", "wall_s"}
    assert "WARNING: budget_calls=100" in plan_table(out)


def test_wilson_interval() -> None:
    lo, hi = fc.wilson(25, 50)
    assert lo == pytest.approx(0.366, abs=1e-3) and hi == pytest.approx(0.634, abs=1e-3)
    assert fc.wilson(0, 0) == (0.0, 1.0)


def test_wall_time_comes_from_the_measured_throughput() -> None:
    """Without a load curve (one sample), an engine whose speed depends on load gains nothing from
    more slots: the wall time is the sample's throughput (100 requests in 8 LLM seconds), whatever
    ``slots`` says; Little's law with the slots at the sample's latency is the fast end
    (``stage_wall_s_low``). The step's seconds outside its LLM batches are its own, not scaled."""
    s = fc.StageSample("judge", None, 100, 50, 100, 1000, 100, wall_s=10.0)  # 100 calls at once in 10 s
    assert fc.stage_wall_s(1000, s, slots=100) == pytest.approx(100.0)
    assert fc.stage_wall_s(1000, s, slots=1000) == pytest.approx(100.0)  # not 10 s: no free speed-up
    # 100 calls kept 50 in flight on average for 8 s of a 10 s step: 4 s each by Little's law
    s = fc.StageSample("judge", None, 100, 50, 100, 1000, 100, wall_s=10.0, llm_wall_s=8.0, request_s=400.0)
    assert fc.stage_wall_s(1000, s, slots=256) == pytest.approx(1000 * 8.0 / 100 + 2.0)
    k_run = 1000 / ((1000 - 256) / 256 + 100 / 50)  # full waves at 256, then a tail like the sample's
    assert fc.stage_wall_s_low(1000, s, slots=256) == pytest.approx(1000 * 4.0 / k_run + 2.0)
    assert fc.stage_wall_s_high(1000, s, slots=256) == pytest.approx(fc.stage_wall_s(1000, s, slots=256))
    # the case: a 6-draft sample took 5 min 41 s on the embedded engine; 189 drafts at that
    # throughput take about half an hour, not Little's law's 5.7 min over 256 slots
    drafts = fc.StageSample("question_drafts", None, 6, 6, 6, 600, 600, wall_s=341.0, llm_wall_s=341.0)
    assert fc.stage_wall_s(189, drafts, slots=256) == pytest.approx(189 * 341.0 / 6)
    plan = fc.forecast([drafts], sample_items=6, input_items=189, fleet=fc.Fleet(slots=256))
    assert plan.total["wall_s"] == pytest.approx(189 * 341.0 / 6)
    assert plan.total["wall_s_low"] <= plan.total["wall_s"] <= plan.total["wall_s_high"]


def test_cache_hits_are_counted_not_extrapolated() -> None:
    """The sample's share of cached requests says nothing of the rest of the partition: a sample of
    7 pairs that were all cached (a demo ran 24) forecasts 24 cached calls of 189, as counted."""
    drafts = fc.StageSample("question_drafts", None, 7, 7, 7, 700, 70, cached_before=7, wall_s=7.0)
    plan = fc.forecast([drafts], 7, 189, cache_hits={"question_drafts": 24})
    d = plan.stages["question_drafts"]
    assert d.calls == pytest.approx(189) and d.cache_hits == 24
    # the 165 calls to make have no measured throughput (the sample made none): said, not "0 s"
    assert any("wall time unknown for question_drafts" in w for w in plan.warnings)
    measured = fc.StageSample("question_drafts", None, 7, 7, 7, 700, 70, cached_before=2, wall_s=5.0)
    timed = fc.forecast([measured], 7, 189, cache_hits={"question_drafts": 24}).stages["question_drafts"]
    assert timed.wall_s == pytest.approx(165 * 5.0 / 5)
    # without a count, only the sample's own cached requests: never 189 of 189
    assert fc.forecast([drafts], 7, 189).stages["question_drafts"].cache_hits == 7


def test_unreached_stages_are_listed_with_a_range_and_empty_configs_warn() -> None:
    samples = [
        _stage("drafts", None, 30, 0, 30),  # nothing kept: no item reaches the judge
        fc.StageSample("judge", "drafts", 0, 0, 0, 0, 0, max_calls_per_item=4.0),
    ]
    plan = fc.forecast(samples, 10, 1000, config_rows={"default": 0, "other": 3})
    j = plan.stages["judge"]
    assert not j.reached and j.calls == 0 and j.items == 0
    high = plan.stages["drafts"].kept_high  # the drafts' Wilson high keep rate on 3000 drafts
    assert high > 0 and j.items_high == pytest.approx(high) and j.calls_high == pytest.approx(4 * high)
    assert plan.total["calls_high"] == pytest.approx(plan.stages["drafts"].calls_high + 4 * high)
    assert any("no sample item reached judge" in w for w in plan.warnings)
    assert any("default: 0 rows" in w for w in plan.warnings)
    assert plan.to_json()["configs"]["default"]["rows"] == 0
    assert "judge (unseen)" in plan_table(plan.to_json())


def test_ledger_upstreams_nearest_stage_in_the_graph() -> None:
    parents = {
        "question_drafts": {"bridge_pairs", "abstracts"},
        "question_checks": {"question_drafts"},
        "distractors": {"question_checks", "question_drafts"},
        "multihop_questions": {"distractors", "question_checks"},
        "first_hop": {"multihop_questions"},
        "rag_prompts": {"multihop_filtered"},
        "multihop_filtered": {"first_hop", "multihop_questions"},
    }
    stages = [
        "question_drafts",
        "question_checks",
        "distractors",
        "multihop_questions",
        "first_hop",
        "rag_prompts",
        "bridge_pairs",
    ]
    up = ledger_upstreams(parents, stages, inputs=["bridge_pairs"])
    assert up["question_drafts"] is None
    assert up["distractors"] == "question_checks"  # the later of two equally near stages
    assert up["rag_prompts"] == "first_hop"  # first_hop and multihop_questions both 2 up: the filter is later


class PlanOracle(ScriptedBackend):
    NAME = "plan-oracle"
    oracle = Oracle()

    def respond(self, messages):  # noqa: ANN001, ANN201
        return type(self).oracle(messages)


class NoisyPlanOracle(PlanOracle):
    """An engine that logs to stdout, as vLLM does: `ragsft plan --json` must keep stdout JSON."""

    NAME = "plan-oracle-noisy"

    def generate(self, requests, on_result):  # noqa: ANN001, ANN201
        print(f"INFO engine: {len(requests)} requests")  # noqa: T201
        return super().generate(requests, on_result)


class DeadFleet(ScriptedBackend):
    """A fleet that answers HTTP 500 to every request."""

    NAME = "plan-dead-fleet"

    def generate(self, requests, on_result):  # noqa: ANN001, ANN201
        from ragsft_assets.llm.backends.base import Completion

        for i, _ in enumerate(requests):
            type(self).calls += 1
            on_result(i, Completion(text="", prompt_tokens=0, completion_tokens=0, error="HTTP 500"))


def _resources(home: Path) -> dict:
    engines.register_backend(PlanOracle.NAME, PlanOracle)
    cache = str(home / "llm_cache")
    resources = {
        **default_resources(),
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        **{
            role: LLMResource(backend=PlanOracle.NAME, model=role, cache_dir=cache, role=role)
            for role in ("generator", "judge", "annotator", "base_model")
        },
    }
    return resources


@pytest.fixture(scope="module")
def planned(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch
) -> tuple[Path, fc.Plan]:
    home = tmp_path_factory.mktemp("plan_home")
    monkeypatch_module.setenv("RAGSFT_HOME", str(home))
    install_snapshot(KEY, sample_folder(), home)
    PlanOracle.calls = 0
    plan = run_sample(KEY, resources=_resources(home), sample=20, home=home, fleet=fc.Fleet(slots=64))
    return home, plan


@pytest.fixture(scope="module")
def monkeypatch_module():  # noqa: ANN201
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_sample_run_writes_no_partition_artifact(planned: tuple[Path, fc.Plan]) -> None:
    home, _ = planned
    assets = sorted(p.name for p in (home / "assets" / KEY).iterdir())
    assert assets == ["_ledger", "abstracts", "bridge_pairs", "link_graph"]  # the corpus stage only
    assert (scratch_home(KEY, home) / "assets" / KEY / "question_drafts").is_dir()
    assert not (home / "releases" / KEY).exists()
    assert (home / "llm_cache").is_dir()  # the sample's calls are in the shared cache


def test_forecast_counts_every_pair_of_the_partition(planned: tuple[Path, fc.Plan]) -> None:
    home, plan = planned
    pairs = ArtifactStore(home=str(home)).read(KEY, "bridge_pairs").num_rows
    assert plan.input_items == pairs and plan.sample_items == 20 and pairs > 20
    drafts = plan.stages["question_drafts"]
    sample_drafts = measure.ledger_counts(scratch_home(KEY, home) / "assets" / KEY)["question_drafts"][
        "items"
    ]
    assert drafts.items == pytest.approx(sample_drafts * pairs / 20)
    assert drafts.calls > 0 and drafts.prompt_tokens > 0
    assert {"ablation_verdicts", "rag_responses", "rag_verdicts"} <= set(plan.stages)
    assert plan.stages["question_drafts"].upstream is None
    assert plan.stages["ablation_verdicts"].upstream == "distractors"
    assert plan.configs and all(c["rows_low"] <= c["rows"] <= c["rows_high"] for c in plan.configs.values())


def test_a_second_plan_finds_the_calls_in_the_cache(planned: tuple[Path, fc.Plan]) -> None:
    """The cache hits are the partition's own request keys found in the cache, counted: the 20
    sampled pairs' drafts (the run asks them again), not the sample's share (100%) scaled to 24."""
    home, first = planned
    calls_before = PlanOracle.calls
    again = run_sample(KEY, resources=_resources(home), sample=20, home=home, fleet=fc.Fleet(slots=64))
    assert PlanOracle.calls == calls_before  # every sample call was cached
    pairs = ArtifactStore(home=str(home)).read(KEY, "bridge_pairs").num_rows
    for plan in (first, again):  # the first plan's sample put its calls in the cache too
        drafts = plan.stages["question_drafts"]
        assert drafts.calls == pytest.approx(pairs) and drafts.cache_hits == 20 < pairs
    assert again.total["cache_hits"] < again.total["calls"]
    assert again.total["calls"] == pytest.approx(first.total["calls"])


def test_compare_against_a_run(planned: tuple[Path, fc.Plan]) -> None:
    home, plan = planned
    data = plan.to_json()
    record.save(data, KEY, home)
    actual = measure.actual_by_stage(
        scratch_home(KEY, home) / "assets" / KEY, home / "llm_cache", data["stages"]
    )
    rows = fc.compare(data, actual)
    assert rows["question_drafts"]["calls"]["actual"] > 0
    assert "question_drafts" in compare_table(rows)
    assert record.load(KEY, home=home)["stages"].keys() == data["stages"].keys()


def test_cli_plan_json_and_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ragsft plan KEY --json`` with the roles set from the environment, then ``--compare``."""
    import orjson
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    engines.register_backend(NoisyPlanOracle.NAME, NoisyPlanOracle)
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    for role in ("GENERATOR", "JUDGE", "ANNOTATOR", "BASE_MODEL"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", NoisyPlanOracle.NAME)
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", role.lower())
    install_snapshot(KEY, sample_folder(), tmp_path)
    out = CliRunner().invoke(
        main, ["plan", KEY, "--sample", "8", "--json", "--budget-calls", "10"], catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    plan = orjson.loads(out.stdout)  # the JSON alone: the engine's log lines went to stderr
    assert "INFO engine:" in out.stderr and "INFO engine:" not in out.stdout
    assert plan["total"]["calls"] > 10 and any("budget_calls=10" in w for w in plan["warnings"])
    assert (tmp_path / "plans" / KEY / "plan.json").exists()
    assert record.plan_tags(KEY, tmp_path) == {record.PLAN_TAG: plan["digest"]}
    bad = CliRunner().invoke(main, ["plan", KEY, "--sample", "0"])
    assert bad.exit_code == 2 and "at least 1" in bad.output
    # a run of the partition in the project's instance, tagged with the plan, then --compare
    import dagster as dg

    from ragsft_assets.definitions import build_definitions

    with dg.DagsterInstance.get() as instance:
        if not instance.has_dynamic_partition("snapshot", KEY):
            instance.add_dynamic_partitions("snapshot", [KEY])
        job = build_definitions(_resources(tmp_path)).resolve_job_def("corpus_job")
        run = job.execute_in_process(
            partition_key=KEY, instance=instance, tags=record.plan_tags(KEY, tmp_path)
        )
        assert instance.get_run_by_id(run.run_id).tags[record.PLAN_TAG] == plan["digest"]
    cmp = CliRunner().invoke(main, ["plan", KEY, "--compare", run.run_id, "--json"], catch_exceptions=False)
    assert cmp.exit_code == 0, cmp.output
    rows = orjson.loads(cmp.stdout)
    assert set(rows) == set(plan["stages"])
    assert rows["question_drafts"]["calls"]["actual"] == 0  # the run built the corpus only
    assert rows["question_drafts"]["calls"]["forecast"] > 0
    unknown = CliRunner().invoke(main, ["plan", KEY, "--compare", "no-such-run"])
    assert unknown.exit_code != 0


def test_started_runs_are_tagged_with_their_partitions_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    from ragsft_assets.defs.plan import plan_tagger

    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))

    @dg.op
    def _noop() -> None:
        pass

    @dg.job
    def _job() -> None:
        _noop()

    with dg.DagsterInstance.ephemeral() as instance:

        def started_context() -> dg.RunStatusSensorContext:
            result = _job.execute_in_process(instance=instance, tags={"dagster/partition": KEY})
            run = instance.get_run_by_id(result.run_id)
            event = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_START)
            return dg.build_run_status_sensor_context(
                sensor_name="plan_tagger", dagster_event=event, dagster_instance=instance, dagster_run=run
            )

        ctx = started_context()
        plan_tagger(ctx)  # no plan yet: no tag
        assert record.PLAN_TAG not in instance.get_run_by_id(ctx.dagster_run.run_id).tags
        digest = record.save({"partition": KEY, "stages": {}}, KEY, tmp_path)
        ctx = started_context()
        plan_tagger(ctx)
        assert instance.get_run_by_id(ctx.dagster_run.run_id).tags[record.PLAN_TAG] == digest


def test_caps_bind_more_on_the_whole_partition_than_on_the_sample() -> None:
    from ragsft_assets.plan.scale import cap_keep_factor

    # 10 sampled pairs on 10 bridges, 3 questions each: the bridge cap (2) keeps 2 of 3
    sample = [(f"a{i}", f"b{i}") for i in range(10)]
    # the whole partition: the same 10 bridges, each linked from 20 sources: 2 of 60 per bridge
    everything = [(f"a{i}-{j}", f"b{i}") for i in range(10) for j in range(20)]
    factor = cap_keep_factor(sample, [3] * 10, everything, seed=1)
    assert factor == pytest.approx((20 / 600) / (20 / 30))
    assert cap_keep_factor(sample, [3] * 10, sample, seed=1) == pytest.approx(1.0)
    assert cap_keep_factor(sample, [0] * 10, everything, seed=1) == 1.0  # no question reached the caps
    plan = fc.forecast([_stage("caps", None, 30, 20)], 10, 200, keep_factors={"caps": 0.5})
    assert plan.stages["caps"].keep_rate == pytest.approx(20 / 30 * 0.5)


def test_plan_of_a_qa_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A qa_source: its questions are the deterministic stage (run in the real home), the RAG SFT
    chain the sampled one; every question of the source is counted."""
    from ragsft_assets.cli.sources import install_source
    from ragsft_assets_tests.test_qa_sources import KEY as QA_KEY
    from ragsft_assets_tests.test_qa_sources import ResponderBackend
    from ragsft_assets_tests.test_rag_sft_assets import DATA

    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    install_source(QA_KEY, DATA, preset="hotpotqa", mapping_file=None, home=tmp_path)
    engines.register_backend(ResponderBackend.NAME, ResponderBackend)
    cache = str(tmp_path / "llm_cache")
    resources = {
        **default_resources(),
        "store": ArtifactStore(home=str(tmp_path)),
        "generator": LLMResource(
            backend=ResponderBackend.NAME, model="gen-double", cache_dir=cache, role="generator"
        ),
        "judge": LLMResource(
            backend=ResponderBackend.NAME, model="judge-double", cache_dir=cache, role="judge"
        ),
    }
    ops = {
        f"qa__{n}": {"config": {"tokenizer": "whitespace"}}
        for n in ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
    }
    plan = run_sample(
        QA_KEY, resources=resources, job="qa_sft_job", sample=10, run_config={"ops": ops}, home=tmp_path
    )
    questions = ArtifactStore(home=str(tmp_path)).read(QA_KEY, "questions").num_rows
    assert plan.input_items == questions > 10 and plan.sample_items == 10
    assert plan.stages["rag_responses"].calls > 0
    assert plan.stages["rag_prompts"].upstream is None
    assert not (tmp_path / "assets" / QA_KEY / "rag_sft").exists()  # the sample wrote to the scratch home


def test_plan_of_a_base_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A base model (Recall Rewrite): OASST1's kept pairs are the input, counted in the real home;
    the sample takes the first N pairs in the scratch home."""
    from ragsft_assets.llm.cache import LLMCache
    from ragsft_assets.llm.client import ChatClient
    from ragsft_assets_tests.test_recall_job import HF_ID, TREES, ResponderBackend
    from ragsft_assets_tests.test_recall_job import KEY as MODEL_KEY

    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    cache = LLMCache(tmp_path / "llm_cache")
    chat, base = ResponderBackend("chat-double"), ResponderBackend(HF_ID)
    resources = {
        **default_resources(),
        "store": ArtifactStore(home=str(tmp_path)),
        "judge": ChatClient(chat, cache, name="judge"),
        "generator": ChatClient(chat, cache, name="generator"),
        "base_model": ChatClient(base, cache, name="base_model"),
    }
    run_config = {"ops": {"oasst_pairs": {"config": {"trees_path": str(TREES)}}}}
    plan = run_sample(
        MODEL_KEY, resources=resources, job="recall_job", sample=5, run_config=run_config, home=tmp_path
    )
    pairs = ArtifactStore(home=str(tmp_path)).read("recall", "oasst_pairs").num_rows
    assert plan.input_items == pairs > 5 and plan.sample_items == 5
    assert plan.stages["claims"].upstream is None and plan.stages["claims"].items == pytest.approx(pairs)
    assert plan.stages["probe_answers"].calls > plan.stages["claims"].calls  # ten answers per claim
    assert not (tmp_path / "assets" / f"recall-{MODEL_KEY}").exists()


def test_a_dead_fleet_is_refused_not_planned_as_zero_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sample call fails (HTTP 500): `ragsft plan` exits non-zero and says why."""
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    engines.register_backend(DeadFleet.NAME, DeadFleet)
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    for role in ("GENERATOR", "JUDGE", "ANNOTATOR", "BASE_MODEL"):
        monkeypatch.setenv(f"RAGSFT_{role}_BACKEND", DeadFleet.NAME)
        monkeypatch.setenv(f"RAGSFT_{role}_MODEL", role.lower())
    install_snapshot(KEY, sample_folder(), tmp_path)
    DeadFleet.calls = 0
    import dagster as dg

    policy_lookup = dg.JobDefinition.get_retry_policy_for_handle
    out = CliRunner().invoke(main, ["plan", KEY, "--sample", "3", "--json", "--job", "multihop_job"])
    assert dg.JobDefinition.get_retry_policy_for_handle is policy_lookup  # the sample's no-retry undone
    assert out.exit_code != 0 and DeadFleet.calls >= 3
    assert out.stdout == ""  # no plan, not a plan of 0 rows
    assert "question_drafts" in out.stderr and "failed" in out.stderr, out.stderr
    said = next(line for line in out.stderr.splitlines() if line.startswith("ragsft plan: "))
    assert "500" in said and "DagsterExecutionStepExecutionError" not in said, said  # the cause, said
    assert not (tmp_path / "plans" / KEY / "plan.json").exists()


def test_a_fleet_failing_every_call_is_refused_even_when_its_stages_tolerate_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roles that tolerate every transport error (``max_error_share=1``) still give a dead fleet
    away: the plan counts the sample's calls and errors, and refuses when none succeeded."""
    engines.register_backend(DeadFleet.NAME, DeadFleet)
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path))
    install_snapshot(KEY, sample_folder(), tmp_path)
    cache = str(tmp_path / "llm_cache")
    resources = {
        **_resources(tmp_path),
        **{
            role: LLMResource(
                backend=DeadFleet.NAME, model=role, cache_dir=cache, role=role, max_error_share=1.0
            )
            for role in ("generator", "judge", "annotator", "base_model")
        },
    }
    with pytest.raises(RuntimeError, match=r"every LLM call of the sample failed \(3 of 3; generator"):
        run_sample(KEY, resources=resources, job="multihop_job", sample=3, home=tmp_path)


def test_a_sample_of_every_input_item_forecasts_exactly() -> None:
    samples = [_stage("drafts", None, 30, 20, 30), _stage("judge", "drafts", 20, 5, 40)]
    plan = fc.forecast(samples, sample_items=10, input_items=10)
    j = plan.stages["judge"]
    assert j.calls_low == j.calls == j.calls_high == 40 and j.kept_low == j.kept == j.kept_high == 5
