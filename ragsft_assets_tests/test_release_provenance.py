"""Release manifests: git commit, effective run config, resources without secrets, llm roles, recipes.

The end-to-end case runs ``full_job`` the way ``ragsft demo`` does (in process, process tags,
stoppable), with the oracle double as every LLM role: no code location, no stand-in context.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import dagster as dg
import orjson
import pytest

from ragsft_assets import recipes
from ragsft_assets.release import build, manifest, provenance
from ragsft_assets.release.provenance import REDACTED, redact_settings, redact_url
from ragsft_assets_tests.release_fixtures import PARTITION
from ragsft_assets_tests.test_release_build import make_release

SECRETS = ("sk-url-secret", "pw-secret", "tok-secret", "hdr-secret", "hf-secret", "q-secret")


def test_git_commit_build_arg_first_then_checkout_then_unknown_with_warning(tmp_path: Path) -> None:
    assert provenance.git_commit(env={"RAGSFT_GIT_COMMIT": "abc123"}) == ("abc123", None)
    commit, warning = provenance.git_commit(env={})  # the package's own checkout
    assert len(commit) == 40 and warning is None
    commit, warning = provenance.git_commit(env={}, cwd=tmp_path)  # not a checkout, no build arg
    assert commit == "unknown" and "RAGSFT_GIT_COMMIT" in warning


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    (repo / "tracked.txt").write_text("a\n", encoding="utf-8")
    (repo / ".gitignore").write_text("site-packages/\n", encoding="utf-8")
    _git(repo, "add", "tracked.txt", ".gitignore")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def test_an_installed_copy_inside_another_repository_reports_no_commit(tmp_path: Path) -> None:
    """A non-editable install in a venv that lies in some repository must not take that repo's HEAD."""
    repo = _repo(tmp_path)
    installed = repo / "site-packages" / "ragsft_assets" / "release"
    installed.mkdir(parents=True)
    copy = installed / "provenance.py"
    shutil.copy(provenance.__file__, copy)
    out = subprocess.run(
        ["python", "-c", "import provenance; print(provenance.git_commit(env={}))"],
        cwd=installed,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert _git(repo, "rev-parse", "HEAD") not in out and "unknown" in out and "not tracked" in out, out


def test_a_dirty_checkout_is_recorded_as_dirty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path)
    assert provenance.git_dirty(repo) is False
    (repo / "tracked.txt").write_text("changed\n", encoding="utf-8")
    assert provenance.git_dirty(repo) is True
    assert provenance.git_dirty(tmp_path) is None  # not a checkout: not known
    monkeypatch.delenv("RAGSFT_GIT_COMMIT", raising=False)
    monkeypatch.setattr(manifest, "git_commit", lambda: ("c" * 40, None))
    monkeypatch.setattr(manifest, "git_dirty", lambda: True)
    manifest.project_info.cache_clear()
    try:
        assert manifest.project_info()["git_dirty"] is True
    finally:
        manifest.project_info.cache_clear()


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


def test_redaction_keeps_every_setting_and_masks_every_credential() -> None:
    settings = {
        "base_urls": [
            "http://user:pw-secret@gpu-1:8000/v1",
            "https://h/v1?api_key=sk-url-secret&model=m",
            "https://h/v1?key=q-secret",
            "https://h/v1?token=tok-secret&stream=1",
        ],
        "engine_kwargs": orjson.dumps(
            {"max_num_batched_tokens": 8192, "hf_token": "hf-secret", "swap_space": 8}
        ).decode(),
        "extra_headers": {"Authorization": "Bearer hdr-secret", "X-Request-Source": "ragsft"},
        "default_headers": {"X-Custom": "Basic hdr-secret"},
        "max_tokens": 512,
        "budget_tokens": 100_000,
        "api_key_env": "MY_API_KEY",  # names a variable: a setting, never read
        "password": "pw-secret",
        "empty_token": "",
    }
    out = redact_settings(settings)
    text = orjson.dumps(out).decode()
    for secret in SECRETS:
        assert secret not in text, secret
    # settings that merely contain "token" or "key" in their names are kept
    assert out["max_tokens"] == 512 and out["budget_tokens"] == 100_000
    assert out["engine_kwargs"] == {"max_num_batched_tokens": 8192, "hf_token": REDACTED, "swap_space": 8}
    assert out["api_key_env"] == "MY_API_KEY" and out["password"] == REDACTED
    assert out["extra_headers"] == {"Authorization": REDACTED, "X-Request-Source": "ragsft"}
    assert out["default_headers"] == {"X-Custom": REDACTED}
    assert out["base_urls"][0] == f"http://{REDACTED}@gpu-1:8000/v1"
    assert out["base_urls"][1] == f"https://h/v1?api_key={REDACTED}&model=m"
    assert redact_url("http://gpu-1:8000/v1") == "http://gpu-1:8000/v1"  # nothing to mask: unchanged


