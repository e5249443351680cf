"""Instance configs, workspace and deploy/ files: they parse, load in Dagster and point at real things."""

from __future__ import annotations

import base64
import copy
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


HELM = REPO / "ragsft_assets_tests" / "data" / "dagster_helm"  # chart 1.7.16, verbatim copies


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


K8S = "1.33"  # the Kubernetes version every object under deploy/ is checked against, strictly
K8S_DEFS = "https://kubernetes.io/api/_definitions.json"  # the $id of kubernetes-validate's definitions


def _k8s_schema_dir() -> Path:
    import kubernetes_validate

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S}.0-local-strict"


def _k8s_refs(node: object, defs: dict) -> object:
    """The chart schema's external (kubernetesjsonschema.dev) $refs pointed at Kubernetes' own strict
    definitions of kubernetes-validate, so what goes inside `resources`, `env`, ... is checked.
    The chart's probes carry one key of the chart's own, `enabled` (it drops it when rendering):
    those get the strict Probe with `enabled` added, nothing else."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            _, _, pointer = ref.partition("#/definitions/")
            assert pointer, f"unexpected external $ref {ref}"
            if pointer == "io.k8s.api.core.v1.Probe":
                probe = _absolute_refs(defs["$defs"][pointer])
                return {**probe, "properties": {**probe["properties"], "enabled": {"type": "boolean"}}}
            return {**node, "$ref": f"{K8S_DEFS}#/$defs/{pointer}"}
        return {k: _k8s_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_k8s_refs(v, defs) for v in node]
    return node


def _absolute_refs(node: object) -> object:
    """A copy of a definition whose local `#/$defs/...` refs name the definitions file."""
    if isinstance(node, dict):
        return {k: f"{K8S_DEFS}{v}" if k == "$ref" else _absolute_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute_refs(v) for v in node]
    return node


def _validate(schema_dir: Path, values: dict) -> list[str]:
    import json

    import jsonschema
    from referencing import Registry, Resource

    defs = json.loads((_k8s_schema_dir() / "_definitions.json").read_text())
    registry = Resource.from_contents(defs) @ Registry()
    schema = _k8s_refs(json.loads((schema_dir / "values.schema.json").read_text()), defs)
    merged = _merge(yaml.safe_load((schema_dir / "values.yaml").read_text()), values)
    validator = jsonschema.Draft7Validator(schema, registry=registry)
    # An error under anyOf (a Kubernetes object or null) says why in its context: keep those too.
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        + "".join(f"; {c.message[:200]}" for c in e.context)
        for e in validator.iter_errors(merged)
    ]


def test_helm_values_validate_against_the_chart_schema_and_kubernetes_own() -> None:
    values = _values()
    assert "1.7.16" in (HELM / "Chart.yaml").read_text()
    assert _validate(HELM, values) == []
    sub = HELM / "charts" / "dagster-user-deployments"
    assert _validate(sub, values["dagster-user-deployments"]) == []
    # The check can fail: a misplaced field (tolerations are not a k8sRunLauncher field) is caught.
    bad = _merge(values, {"runLauncher": {"config": {"k8sRunLauncher": {"tolerations": []}}}})
    assert _validate(HELM, bad)
    # ... and so is a typo inside a Kubernetes object (Kubernetes' strict ResourceRequirements).
    typo = copy.deepcopy(values)
    typo["runLauncher"]["config"]["k8sRunLauncher"]["resources"] = {"requets": {"cpu": "2"}}
    assert any("requets" in e for e in _validate(HELM, typo))
    (deployment,) = typo["dagster-user-deployments"]["deployments"]
    deployment["resources"]["limits"] = {"memory": ["4Gi"]}  # a list where a quantity goes
    deployment["env"][0]["valeu"] = "x"  # an env item's typo
    errors = _validate(sub, typo["dagster-user-deployments"])
    assert any("resources" in e for e in errors) and any("valeu" in e for e in errors), errors


def _run_pod_env() -> dict[str, str]:
    run_k8s = _values()["runLauncher"]["config"]["k8sRunLauncher"]
    return dict(item.split("=", 1) for item in run_k8s["envVars"])


def _code_roles() -> dict[str, str]:
    """Every model role of the code location's resources -> the endpoint kind it calls: `embedding`
    (an embedding resource), `completion` (the base-model role of Recall Rewrite's registry, raw
    prompts) or `chat`. Read from the resources that ``default_resources`` builds, not a list here."""
    from ragsft_assets.recall.registry import PARTITIONS_NAME
    from ragsft_assets.resources.embedder import EmbeddingResource
    from ragsft_assets.resources.llm import LLMResource

    with pytest.MonkeyPatch.context() as mp:
        for key, value in _run_pod_env().items():
            mp.setenv(key, value)
        from ragsft_assets.defs.resources import default_resources

        resources = default_resources()
    roles = {}
    for key, res in resources.items():
        if isinstance(res, EmbeddingResource):
            roles[key] = "embedding"
        elif isinstance(res, LLMResource):
            roles[key] = "completion" if key == PARTITIONS_NAME else "chat"
    return roles


FLEET = {"chat": "vllm-chat", "completion": "vllm-base", "embedding": "vllm-embed"}  # deploy/vllm.yaml


def _fleet() -> dict[str, dict]:
    """Service name -> its Deployment's container, the Service and the names it serves."""
    docs = _yaml_documents(DEPLOY / "vllm.yaml")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    fleet = {}
    for name, dep in deployments.items():
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        i = args.index("--served-model-name") + 1
        served = []
        while i < len(args) and not args[i].startswith("--"):
            served.append(args[i])
            i += 1
        fleet[name] = {"deployment": dep, "container": container, "service": services[name], "served": served}
    return fleet


