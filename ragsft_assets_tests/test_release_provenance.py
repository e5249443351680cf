"""Release manifests: git commit, effective run config, resources without secrets, llm_roles (issue 10)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import orjson

from ragsft_assets.defs.multihop.assets import multihop_questions
from ragsft_assets.defs.release.assets import _effective_config, resource_settings
from ragsft_assets.release import manifest, provenance
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets_tests.release_fixtures import PARTITION
from ragsft_assets_tests.test_release_build import make_release


def test_git_commit_build_arg_first_then_checkout_then_unknown_with_warning(tmp_path: Path) -> None:
    assert provenance.git_commit(env={"RAGSFT_GIT_COMMIT": "abc123"}) == ("abc123", None)
    commit, warning = provenance.git_commit(env={})  # the package's own checkout
    assert len(commit) == 40 and warning is None
    commit, warning = provenance.git_commit(env={}, cwd=tmp_path)  # not a checkout, no build arg
    assert commit == "unknown" and "RAGSFT_GIT_COMMIT" in warning


def test_unknown_commit_writes_its_warning_into_the_manifest(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(manifest, "git_commit", lambda: provenance.git_commit(env={}, cwd=tmp_path))
    manifest.project_info.cache_clear()
    try:
        _, folder, _ = make_release(tmp_path / "home")
    finally:
        manifest.project_info.cache_clear()
    project = orjson.loads((folder / "provenance/corpus/manifest.json").read_bytes())["project"]
    assert project["git_commit"] == "unknown"
    assert "not a git checkout" in project["warning"]


def _repo(**resources: object) -> dg.RepositoryDefinition:
    keys = multihop_questions.required_resource_keys - {"io_manager"}
    bound = {k: dg.ResourceDefinition.none_resource() for k in keys}
    return dg.Definitions(assets=[multihop_questions], resources=bound | resources).get_repository_def()


def test_effective_run_config_has_the_defaults() -> None:
    ctx = SimpleNamespace(repository_def=_repo())
    cfg = _effective_config(ctx, "multihop_questions", {"seed": 3})
    assert cfg["seed"] == 3  # what the run passed
    assert cfg["max_pairs"] == 24 and cfg["retrieval"] == "tfidf"  # defaults it did not pass
    assert _effective_config(ctx, "multihop_questions", None)["seed"] == 20260731


def test_resource_settings_never_carry_a_secret(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-env-secret")
    judge = LLMResource(
        backend="openai",
        role="judge",
        base_urls=["http://user:pw-secret@gpu-1:8000/v1"],
        api_key_env="MY_API_KEY",
        engine_kwargs='{"hf_token": "hf-secret", "swap_space": 8}',
    )
    repo = _repo(judge=judge)
    overrides = {"resources": {"judge": {"config": {"concurrency": 2, "password": "pw2-secret"}}}}
    ctx = SimpleNamespace(repository_def=repo, run=SimpleNamespace(run_config=overrides))
    settings = resource_settings(ctx)
    assert settings["judge"]["backend"] == "openai" and settings["judge"]["concurrency"] == 2
    _, folder, _ = make_release(tmp_path / "home")
    m = manifest.build_manifest(
        folder,
        config="corpus",
        asset="abstracts",
        partition=PARTITION,
        data_files={"train": "corpus/train-00000-of-00001.parquet"},
        source={},
        run_config={},
        llm_roles={},
        resources=settings,
    )
    text = manifest.json_bytes(m).decode()
    for secret in ("sk-env-secret", "pw-secret", "hf-secret", "pw2-secret", "api_key_env", "hf_token"):
        assert secret not in text
    judge_out = m["resources"]["judge"]
    assert judge_out["base_urls"] == ["http://gpu-1:8000/v1"]
    assert judge_out["engine_kwargs"] == {"swap_space": 8}
    assert judge_out["role"] == "judge" and judge_out["max_model_len"] == 4096  # defaults kept


def test_llm_roles_per_stage_and_nothing_else() -> None:
    identity = {"backend": "openai", "model": "qwen", "weights_sha256": "w1", "served_root": "/m"}
    md = {
        "rag_verdicts": {"judge/model": identity, "judge/calls": 5, "judge/cache_hits": 2},
        "rag_responses": {"generator/model": identity, "llm/calls": 7, "llm/cache_hits": 0},
        "abstracts": {"rows/calls": 1},  # not an LLM stage
    }
    params = {"temperature": 0.0, "max_tokens": 64, "seed": 1, "top_p": 1.0, "stop": []}
    calls = {"rag_verdicts": [{"model": identity, "params": params, "calls": 5}]}
    roles = provenance.llm_roles(md, calls)
    assert set(roles) == {"rag_verdicts", "rag_responses"}
    judge = roles["rag_verdicts"]["judge"]
    assert tuple(judge) == provenance.LLM_ROLE_FIELDS
    assert judge == {
        "backend": "openai",
        "model": "qwen",
        "weights_id": "w1",
        "sampling": params,
        "calls": 5,
        "cache_hits": 2,
    }
    assert roles["rag_responses"]["generator"]["calls"] == 7  # stats under "llm/" for one-role stages


def test_source_info_names_a_snapshot_export_as_origin(tmp_path: Path) -> None:
    """Every release over a source folder (QA chain and long context) gets the export's origin."""
    import json

    from ragsft_assets.release.manifest import source_info
    from ragsft_assets.sources.read import SOURCE_CONFIG

    origin = {"source": "snapshot", "snapshot": "sample.fr", "asset": "multihop_questions"}
    for key, config in (("exported.fr", {"preset": "hotpotqa", "origin": origin}), ("plain.en", {})):
        (tmp_path / "sources" / key).mkdir(parents=True)
        (tmp_path / "sources" / key / SOURCE_CONFIG).write_text(json.dumps(config), encoding="utf-8")
        (tmp_path / "sources" / key / "train.jsonl").write_text("{}\n", encoding="utf-8")
    assert source_info(tmp_path / "assets", tmp_path / "sources", "exported.fr")["origin"] == origin
    assert source_info(tmp_path / "assets", tmp_path / "sources", "plain.en")["origin"] == {"source": "local"}
