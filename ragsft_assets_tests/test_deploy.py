"""Instance configs, workspace and deploy/ files: they parse, load in Dagster and point at real things."""

from __future__ import annotations

import os
import re
import shlex
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


HELM = REPO / "ragsft_assets_tests" / "data" / "dagster_helm"  # chart 1.7.16, verbatim copies
FLEET_ROLES = {  # role -> (Service, --served-model-name) of deploy/vllm.yaml
    "generator": ("vllm-chat", "chat"),
    "judge": ("vllm-chat", "chat"),
    "annotator": ("vllm-chat", "chat"),
    "base_model": ("vllm-base", "base"),
    "embedder": ("vllm-embed", "embedding"),
}


def _values() -> dict:
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())


def _merge(base: object, over: object) -> object:
    """Helm's merge of values: maps merge key by key, anything else (lists too) is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {
            k: _merge(base[k], over[k]) if k in base and k in over else over.get(k, base.get(k))
            for k in base | over
        }
    return over


def _open_external_refs(node: object) -> object:
    """External (kubernetesjsonschema.dev) $refs become open schemas: nothing is downloaded."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return {}  # open: accepts what the external definition would (objects, lists)
        return {k: _open_external_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_open_external_refs(v) for v in node]
    return node


def _validate(schema_dir: Path, values: dict) -> list[str]:
    import json

    import jsonschema

    schema = _open_external_refs(json.loads((schema_dir / "values.schema.json").read_text()))
    merged = _merge(yaml.safe_load((schema_dir / "values.yaml").read_text()), values)
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(merged)
    ]


def test_helm_values_validate_against_the_chart_schema() -> None:
    values = _values()
    assert "1.7.16" in (HELM / "Chart.yaml").read_text()
    assert _validate(HELM, values) == []
    sub = HELM / "charts" / "dagster-user-deployments"
    assert _validate(sub, values["dagster-user-deployments"]) == []
    # The check can fail: a misplaced field (tolerations are not a k8sRunLauncher field) is caught.
    bad = _merge(values, {"runLauncher": {"config": {"k8sRunLauncher": {"tolerations": []}}}})
    assert _validate(HELM, bad)


def _run_pod_env() -> dict[str, str]:
    run_k8s = _values()["runLauncher"]["config"]["k8sRunLauncher"]
    return dict(item.split("=", 1) for item in run_k8s["envVars"])


def test_run_pods_and_user_code_get_the_same_fleet_env_and_no_gpu() -> None:
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"][:2] == ["-m", "ragsft_assets.definitions"]
    user_env = {e["name"]: e["value"] for e in deployment["env"]}
    assert user_env == _run_pod_env()
    run_k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert "nvidia.com/gpu" not in str(run_k8s["resources"])  # run pods only call the fleet over HTTP
    assert {"name": "ragsft-secrets"} in run_k8s["envSecrets"] and deployment["envSecrets"]
    for role, (service, served) in FLEET_ROLES.items():
        prefix = f"RAGSFT_{role.upper()}_"
        assert user_env[prefix + "BACKEND"] == "openai"
        assert f"//{service}." in user_env[prefix + "BASE_URLS"] and user_env[prefix + "MODEL"] == served


def test_the_fleet_serves_what_the_values_name() -> None:
    docs = _yaml_documents(DEPLOY / "vllm.yaml")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for service, served in set(FLEET_ROLES.values()):
        dep, svc = deployments[service], services[service]
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("vllm/vllm-openai:")  # vLLM's own server image
        args = container["args"]
        assert args[args.index("--served-model-name") + 1] == served
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
        assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
        assert svc["spec"]["ports"][0]["targetPort"] == container["ports"][0]["containerPort"]


def test_definitions_resources_under_the_run_pod_env_point_at_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragsft_assets.defs.resources import default_resources

    for key, value in _run_pod_env().items():
        monkeypatch.setenv(key, value)
    resources = default_resources()
    for role, (service, served) in FLEET_ROLES.items():
        res = resources[role]
        assert res.backend == "openai" and res.model == served, role
        assert len(res.base_urls) == 1 and f"//{service}.ragsft.svc.cluster.local:8000/v1" in res.base_urls[0]
    assert resources["embedder"].max_tokens == 256  # the embedding server's length, set in the values


def test_dockerfile_installs_the_package_without_embedded_or_dev() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    run_lines = [line for line in dockerfile.splitlines() if line.lstrip().startswith(("RUN", "&&"))]
    install = " ".join(run_lines)
    assert "pip install --no-cache-dir . " in install  # the package itself, no extras
    assert "[embedded]" not in install and "[dev]" not in install and "bootstrap.sh" not in install
    assert "vllm" not in install and "torch" not in install
    assert "ARG RAGSFT_GIT_COMMIT" in dockerfile and "RAGSFT_GIT_COMMIT=${RAGSFT_GIT_COMMIT}" in dockerfile
    assert "ragsft_assets.definitions" in dockerfile
    assert "dagster-k8s" in dockerfile and "dagster-postgres" in dockerfile
    # The compiled corpus rules are built in the image, and the build fails if they are not.
    assert "setup.py" in dockerfile.split("RUN", 1)[0] and "RAGSFT_REQUIRE_NATIVE=1" in install