def _role_problems(env: dict[str, str], roles: dict[str, str]) -> list[str]:
    """What is wrong with each role's settings in ``env``: it must call its fleet server by Service
    URL and a name that server serves."""
    fleet, problems = _fleet(), []
    for role, kind in roles.items():
        prefix = f"RAGSFT_{role.upper()}_"
        service = FLEET[kind]
        url = f"http://{service}.ragsft.svc.cluster.local:8000/v1"
        if env.get(prefix + "BACKEND") != "openai":
            problems.append(f"{prefix}BACKEND is {env.get(prefix + 'BACKEND')!r}, not openai")
        if env.get(prefix + "BASE_URLS") != url:
            problems.append(f"{prefix}BASE_URLS is {env.get(prefix + 'BASE_URLS')!r}, not {url}")
        if env.get(prefix + "MODEL") not in fleet[service]["served"]:
            problems.append(f"{prefix}MODEL {env.get(prefix + 'MODEL')!r} is not served by {service}")
    return problems


def test_every_role_of_the_code_points_at_the_fleet_in_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"][:2] == ["-m", "ragsft_assets.definitions"]
    user_env = {e["name"]: e["value"] for e in deployment["env"]}
    assert user_env == _run_pod_env()  # the code location and the run pods: one env
    run_k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert "nvidia.com/gpu" not in str(run_k8s["resources"])  # run pods only call the fleet over HTTP
    assert {"name": "ragsft-secrets"} in run_k8s["envSecrets"] and deployment["envSecrets"]
    roles = _code_roles()
    assert set(roles.values()) == set(FLEET) and {"generator", "judge", "embedder"} <= set(roles)
    assert _role_problems(user_env, roles) == []
    # A role added to the code without values is caught (the review's `translator`).
    from ragsft_assets.defs import resources as defs_resources

    monkeypatch.setattr(defs_resources, "LLM_ROLES", (*defs_resources.LLM_ROLES, "translator"))
    more = _code_roles()
    assert more["translator"] == "chat"
    assert any("RAGSFT_TRANSLATOR_" in p for p in _role_problems(user_env, more))


def test_the_fleet_serves_the_pinned_vllm_with_a_startup_probe() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (vllm_pin,) = [r for r in extras["gpu"] if r.startswith("vllm")]
    version = vllm_pin.split("==")[1]
    assert version == "0.32.0"  # the vLLM the code targets
    fleet = _fleet()
    assert set(FLEET.values()) <= set(fleet)
    for name, server in fleet.items():
        container, svc, dep = server["container"], server["service"], server["deployment"]
        assert container["image"] == f"vllm/vllm-openai:v{version}", name  # the gpu extra's vLLM
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
        assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
        assert svc["spec"]["ports"][0]["targetPort"] == container["ports"][0]["containerPort"]
        startup = container["startupProbe"]  # weights download + compile before liveness counts
        assert startup["httpGet"]["path"] == "/health"
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200
        assert "initialDelaySeconds" not in container["livenessProbe"]
    # The embedder's truncation in the values is the embedding server's own length.
    args = fleet[FLEET["embedding"]]["container"]["args"]
    assert _run_pod_env()["RAGSFT_EMBEDDER_MAX_TOKENS"] == args[args.index("--max-model-len") + 1]
    readme = (DEPLOY / "README.md").read_text()
    assert "ReadWriteMany" in readme and "ragsft-models" in readme


