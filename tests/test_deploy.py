"""The deployment recipes under deploy/ are well-formed and use commands that exist.

No container or Kubernetes engine runs here, so this checks what can be checked locally: every
YAML file parses and has the structure its tool expects; every ``streamrff ...`` command line in
deploy/ parses with the real argument parser; every ``dask scheduler`` / ``dask worker`` command
uses flags that ``dask scheduler --help`` / ``dask worker --help`` of the installed distributed
lists; images are pinned; the Python examples compile and the shell scripts pass ``bash -n``.
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import re
import shlex
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from streamrff.cli import build_parser  # noqa: E402

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
TEXT_FILES = sorted(
    path
    for path in DEPLOY.rglob("*")
    if path.is_file() and (path.suffix in {".md", ".py", ".sh", ".yml", ".yaml"} or path.name == "Dockerfile")
)
STREAMRFF_COMMANDS = {"sketch", "merge", "info", "demo", "test", "kmeans", "kpca", "watch"}
DASK_COMMANDS = {"scheduler", "worker"}
#: Values for the environment placeholders the recipes use ($(VAR) in Kubernetes, ${VAR} / $VAR in shells).
PLACEHOLDERS = {
    "DASK_SCHEDULER_ADDRESS": "tcp://scheduler:8786",
    "DASK_WORKER_NAME": "worker-0",
}
#: Keys of the Dask Helm chart's values.yaml (dask/helm-chart, dask/values.yaml) that the
#: recipe may set, by section.
HELM_KEYS = {
    "scheduler": {
        "name", "enabled", "image", "replicas", "serviceType", "loadBalancerIP", "servicePort",
        "serviceAnnotations", "env", "extraArgs", "resources", "tolerations", "affinity",
        "nodeSelector", "securityContext", "serviceAccountName", "metrics", "livenessProbe",
        "readinessProbe",
    },
    "worker": {
        "name", "image", "replicas", "strategy", "custom_scheduler_url", "default_resources", "env",
        "extraArgs", "resources", "mounts", "annotations", "tolerations", "affinity", "nodeSelector",
        "securityContext", "serviceAccountName", "port", "portDashboard", "threads_per_worker",
        "metrics", "livenessProbe", "readinessProbe",
    },
    "image": {"repository", "tag", "pullPolicy", "pullSecrets", "dask_worker"},
    "top": {"nameOverride", "fullnameOverride", "scheduler", "webUI", "worker", "additional_worker_groups", "jupyter"},
}  # fmt: skip


# -- helpers -----------------------------------------------------------------------------


def _documents(path: Path) -> list[Any]:
    with path.open() as stream:
        return [document for document in yaml.safe_load_all(stream) if document is not None]


def _walk(node: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    """Yield (key, value) for every value in a parsed YAML tree (key None inside lists)."""
    yield key, node
    if isinstance(node, dict):
        for child_key, child in node.items():
            yield from _walk(child, str(child_key))
    elif isinstance(node, list):
        for child in node:
            yield from _walk(child, None)


def _substitute(token: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        return PLACEHOLDERS.get(name, f"placeholder-{name.lower()}")

    return re.sub(r"\$\((\w+)\)|\$\{(\w+)[^}]*\}|\$(\w+)", value, token)


def _yaml_command_lines() -> list[tuple[str, list[str]]]:
    """argv lists of every `command:`/`args:` in the YAML files, plus Helm `extraArgs`."""
    found = []
    for path in YAML_FILES:
        for document in _documents(path):
            for key, value in _walk(document):
                if key in {"command", "args", "extraArgs"} and isinstance(value, list):
                    argv = [str(item) for item in value]
                elif key == "command" and isinstance(value, str):
                    argv = shlex.split(value)
                else:
                    continue
                found.append((f"{path.relative_to(REPO)} {key}", argv))
    return found


def _joined_lines(path: Path) -> list[str]:
    """Lines of a text file without comment markers and prompts, joined across trailing backslashes.

    A docstring writes the continuation as a double backslash; both forms are joined.
    """
    joined: list[str] = []
    buffer = ""
    for raw in path.read_text().splitlines():
        line = raw.strip().lstrip("#").strip().removeprefix("$ ").strip()
        if line.endswith("\\"):
            buffer += line.rstrip("\\").rstrip() + " "
            continue
        joined.append(buffer + line)
        buffer = ""
    return joined


def _text_command_lines() -> list[tuple[str, list[str]]]:
    """`streamrff CMD ...` and `dask scheduler|worker ...` lines written in deploy/'s files.

    Covers Markdown code blocks, comments and docstrings: a line counts when its first two
    words are a streamrff or dask command.
    """
    found = []
    for path in TEXT_FILES:
        for line in _joined_lines(path):
            words = line.split()
            if len(words) < 2:
                continue
            if (words[0] == "streamrff" and words[1] in STREAMRFF_COMMANDS) or (
                words[0] == "dask" and words[1] in DASK_COMMANDS
            ):
                # Text after a command in prose (e.g. "`streamrff sketch ...`") is cut at a backtick.
                line = line.split("`")[0]
                found.append((f"{path.relative_to(REPO)}: {line}", shlex.split(line)))
    return found


def _all_command_lines() -> list[tuple[str, list[str]]]:
    return _yaml_command_lines() + _text_command_lines()


@cache
def _dask_help(subcommand: str | None) -> str:
    argv = [sys.executable, "-m", "dask", *([subcommand] if subcommand else []), "--help"]
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return completed.stdout


def _dask_subcommands() -> set[str]:
    """The subcommand names listed under "Commands:" in `dask --help`."""
    section = _dask_help(None).split("Commands:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.strip()}


def _compose() -> dict[str, Any]:
    (document,) = _documents(DEPLOY / "docker-compose.yml")
    return document


def _k8s_resources() -> list[dict[str, Any]]:
    return _documents(DEPLOY / "kubernetes" / "daskcluster.yaml")


def _containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return pod_spec["containers"]


# -- YAML structure ----------------------------------------------------------------------


def test_deploy_yaml_files_parse() -> None:
    names = {path.relative_to(DEPLOY).as_posix() for path in YAML_FILES}
    assert {"docker-compose.yml", "kubernetes/daskcluster.yaml", "kubernetes/helm-values.yaml",
            "kubernetes/watch.yaml", "prometheus/streamrff-watch-rules.yaml"} <= names  # fmt: skip
    for path in YAML_FILES:
        documents = _documents(path)
        assert documents, f"{path} holds no YAML document"
        assert all(isinstance(document, dict) for document in documents), path


def test_deploy_compose_has_store_cluster_and_jobs() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"s3", "scheduler", "worker", "data", "sketch"} <= set(services)

    store_image = services["s3"]["image"]
    assert store_image.startswith(("motoserver/moto:", "minio/minio:", "quay.io/minio/minio:")), store_image

    assert services["scheduler"]["command"][:2] == ["dask", "scheduler"]
    workers = [service for service in services.values() if service.get("command", [])[:2] == ["dask", "worker"]]
    n_workers = sum(service.get("deploy", {}).get("replicas", 1) for service in workers)
    assert n_workers >= 2
    assert all("tcp://scheduler:8786" in service["command"] for service in workers)

    sketch = services["sketch"]["command"]
    assert sketch[:2] == ["streamrff", "sketch"]
    assert sketch[2].startswith("s3://")
    assert sketch[sketch.index("--scheduler") + 1] == "tcp://scheduler:8786"
    assert sketch[sketch.index("-o") + 1].startswith("s3://")
    options = json.loads(sketch[sketch.index("--storage-options") + 1])
    assert options["endpoint_url"] == "http://s3:5000"
    assert options["config_kwargs"]["s3"]["addressing_style"] == "path"

    # Every dependency names a service; the jobs wait for the data and the cluster.
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
    assert services["sketch"]["depends_on"]["data"]["condition"] == "service_completed_successfully"
    assert "s3" in services["data"]["depends_on"]

    # One image for client, scheduler and workers, built from this repository.
    streamrff_services = [services[name] for name in ("scheduler", "worker", "data", "sketch")]
    assert len({service["image"] for service in streamrff_services}) == 1
    for service in streamrff_services:
        build = service["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert (context / "pyproject.toml").exists()
        assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def test_deploy_recipes_keep_credentials_out_of_storage_options() -> None:
    # Storage options travel in the task graph: credentials belong in the environment.
    secret_keys = {"key", "secret", "token", "aws_secret_access_key", "aws_access_key_id"}
    found = [
        (where, argv[argv.index("--storage-options") + 1])
        for where, argv in _all_command_lines()
        if "--storage-options" in argv
    ]
    for path in YAML_FILES:
        for document in _documents(path):
            for key, value in _walk(document):
                if key == "STORAGE_OPTIONS":
                    found.append((f"{path.relative_to(REPO)} STORAGE_OPTIONS", value))
    assert len(found) >= 3
    for where, text in found:
        options = json.loads(_substitute(text))
        assert isinstance(options, dict), where
        assert not secret_keys & {name.lower() for name in options}, where


def test_deploy_inline_python_compiles() -> None:
    scripts = [(where, argv[2]) for where, argv in _yaml_command_lines() if argv[:2] == ["python", "-c"]]
    assert scripts, "expected the compose data job to run `python -c ...`"
    for where, script in scripts:
        compile(script, where, "exec")


@pytest.mark.parametrize("script", ["hpc/slurm_cluster.py", "tls/client_example.py"])
def test_deploy_python_example_invocations_parse(script: str) -> None:
    # `python deploy/<script> ...` lines in the docs parse with the script's own parser.
    spec = importlib.util.spec_from_file_location(f"deploy_example_{Path(script).stem}", DEPLOY / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines functions only; imports happen in main()
    invocations = []
    for path in TEXT_FILES:
        for line in _joined_lines(path):
            if line.startswith(f"python deploy/{script} "):
                invocations.append((path, [_substitute(word) for word in shlex.split(line)[2:]]))
    assert invocations, f"no `python deploy/{script}` example found in deploy/"
    for path, argv in invocations:
        try:
            module._parse_args(argv)
        except SystemExit as exit_:
            pytest.fail(f"{path}: `python deploy/{script} {shlex.join(argv)}` does not parse (exit {exit_.code})")


def test_deploy_kubernetes_daskcluster_and_daskjob() -> None:
    resources = {resource["kind"]: resource for resource in _k8s_resources()}
    assert set(resources) == {"DaskCluster", "DaskJob"}
    for resource in resources.values():
        assert resource["apiVersion"] == "kubernetes.dask.org/v1"
        assert resource["metadata"]["name"]

    cluster = resources["DaskCluster"]["spec"]
    job = resources["DaskJob"]["spec"]
    for spec in (cluster, job["cluster"]["spec"]):
        assert spec["worker"]["replicas"] >= 1
        (worker,) = _containers(spec["worker"]["spec"])
        (scheduler,) = _containers(spec["scheduler"]["spec"])
        assert worker["args"][:2] == ["dask", "worker"]
        assert scheduler["args"][:2] == ["dask", "scheduler"]
        assert {port["containerPort"] for port in scheduler["ports"]} >= {8786}
        assert spec["scheduler"]["service"]["ports"][0]["port"] == 8786
    (runner,) = _containers(job["job"]["spec"])
    assert runner["args"][:2] == ["streamrff", "sketch"]
    assert "$(DASK_SCHEDULER_ADDRESS)" in runner["args"]
    images = {
        container["image"]
        for spec in (cluster, job["cluster"]["spec"])
        for role in ("worker", "scheduler")
        for container in _containers(spec[role]["spec"])
    } | {runner["image"]}
    assert len(images) == 1, f"client, scheduler and workers must run one image. Got {images}."


def test_deploy_helm_values_use_chart_keys() -> None:
    (values,) = _documents(DEPLOY / "kubernetes" / "helm-values.yaml")
    assert set(values) <= HELM_KEYS["top"]
    assert set(values["scheduler"]) <= HELM_KEYS["scheduler"]
    assert set(values["worker"]) <= HELM_KEYS["worker"]
    for section in ("scheduler", "worker"):
        image = values[section]["image"]
        assert set(image) <= HELM_KEYS["image"]
        assert image["repository"] and image["tag"]
    assert values["scheduler"]["image"] == values["worker"]["image"]
    assert isinstance(values["worker"]["replicas"], int) and values["worker"]["replicas"] >= 1
    for variable in values["worker"]["env"]:
        assert set(variable) in ({"name", "value"}, {"name", "valueFrom"}), variable
    assert values["jupyter"]["enabled"] is False


# -- commands ------------------------------------------------------------------------------


def test_deploy_command_lines_are_found() -> None:
    commands = [argv[:2] for _, argv in _all_command_lines()]
    assert ["streamrff", "sketch"] in commands
    assert ["dask", "scheduler"] in commands and ["dask", "worker"] in commands


def test_deploy_streamrff_command_lines_parse() -> None:
    parser = build_parser()
    checked = 0
    for where, argv in _all_command_lines():
        if not argv or argv[0] != "streamrff":
            continue
        arguments = [_substitute(token) for token in argv[1:]]
        try:
            namespace = parser.parse_args(arguments)
        except SystemExit as exit_:  # argparse reports errors by exiting
            pytest.fail(f"{where}: `streamrff {shlex.join(arguments)}` does not parse (exit {exit_.code})")
        options = getattr(namespace, "storage_options", None)
        if options is not None:
            assert isinstance(json.loads(options), dict), where
        checked += 1
    assert checked >= 3


def test_deploy_dask_command_lines_use_existing_flags() -> None:
    subcommands = _dask_subcommands()
    assert DASK_COMMANDS <= subcommands
    checked = 0
    for where, argv in _all_command_lines():
        if argv[:1] in (["dask-scheduler"], ["dask-worker"]):
            pytest.fail(f"{where}: {argv[0]} was removed in distributed 2026.6; use `dask {argv[0][5:]}`.")
        if not argv or argv[0] != "dask":
            continue
        assert argv[1] in subcommands, f"{where}: `dask {argv[1]}` is not a dask subcommand"
        help_text = _dask_help(argv[1])
        for token in argv[2:]:
            if token.startswith("--"):
                flag = token.split("=", 1)[0]
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
                    f"{where}: `dask {argv[1]}` has no option {flag}"
                )
        checked += 1
    # Helm extraArgs are appended to the chart's own `dask scheduler` / `dask worker` lines.
    (values,) = _documents(DEPLOY / "kubernetes" / "helm-values.yaml")
    for section in ("scheduler", "worker"):
        for token in values[section].get("extraArgs", []):
            if str(token).startswith("--"):
                assert str(token).split("=", 1)[0] in _dask_help(section), f"helm {section}.extraArgs: {token}"
    assert checked >= 4


def test_deploy_tls_commands_use_tls_flags_and_addresses() -> None:
    lines = [argv for where, argv in _text_command_lines() if where.startswith("deploy/tls/")]
    dask_lines = [argv for argv in lines if argv[0] == "dask"]
    assert {argv[1] for argv in dask_lines} == {"scheduler", "worker"}
    for argv in dask_lines:
        assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(argv)
        if argv[1] == "worker":
            assert argv[2].startswith("tls://")
        else:
            assert argv[argv.index("--protocol") + 1] == "tls"


# -- images ----------------------------------------------------------------------------------


def _image_references() -> list[tuple[str, str]]:
    found = []
    for path in YAML_FILES:
        for document in _documents(path):
            for key, value in _walk(document):
                if key == "image" and isinstance(value, str):
                    found.append((str(path.relative_to(REPO)), value))
                elif key == "image" and isinstance(value, dict) and "repository" in value:
                    found.append((str(path.relative_to(REPO)), f"{value['repository']}:{value.get('tag', '')}"))
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            found.append(("deploy/Dockerfile", line.split()[1]))
    return found


def test_deploy_images_are_pinned() -> None:
    references = _image_references()
    assert any(where == "deploy/Dockerfile" for where, _ in references)
    for where, image in references:
        name, _, tag = image.rpartition(":")
        assert name and "/" not in tag, f"{where}: image {image} has no tag; pin a release"
        assert tag != "latest", f"{where}: image {image} is not pinned"
        if name.split("/")[-1] in {"dask", "dask-notebook"} and name.split("/")[-2] in {"dask", "daskdev"}:
            match = re.fullmatch(r"(\d{4}\.\d+\.\d+)-py3\.(\d+)", tag)
            assert match, f"{where}: pin the Dask image to '<release>-py3.X', got {image}"
            assert int(match.group(2)) >= 12, f"{where}: {image} is older than Python 3.12 (current zarr needs it)"


def test_deploy_dockerfile_installs_streamrff_from_context() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "COPY . /src" in text
    assert re.search(r"pip install[^\n]*/src", text)
    # dask and distributed stay at the base image's release (same versions on every role).
    assert '"distributed==${DASK_VERSION}"' in text


# -- scripts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["hpc/slurm_cluster.py", "tls/client_example.py"])
def test_deploy_python_examples_compile(script: str, tmp_path: Path) -> None:
    py_compile.compile(str(DEPLOY / script), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


def test_deploy_slurm_example_explains_missing_dask_jobqueue() -> None:
    pytest.importorskip("distributed")
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dask-jobqueue is installed; the missing-package message cannot be shown")
    completed = subprocess.run(
        [sys.executable, str(DEPLOY / "hpc" / "slurm_cluster.py"), "data.zarr", "-o", "data.sketch"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    assert "pip install dask-jobqueue" in completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("script", sorted(str(path.relative_to(DEPLOY)) for path in DEPLOY.rglob("*.sh")))
def test_deploy_shell_scripts_pass_bash_n(script: str) -> None:
    completed = subprocess.run(["bash", "-n", str(DEPLOY / script)], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_deploy_make_certs_issues_a_working_mutual_tls_set(tmp_path: Path) -> None:
    from cryptography import x509

    out = tmp_path / "certs"
    completed = subprocess.run(
        ["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(out), "scheduler.example.com", "10.0.0.5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    for role in ("scheduler", "worker", "client"):
        cert = x509.load_pem_x509_certificate((out / f"{role}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        assert (out / f"{role}-key.pem").stat().st_mode & 0o077 == 0, f"{role}-key.pem is readable by others"
        # The certificate and key belong together, as dask's ssl contexts will load them.
        context = ssl.create_default_context(cafile=str(out / "ca.pem"))
        context.load_cert_chain(out / f"{role}.pem", out / f"{role}-key.pem")
    scheduler = x509.load_pem_x509_certificate((out / "scheduler.pem").read_bytes())
    names = scheduler.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "scheduler.example.com" in names.get_values_for_type(x509.DNSName)
    assert {str(address) for address in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.0.0.5"}


def _watch_metrics() -> set[str]:
    """The metric names ``watch --metrics-port`` serves (read from its collector's source: every ``gauge(...)``
    and counter name, with the prefix)."""
    text = (REPO / "streamrff" / "cli" / "status.py").read_text()
    names = set(re.findall(r'gauge\("(\w+)"', text)) | {"info"}
    names |= {f"{name}_total" for name in re.findall(r'\(\("(\w+)", "chunks', text) + ["invalid_rows"]}
    return {f"streamrff_watch_{name}" for name in names}


def test_deploy_systemd_unit_is_one_watch_command_with_a_state_directory() -> None:
    unit = (DEPLOY / "systemd" / "streamrff-watch.service").read_text()
    assert "ExecStartPre" not in unit and "fit_once" not in unit  # one command line: no fit script
    lines = _joined_lines(DEPLOY / "systemd" / "streamrff-watch.service")
    (start,) = [line.removeprefix("ExecStart=") for line in lines if line.startswith("ExecStart=")]
    argv = shlex.split(start)
    assert argv[0].endswith("/venv/bin/streamrff") and argv[1] == "watch"  # the venv the README installs into
    namespace = build_parser().parse_args(argv[1:])
    state = re.search(r"^StateDirectory=(\S+)$", unit, re.MULTILINE).group(1)
    assert namespace.state == f"/var/lib/{state}" and namespace.follow and namespace.metrics_port
    assert namespace.save_monitor is None and not namespace.overwrite and not namespace.refit


def test_deploy_kubernetes_watch_is_one_container_with_probes_and_a_service_monitor() -> None:
    resources = {document["kind"]: document for document in _documents(DEPLOY / "kubernetes" / "watch.yaml")}
    assert {"PersistentVolumeClaim", "Deployment", "Service", "ServiceMonitor"} <= set(resources)
    deployment = resources["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert "initContainers" not in spec and deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    (container,) = spec["containers"]
    assert container["args"][:2] == ["streamrff", "watch"]
    namespace = build_parser().parse_args(container["args"][1:])
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert namespace.state in mounts and namespace.metrics_host == "0.0.0.0"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == namespace.metrics_port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    monitor = resources["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"] == resources["Service"]["metadata"]["labels"]
    assert [endpoint["port"] for endpoint in monitor["spec"]["endpoints"]] == ["metrics"]


def test_deploy_alert_rules_use_metrics_that_watch_serves() -> None:
    (rules,) = _documents(DEPLOY / "prometheus" / "streamrff-watch-rules.yaml")
    served = _watch_metrics()
    alerts = {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    assert {"StreamrffDrift", "StreamrffWatchLagging", "StreamrffWatchStaleSave"} <= set(alerts)
    for name, expr in alerts.items():
        for metric in re.findall(r"streamrff_watch_\w+", expr):
            assert metric in served, f"{name}: {metric} is not a metric of watch --metrics-port"