CHART = DEPLOY / "chart"  # wrapper chart: dagster/dagster at the pin + the pool-limit hook Job
_PLACEHOLDER = re.compile(r"\{\{-?\s*(.+?)\s*-?\}\}")


def _chart_values(**pools: object) -> dict:
    """The wrapper's values as deploy/README.md installs them: helm/values.yaml under `dagster:`."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["dagster"] = _values()
    values["pools"].update(pools)
    return values


def _render_pool_job(values: dict) -> dict:
    """A small stand-in for `helm template` (no helm binary here): drops the `{{- $var := ... }}`
    lines, resolves `.Release.Name`, `.Values.<path>` and `$image.<field>` as the template's first
    lines define them, and fails on any other placeholder, so a template change cannot slip past."""
    deployments = values["dagster"]["dagster-user-deployments"]["deployments"]
    image = values["pools"]["image"] or deployments[0]["image"]  # `default (index $deployments 0).image`

    def resolve(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr == ".Release.Name":
            return "dagster"
        node: object
        if expr.startswith(".Values."):
            node, path = values, expr.removeprefix(".Values.").split(".")
        elif expr.startswith("$image."):
            node, path = image, expr.removeprefix("$image.").split(".")
        else:
            raise AssertionError(f"the test's renderer does not know {{{{ {expr} }}}}")
        for part in path:
            node = node[part]  # type: ignore[index]
        return str(node)

    text = (CHART / "templates" / "gpu-pool-job.yaml").read_text()
    lines = [line for line in text.splitlines() if not re.fullmatch(r"\s*\{\{-\s*\$\w+ :=.*\}\}\s*", line)]
    return yaml.safe_load(_PLACEHOLDER.sub(resolve, "\n".join(lines)))


def test_wrapper_chart_pins_the_dagster_chart_at_the_dagster_pin() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (dep,) = chart["dependencies"]
    assert dep["name"] == "dagster" and dep["repository"] == "https://dagster-io.github.io/helm"
    assert dep["version"] == dg.__version__ == "1.13.28"
    assert '"dagster==1.13.28"' in (REPO / "pyproject.toml").read_text()
    template = (CHART / "templates" / "gpu-pool-job.yaml").read_text()
    assert 'index .Values.dagster "dagster-user-deployments" "deployments"' in template
    # deploy/README.md's one-liner nests exactly the values that the schema test validates.
    readme = (DEPLOY / "README.md").read_text()
    (code,) = re.findall(r"python -c '(.+?)' \\\n\s+deploy/helm/values.yaml", readme)
    out = subprocess.run(
        [sys.executable, "-c", code, str(DEPLOY / "helm" / "values.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout) == {"dagster": _values()} and _chart_values()["dagster"] == _values()


def test_pool_hook_job_sets_the_gpu_pool_from_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner
    from dagster._cli.instance import instance_cli

    job = _render_pool_job(_chart_values(gpu=3))
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    hooks = job["metadata"]["annotations"]
    assert set(hooks["helm.sh/hook"].split(",")) == {"post-install", "post-upgrade"}  # no manual step
    assert "before-hook-creation" in hooks["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Same image and instance config as the user code: the chart's instance ConfigMap at DAGSTER_HOME.
    user_image = _values()["dagster-user-deployments"]["deployments"][0]["image"]
    assert container["image"] == f"{user_image['repository']}:{user_image['tag']}"
    chart_defaults = yaml.safe_load((HELM / "values.yaml").read_text())["global"]
    env = {e["name"]: e for e in container["env"]}
    assert env["DAGSTER_HOME"]["value"] == chart_defaults["dagsterHome"]
    secret = env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": chart_defaults["postgresqlSecretName"], "key": "postgresql-password"}
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == f"{chart_defaults['dagsterHome']}/dagster.yaml" and mount["subPath"]
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"] and volume["configMap"]["name"] == "dagster-instance"
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    # N comes from values: the rendered command, run with Dagster's own CLI on a local instance.
    assert container["command"] == ["/bin/sh", "-c"]
    (script,) = container["args"]
    steps = [shlex.split(part) for part in script.split("&&")]
    assert steps[0] == ["dagster", "instance", "concurrency", "set", "gpu", "3"]
    assert steps[1] == ["dagster", "instance", "concurrency", "set", "duckdb", "1"]
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for step in steps:
        assert step[:2] == ["dagster", "instance"]
        out = CliRunner().invoke(instance_cli, step[2:])
        assert out.exit_code == 0, out.output
    assert '"gpu": 0 / 3 slots occupied' in out.output
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert instance.event_log_storage.get_concurrency_info("gpu").slot_count == 3
        assert instance.event_log_storage.get_concurrency_info("duckdb").slot_count == 1
    finally:
        instance.dispose()