def test_definitions_resources_under_the_run_pod_env_point_at_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragsft_assets.defs.resources import default_resources

    for key, value in _run_pod_env().items():
        monkeypatch.setenv(key, value)
    resources = default_resources()
    fleet = _fleet()
    for role, kind in _code_roles().items():
        res = resources[role]
        assert res.backend == "openai" and res.model in fleet[FLEET[kind]]["served"], role
        assert res.base_urls == [f"http://{FLEET[kind]}.ragsft.svc.cluster.local:8000/v1"]
    assert resources["embedder"].max_tokens == 16384  # the embedding server's length, set in the values


def test_a_base_model_registered_on_the_cluster_defaults_to_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragsft base-models add KEY --model HF_ID` in a run pod: the fleet's completion server, which
    serves its model under the HF id too."""
    from click.testing import CliRunner

    from ragsft_assets.cli import main
    from ragsft_assets.defs.resources import llm_for_role
    from ragsft_assets.recall import registry

    env = _run_pod_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAGSFT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    base = _fleet()[FLEET["completion"]]
    container = base["container"]
    hf_id = container["args"][container["args"].index("--model") + 1]
    assert hf_id in base["served"] and "base" in base["served"]
    out = CliRunner().invoke(main, ["base-models", "add", "qwen2.5-7b", "--model", hf_id])
    assert out.exit_code == 0, out.output
    entry = registry.resolve("qwen2.5-7b")
    assert entry == registry.BaseModelEntry(hf_id, "openai", [env["RAGSFT_BASE_MODEL_BASE_URLS"]])
    res = registry.resource_for_key(llm_for_role("base_model"), "qwen2.5-7b")
    assert res.backend == "openai" and res.model in base["served"]


def test_dockerfile_installs_the_locked_k8s_extra_and_requires_the_commit() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    run_lines = [line for line in dockerfile.splitlines() if line.lstrip().startswith(("RUN", "&&"))]
    install = " ".join(run_lines)
    lock = "pip install --no-cache-dir -r constraints.txt"
    package = 'pip install --no-cache-dir -c constraints.txt ".[k8s]"'
    assert lock in install and package in install  # the lock, then the package; no other extra
    assert "[embedded]" not in install and "[dev]" not in install and "bootstrap.sh" not in install
    assert "vllm" not in install and "torch" not in install
    assert "gcc" not in dockerfile and "apt-get" not in dockerfile  # pure Python: no compiler
    copies = [line for line in dockerfile.splitlines() if line.startswith("COPY")]
    # Layers: only the lock before the dependency install, so a commit does not reinstall them.
    assert dockerfile.index(lock) < dockerfile.index("ARG RAGSFT_GIT_COMMIT") < dockerfile.index(package)
    assert [c for c in copies if dockerfile.index(c) < dockerfile.index(lock)] == ["COPY constraints.txt ./"]
    # One copy of the source: the package step builds from a bind mount of the context, no COPY of it.
    assert not any("ragsft_assets" in c or "pyproject" in c for c in copies)
    assert re.search(r"RUN --mount=type=bind,source=\.,target=(\S+),rw", dockerfile)
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {".git", ".venv", ".ragsft"} <= set(ignored)  # no environment, history or home in the context
    assert "ragsft_assets.definitions" in dockerfile
    # The commit: an ARG without a default, checked by a RUN before the package is installed.
    assert re.search(r"^ARG RAGSFT_GIT_COMMIT$", dockerfile, flags=re.M)
    assert "RAGSFT_GIT_COMMIT=${RAGSFT_GIT_COMMIT}" in dockerfile
    (check,) = [line for line in run_lines if "RAGSFT_GIT_COMMIT" in line]
    assert dockerfile.index(check) < dockerfile.index(package)
    script = check.removeprefix("RUN ")
    missing = subprocess.run(
        ["sh", "-c", script], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "--build-arg RAGSFT_GIT_COMMIT" in missing.stderr
    given = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": os.environ["PATH"], "RAGSFT_GIT_COMMIT": "abc123"},
        capture_output=True,
    )
    assert given.returncode == 0


def test_the_image_runs_as_a_numeric_non_root_user_on_a_base_pinnable_by_digest() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)$", dockerfile, flags=re.M)
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    uid = int(users[-1].split(":")[0])
    assert f"--uid {uid}" in dockerfile  # the user exists in the image
    # The pods run as that uid, with fsGroup so that the data volume is writable.
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["podSecurityContext"]["runAsUser"] == uid
    assert deployment["podSecurityContext"]["fsGroup"] == uid
    assert deployment["podSecurityContext"]["runAsNonRoot"] is True
    run_pod = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]
    assert run_pod["securityContext"]["runAsUser"] == uid and run_pod["securityContext"]["runAsNonRoot"]
    # FROM the PYTHON_BASE argument; its default is the tag or the tag@sha256:<64 hex>, and the way to
    # learn the digest is written next to it (no digest was verified offline: none is made up).
    assert re.search(r"^FROM \$\{PYTHON_BASE\}$", dockerfile, flags=re.M)
    (base,) = re.findall(r"^ARG PYTHON_BASE=(\S+)$", dockerfile, flags=re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm(@sha256:[0-9a-f]{64})?", base)
    assert "docker buildx imagetools inspect python:3.11-slim-bookworm" in dockerfile
    assert dockerfile.index("ARG PYTHON_BASE") < dockerfile.index("FROM ")


CHART = DEPLOY / "chart"  # wrapper chart: dagster/dagster at the pin + the pool-limit hook Job


def _chart_values(**pools: object) -> dict:
    """The wrapper's values as deploy/README.md installs them: helm/values.yaml under `dagster:`."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["dagster"] = _values()
    values["pools"].update(pools)
    return values


def _render_chart(values: dict, tmp_path: Path) -> dict[str, list[dict]]:
    """``helm template`` of the wrapper chart with Helm's own engine (helm-python-sdk embeds Helm as
    a library, offline). The official `dagster` chart dependency is not in reach offline: a stub chart
    of that name and version stands in for it (it renders nothing), so only our templates render."""
    import helm_python as helm

    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (dep,) = yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    stub = chart / "charts" / dep["name"]
    (stub / "templates").mkdir(parents=True)
    (stub / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": dep["name"], "version": dep["version"]})
    )
    with helm.Chart.load(chart) as loaded:
        assert [d["name"] for d in loaded.dependencies] == [dep["name"]]
        rendered = loaded.render(values, name="dagster", namespace="ragsft", is_install=True)
    return {path: [d for d in yaml.safe_load_all(text) if d] for path, text in rendered.items()}


def _manifests(tmp_path: Path) -> list[tuple[str, dict]]:
    """Every Kubernetes object of deploy/: plain manifests, and the wrapper chart's templates rendered."""
    objects: list[tuple[str, dict]] = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        rel = path.relative_to(DEPLOY).as_posix()
        if rel.startswith("chart/templates/"):
            continue  # Helm templates: rendered below
        docs = _yaml_documents(path)
        kinds = [isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs]
        # Values and chart metadata are the only YAML that is not a manifest: nothing is skipped silently.
        if not any(kinds):
            assert rel in {"helm/values.yaml", "chart/values.yaml", "chart/Chart.yaml"}, rel
            continue
        assert all(kinds), rel
        objects += [(rel, d) for d in docs]
    for rel, docs in _render_chart(_chart_values(), tmp_path).items():
        objects += [(rel, d) for d in docs]
    return objects


def _k8s_errors(obj: dict) -> list[str]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.absolute_path))}: {exc.message[:200]}"]
    return []


def test_every_manifest_under_deploy_validates_strictly_for_kubernetes_1_33(tmp_path: Path) -> None:
    objects = _manifests(tmp_path)
    kinds = {(rel, obj["kind"]) for rel, obj in objects}
    assert {"Deployment", "Service", "Job", "Secret"} <= {kind for _, kind in kinds}, kinds
    assert ("ragsft-dagster/templates/gpu-pool-job.yaml", "Job") in kinds
    for rel, obj in objects:
        assert _k8s_errors(obj) == [], (rel, obj["kind"], obj["metadata"]["name"])
    # A typo inside `resources` of a manifest is caught.
    deployment = copy.deepcopy(next(o for _, o in objects if o["kind"] == "Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limts"] = container["resources"].pop("limits")
    assert any("limts" in e for e in _k8s_errors(deployment))


def test_no_secret_in_the_values_and_the_postgres_password_comes_from_a_secret(tmp_path: Path) -> None:
    def secrets(node: object, path: str = "") -> list[str]:
        found = []
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}/{key}"
                if re.search(r"password|passwd|token|api_?key|secret_?key", key, re.I) and isinstance(
                    value, str
                ):
                    found += [here] if value else []
                found += secrets(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                found += secrets(value, f"{path}/{i}")
        return found

    values, chart_values = _values(), yaml.safe_load((CHART / "values.yaml").read_text())
    assert secrets(values) == [] and secrets(chart_values) == []
    assert "password" not in str(_run_pod_env()).lower()
    assert secrets({"postgresql": {"postgresqlPassword": "change-me"}})  # the check can fail
    # Dagster's pods, the bundled PostgreSQL and the hook Job read one Secret, which the chart makes.
    chart_defaults = yaml.safe_load((HELM / "values.yaml").read_text())["global"]
    name = chart_values["postgresqlSecret"]["name"]
    assert name == chart_defaults["postgresqlSecretName"] == values["postgresql"]["existingSecret"]
    assert values["generatePostgresqlPasswordSecret"] is False  # not the chart's secret from values
    rendered = _render_chart(_chart_values(), tmp_path / "a")
    (secret,) = rendered["ragsft-dagster/templates/postgresql-secret.yaml"]
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == name
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    password = base64.b64decode(secret["data"]["postgresql-password"]).decode()
    assert len(password) == 32 and password.isalnum()
    again = _render_chart(_chart_values(), tmp_path / "b")["ragsft-dagster/templates/postgresql-secret.yaml"]
    assert again[0]["data"] != secret["data"]  # random per install (an upgrade reads it back: lookup)
    # Bring your own: no Secret rendered.
    own = _chart_values()
    own["postgresqlSecret"]["generate"] = False
    assert _render_chart(own, tmp_path / "c")["ragsft-dagster/templates/postgresql-secret.yaml"] == []


def test_one_run_pod_configuration_the_helm_values() -> None:
    """The run launcher is defined once, in the Helm values: no instance config beside it."""
    launchers = []
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and "K8sRunLauncher" in path.read_text(errors="ignore"):
            launchers.append(path.relative_to(DEPLOY).as_posix())
    assert [p for p in launchers if p.endswith((".yaml", ".yml"))] == ["helm/values.yaml"]
    run_k8s = _values()["runLauncher"]["config"]["k8sRunLauncher"]
    assert run_k8s["envConfigMaps"] == []  # no ConfigMap that nothing defines: the env is envVars


def test_wrapper_chart_pins_the_dagster_chart_at_the_dagster_pin() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (dep,) = chart["dependencies"]
    assert dep["name"] == "dagster" and dep["repository"] == "https://dagster-io.github.io/helm"
    assert dep["version"] == dg.__version__ == chart["appVersion"]
    assert f'"dagster=={dep["version"]}"' in (REPO / "pyproject.toml").read_text()
    assert f"dagster=={dep['version']}\n" in (REPO / "constraints.txt").read_text()
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

    (job,) = _render_chart(_chart_values(gpu=3), tmp_path / "chart")[
        "ragsft-dagster/templates/gpu-pool-job.yaml"
    ]
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


def test_vllm_pods_and_the_hook_job_run_as_non_root(tmp_path: Path) -> None:
    """securityContext: no root, no privilege escalation, no capability, the runtime's seccomp profile."""
    pods = [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in _yaml_documents(DEPLOY / "vllm.yaml")
        if d.get("kind") == "Deployment"
    ]
    rendered = _render_chart(_chart_values(), tmp_path)
    pods += [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for docs in rendered.values()
        for d in docs
        if d.get("kind") == "Job"
    ]
    assert {name for name, _ in pods} >= {"vllm-chat", "vllm-base", "vllm-embed", "dagster-ragsft-pools"}
    for name, spec in pods:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], name
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if name.startswith("vllm-"):
                # A uid without a home directory: HOME must be writable (compile caches), per pod.
                mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
                assert env["HOME"] in mounts and "emptyDir" in next(
                    v for v in spec["volumes"] if v["name"] == mounts[env["HOME"]]
                ), name
                assert "fsGroup" in pod, name  # HF_HOME on the models volume is writable
