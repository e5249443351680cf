"""Instance configs, workspace and deploy/ files: they parse, load in Dagster and point at real things."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"


def _load_instance(config: Path, tmp_path: Path, env: dict[str, str] | None = None) -> dg.DagsterInstance:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(config, home / "dagster.yaml")
    return dg.DagsterInstance.from_config(str(home))


def test_dagster_yaml_loads_with_queue_pools_and_monitoring(tmp_path: Path) -> None:
    instance = _load_instance(REPO / "dagster.yaml", tmp_path)
    try:
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None and 1 <= queue.max_concurrent_runs <= 8
        pools = instance.get_concurrency_config().pool_config
        assert pools.default_pool_limit == 1
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
        # Local storage by default: SQLite under the instance folder.
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert type(instance.event_log_storage).__name__ == "SqliteEventLogStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        # What scripts/set_pools.sh does through the CLI: name the gpu pool's limit.
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        assert instance.event_log_storage.get_concurrency_info("gpu").slot_count == 1
    finally:
        instance.dispose()


def test_workspace_yaml_points_at_the_definitions() -> None:
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    (entry,) = workspace["load_from"]
    module = entry["python_module"]
    assert module["module_name"] == "ragsft_assets.definitions"
    assert module["working_directory"] == "."
    import importlib.util

    assert importlib.util.find_spec(module["module_name"]) is not None


@pytest.mark.integration
def test_set_pools_script_sets_the_gpu_pool(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    env = dict(os.environ, DAGSTER_HOME=str(home), RAGSFT_GPU_SLOTS="1")
    env["DAGSTER"] = str(Path(sys.executable).with_name("dagster"))
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "set_pools.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert instance.event_log_storage.get_concurrency_info("gpu").slot_count == 1
        assert instance.event_log_storage.get_concurrency_info("duckdb").slot_count == 1
    finally:
        instance.dispose()


def _yaml_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_k8s_instance_config_loads_with_postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/dagster-k8s.yaml validates against the instance schema (Postgres needs dagster-postgres)."""
    from dagster._core.instance.config import dagster_instance_config

    config_path = DEPLOY / "dagster-k8s.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config["storage"]["postgres"]["postgres_db"]["hostname"]
    assert config["run_launcher"]["module"] == "dagster_k8s"
    assert config["concurrency"]["pools"]["default_limit"] == 1
    assert config["run_monitoring"]["free_slots_after_run_end_seconds"] > 0
    home = tmp_path / "k8s_home"
    home.mkdir()
    shutil.copy(config_path, home / "dagster.yaml")
    # The schema check does not import dagster_postgres/dagster_k8s (not installed here): it validates
    # every key and value of the file against Dagster's own instance schema.
    value, _ = dagster_instance_config(str(home))
    assert value["concurrency"]["runs"]["max_concurrent_runs"] >= 1


def test_helm_values_parse_and_name_our_pieces() -> None:
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"][:2] == ["-m", "ragsft_assets.definitions"]
    assert deployment["image"]["repository"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is True
    assert values["dagsterDaemon"]["runCoordinator"]["enabled"] is True
    env_names = {e["name"] for e in deployment["env"]}
    assert {"RAGSFT_HOME", "RAGSFT_LLM_BASE_URL"} <= env_names
    # The GPU request is where the LLM steps run: the run pods of the K8s launcher.
    run_k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert run_k8s["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert (
        values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["maxConcurrentRuns"] >= 1
    )


def test_vllm_manifest_is_an_openai_server_with_a_service() -> None:
    docs = _yaml_documents(DEPLOY / "vllm.yaml")
    kinds = {doc["kind"]: doc for doc in docs}
    assert {"Deployment", "Service"} <= set(kinds)
    deployment, service = kinds["Deployment"], kinds["Service"]
    assert deployment["spec"]["replicas"] >= 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = " ".join(container.get("args", []) + container.get("command", []))
    assert "vllm serve" in args and "--tensor-parallel-size" in args and "--model" in args
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    port = container["ports"][0]["containerPort"]
    assert service["spec"]["ports"][0]["targetPort"] == port
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # The Helm values point the openai backend at this Service.
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    (user_code,) = values["dagster-user-deployments"]["deployments"]
    base_url = next(e["value"] for e in user_code["env"] if e["name"] == "RAGSFT_LLM_BASE_URL")
    assert service["metadata"]["name"] in base_url and str(service["spec"]["ports"][0]["port"]) in base_url


def test_dockerfile_steps_are_the_readme_install_steps() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    run_lines = [
        line for line in dockerfile.splitlines() if line.startswith(("RUN", "COPY", "CMD", "ENTRYPOINT"))
    ]
    assert any("bash scripts/bootstrap.sh" in line for line in run_lines)
    for script in re.findall(r"scripts/[\w./-]+\.sh", dockerfile):
        assert (REPO / script).is_file(), f"the Dockerfile runs {script}, which does not exist"
    assert "ragsft_assets.definitions" in dockerfile
    assert "dagster-k8s" in dockerfile and "dagster-postgres" in dockerfile