def test_llm_roles_per_stage_and_stats_apart() -> None:
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
    assert judge == {"backend": "openai", "model": "qwen", "weights_id": "w1", "sampling": params}
    stats = provenance.llm_stats(md)
    assert stats["rag_verdicts"]["judge"] == {"calls": 5, "cache_hits": 2}
    assert stats["rag_responses"]["generator"]["calls"] == 7  # stats under "llm/" for one-role stages


def test_recipe_records_go_into_every_manifest(tmp_path: Path) -> None:
    store, folder, _ = make_release(tmp_path / "home")
    for name in ("corpus", "hotpotqa_cite"):
        assert orjson.loads((folder / f"provenance/{name}/manifest.json").read_bytes())["recipes"] == {}
    rec = {"recipe": "hotpotqa_cite", "values": {"twin_share": 0.22}, "changed": {}}
    recipes.write_record(store.root / PARTITION / "rag_sft", rec)
    build.write_manifests(folder, PARTITION, store.root, tmp_path / "home" / "snapshots")
    for name in ("corpus", "hotpotqa_cite"):
        doc = orjson.loads((folder / f"provenance/{name}/manifest.json").read_bytes())
        assert doc["recipes"] == {"rag_sft": rec}


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


@pytest.fixture(scope="module")
def demo_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dg.DagsterInstance, str]:
    """``full_job`` on the sample snapshot as ``ragsft demo`` runs it, the oracle double as every model.

    Each LLM role is the real ``LLMResource`` (client and cache) over the oracle double registered
    as a backend; its settings carry credentials in a URL, a header and the engine arguments,
    beside settings whose names hold "token" (the registered backend uses none of them).
    """
    from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
    from ragsft_assets.definitions import build_definitions
    from ragsft_assets.defs.resources import LLM_ROLES
    from ragsft_assets.defs.runs import execute_in_process_stoppable, process_tags
    from ragsft_assets.llm import engines
    from ragsft_assets.resources.catalog import CatalogResource
    from ragsft_assets.resources.embedder import EmbeddingResource
    from ragsft_assets.resources.llm import LLMResource
    from ragsft_assets.resources.snapshots import SnapshotSource
    from ragsft_assets.resources.store import ArtifactStore
    from ragsft_assets_tests.fault_runner import BACKEND, OracleBackend

    home = tmp_path_factory.mktemp("demo_home")
    key = "sample.fr"
    install_snapshot(key, sample_folder(), home)
    engines.register_backend(BACKEND, OracleBackend)

    def llm(role: str) -> LLMResource:
        return LLMResource(
            backend=BACKEND,
            model="oracle",
            role=role,
            base_urls=["http://user:pw-secret@gpu-1:8000/v1?api_key=sk-url-secret"],
            engine_kwargs=orjson.dumps(
                {"max_num_batched_tokens": 4096, "headers": {"Authorization": "Bearer hdr-secret"}}
            ).decode(),
            budget_tokens=10**9,
            cache_dir=str(home / "llm_cache"),
        )

    resources = {
        "store": ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        **{role: llm(role) for role in LLM_ROLES},
        "embedder": EmbeddingResource(cache_dir=str(home / "llm_cache")),  # bound; full_job embeds nothing
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [key])
    run_config = {"ops": {"question_drafts": {"config": {"max_pairs": 8}}}}
    result = execute_in_process_stoppable(
        build_definitions(resources).resolve_job_def("full_job"),
        instance,
        partition_key=key,
        run_config=run_config,
        tags=process_tags(),
    )
    assert result.success
    return home / "releases" / key, instance, result.run_id


def test_demo_release_manifest_has_every_effective_config_and_no_secret(demo_release) -> None:
    from ragsft_assets.defs.release.assets import UPSTREAM

    folder, instance, _ = demo_release
    raw = (folder / "provenance" / "default" / "manifest.json").read_bytes()
    for secret in SECRETS:
        assert secret.encode() not in raw, secret
    m = orjson.loads(raw)
    # every op's effective config: what the run passed, completed with its defaults
    assert set(UPSTREAM) <= set(m["run_config"]), sorted(m["run_config"])
    drafts = m["run_config"]["question_drafts"]
    assert drafts["max_pairs"] == 8 and drafts["seed"] == 20260731, drafts
    mq = m["run_config"]["multihop_questions"]  # defaults nobody passed, None and {} included
    assert mq["seed"] == 20260731 and "max_judged" in mq and mq["max_judged"] is None, mq
    # the resources' declared settings, credentials masked, settings kept
    judge = m["resources"]["judge"]
    assert judge["budget_tokens"] == 10**9 and judge["model"] == "oracle" and judge["max_model_len"] == 4096
    assert judge["engine_kwargs"] == {"headers": {"Authorization": REDACTED}, "max_num_batched_tokens": 4096}
    assert judge["base_urls"] == [f"http://{REDACTED}@gpu-1:8000/v1?api_key={REDACTED}"]
    # where the run kept its files is not content: the paths are in the run statistics
    assert "home" not in m["resources"]["store"] and "cache_dir" not in judge
    assert m["recipes"] == {} or isinstance(m["recipes"], dict)
    # the content manifest holds no run statistics: they are in run_stats.json
    for roles in m["llm_roles"].values():
        for info in roles.values():
            assert "calls" not in info and "cache_hits" not in info
    stats = orjson.loads((folder / "provenance" / "run_stats.json").read_bytes())
    assert stats["llm_stats"]["question_drafts"]["generator"]["calls"] > 0, stats["llm_stats"]
    assert stats["upstream_runs"]["question_drafts"]["host"]
    assert stats["resource_locations"]["store"]["home"] == str(folder.parent.parent)


def test_demo_release_root_digest_is_printed_recorded_and_checked(demo_release, monkeypatch) -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli.release import verify
    from ragsft_assets.release.manifest import root_digest

    folder, instance, run_id = demo_release
    mat = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("release_manifest"), asset_partitions=["sample.fr"]),
        limit=1,
    ).records[0]
    assert mat.run_id == run_id
    digest = mat.asset_materialization.metadata["root_digest"].value
    assert digest == root_digest(folder)
    logs = [e.user_message for e in instance.all_logs(run_id) if "root digest" in (e.user_message or "")]
    assert any(digest in line for line in logs)  # printed at build
    monkeypatch.setenv("RAGSFT_HOME", str(folder.parent.parent))
    res = CliRunner().invoke(verify, [str(folder), "--catalog"])
    assert res.exit_code == 0 and f"root digest {digest} (as expected)" in res.output, res.output


_INNER = {"a": dg.Field(int, default_value=1), "b": dg.Field(str, default_value="x")}


@dg.asset(
    config_schema={
        "items": dg.Field([_INNER], default_value=[]),
        "maybe": dg.Field(dg.Noneable(_INNER), default_value=None),
        "n": dg.Field(int, default_value=7),
    }
)
def thing() -> None:
    return None


def test_resolved_run_config_fills_nested_defaults_from_the_run_record() -> None:
    """Shapes inside lists and optional fields get their defaults; keys nobody declared are kept."""
    from ragsft_assets.defs.release.assets import resolved_run_config

    instance = dg.DagsterInstance.ephemeral()
    passed = {"ops": {"thing": {"config": {"items": [{"a": 5}], "maybe": {"b": "y"}}}}}
    result = dg.materialize([thing], instance=instance, run_config=passed)
    cfg = resolved_run_config(instance, instance.get_run_by_id(result.run_id))["ops"]["thing"]["config"]
    assert cfg == {"items": [{"a": 5, "b": "x"}], "maybe": {"a": 1, "b": "y"}, "n": 7}
