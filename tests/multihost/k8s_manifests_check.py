#!/usr/bin/python3
"""Offline check of deploy/kubernetes/ and deploy/kserve/ (no cluster, no kubectl): every manifest
parses, carries the fields Kubernetes (or KServe) requires, and agrees with the others and with the
farm config it mounts (deploy/kubernetes) or that the KServe entrypoint writes (deploy/kserve).

Usage: k8s_manifests_check.py REPO_ROOT. Exit 0: ok; 1: a problem (each printed); 77: skipped
(python3-yaml missing). Needs only Debian's python3-yaml (and /bin/sh to run the entrypoint).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:
    print("skipped: python3-yaml is not installed (apt-get install python3-yaml)")
    sys.exit(77)

problems: list[str] = []


def check(condition: bool, message: str) -> bool:
    if not condition:
        problems.append(message)
    return condition


def load_all(directory: Path) -> list:
    """Every document of every *.yaml in `directory`, as (file name, document)."""
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            where = f"{path.name}: {doc.get('kind')}"
            check(isinstance(doc.get("apiVersion"), str), f"{where}: no apiVersion")
            check(isinstance(doc.get("kind"), str), f"{path.name}: no kind")
            check(bool(doc.get("metadata", {}).get("name")), f"{where}: no metadata.name")
            docs.append((path.name, doc))
    return docs


def load(directory: Path) -> dict:
    docs = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            where = f"{path.name}: {doc.get('kind')}"
            check(isinstance(doc.get("apiVersion"), str), f"{where}: no apiVersion")
            check(isinstance(doc.get("kind"), str), f"{path.name}: no kind")
            if doc.get("kind") != "Kustomization":
                check(bool(doc.get("metadata", {}).get("name")), f"{where}: no metadata.name")
            docs[(doc["kind"], path.name)] = doc
    return docs


def accepted_config_keys(repo: Path) -> set:
    """The top-level keys the supervisor's config parser accepts (common/config.cc)."""
    source = (repo / "common" / "config.cc").read_text()
    match = re.search(r'CheckKeys\(\s*j,\s*"config",\s*\{([^}]*)\}', source)
    return set(re.findall(r'"([a-z_]+)"', match.group(1))) if match else set()


def check_config(repo: Path, config_map: dict) -> dict:
    text = config_map.get("data", {}).get("torchfarm.json", "")
    try:
        config = json.loads(text)
    except ValueError as e:
        check(False, f"ConfigMap torchfarm.json is not JSON: {e}")
        return {}
    unknown = set(config) - accepted_config_keys(repo)
    check(not unknown, f"ConfigMap torchfarm.json: keys the supervisor rejects: {sorted(unknown)}")
    check(config.get("endpoint", "").startswith("tcp://0.0.0.0:"),
          "config endpoint should bind every pod address (tcp://0.0.0.0:PORT)")
    for key in ("http_endpoint", "grpc_endpoint"):
        check(config.get(key, "").startswith("0.0.0.0:"),
              f"config {key} should bind every pod address (0.0.0.0:PORT)")
    check(config.get("insecure") is True or "tls" in config.get("frontend", {}),
          "config: front ends on the pod address need \"insecure\": true or \"frontend.tls\"")
    for model in config.get("models", []):
        check(model.get("path", "").startswith("/models/"), f"model {model.get('name')}: path "
              "should be under the /models volume")
    return config


def endpoint_port(config: dict, key: str) -> int | None:
    """The port of a front end's "HOST:PORT" in the farm config, or None when it is off."""
    value = config.get(key, "")
    return int(value.rsplit(":", 1)[1]) if ":" in value else None


def container_port(container: dict, port) -> int | None:
    """A probe's port (a number or a containerPort name) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p.get("containerPort")
    return None


PROBE_PATHS = {"readinessProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live"}


def check_http_probes(name: str, container: dict, config: dict) -> None:
    """Readiness and liveness GET the v2 health endpoints on the port the farm's HTTP front end
    binds (a port of this container)."""
    http_port = endpoint_port(config, "http_endpoint")
    for probe, path in PROBE_PATHS.items():
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path, f"{name}: {probe} must be httpGet {path}")
        port = container_port(container, get.get("port"))
        check(port is not None and port == http_port,
              f"{name}: {probe} port {get.get('port')!r} must be a containerPort equal to the "
              f"config's http_endpoint port {http_port}")


def check_pod(name: str, pod: dict, labels: dict, config: dict, config_map: str) -> None:
    containers = pod.get("containers", [])
    if not check(len(containers) == 1, f"{name}: expected one container"):
        return
    c = containers[0]
    port = int(config.get("endpoint", "tcp://x:0").rsplit(":", 1)[1])
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    check(ports.get("jobs") == port, f"{name}: containerPort 'jobs' must be {port} (config)")
    for kind in ("limits", "requests"):
        check(str(c.get("resources", {}).get(kind, {}).get("nvidia.com/gpu")) == "1",
              f"{name}: resources.{kind} must ask for nvidia.com/gpu")
    for kind in ("cpu", "memory"):
        check(kind in c.get("resources", {}).get("limits", {}), f"{name}: no {kind} limit")
    check(ports.get("http") == endpoint_port(config, "http_endpoint"),
          f"{name}: containerPort 'http' must be the config's http_endpoint port")
    check(ports.get("grpc") == endpoint_port(config, "grpc_endpoint"),
          f"{name}: containerPort 'grpc' must be the config's grpc_endpoint port")
    check_http_probes(name, c, config)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    shm = volumes.get(mounts.get("/dev/shm", ""), {}).get("emptyDir", {})
    check(shm.get("medium") == "Memory" and "sizeLimit" in shm,
          f"{name}: /dev/shm must be an emptyDir of medium Memory with a sizeLimit")
    config_volume = volumes.get(mounts.get("/etc/torchfarm", ""), {})
    check(config_volume.get("configMap", {}).get("name") == config_map,
          f"{name}: /etc/torchfarm must mount ConfigMap {config_map}")
    check(config.get("run_dir") in mounts, f"{name}: run_dir {config.get('run_dir')} not mounted")
    check("/models" in mounts, f"{name}: no /models mount")
    check(c.get("command", [])[-2:] == ["--config", "/etc/torchfarm/torchfarm.json"],
          f"{name}: command must pass --config /etc/torchfarm/torchfarm.json")
    grace = pod.get("terminationGracePeriodSeconds", 30) * 1000
    check(grace > config.get("drain_timeout_ms", 30000),
          f"{name}: terminationGracePeriodSeconds must exceed the config's drain_timeout_ms")


def check_network_policy(policy: dict | None, config: dict) -> None:
    if not check(policy is not None, "no NetworkPolicy manifest"):
        return
    allowed = {p.get("port") for rule in policy["spec"].get("ingress", [])
               for p in rule.get("ports", [])}
    wanted = {int(config.get("endpoint", "tcp://x:0").rsplit(":", 1)[1]),
              endpoint_port(config, "http_endpoint"), endpoint_port(config, "grpc_endpoint")}
    check(wanted <= allowed, f"NetworkPolicy must allow the farm's ports {sorted(wanted - {None})}, "
          f"allows {sorted(allowed)}")


# --- deploy/kserve ---------------------------------------------------------------------------

KSERVE_ENTRYPOINT = "torchfarm-kserve-entrypoint"
KSERVE_MODEL_DIR = "/mnt/models"  # where KServe's storage initializer puts the model
KSERVE_PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}


def entrypoint_config(repo: Path, args: list, where: str) -> dict:
    """Runs deploy/kserve's entrypoint with `args` (as KServe would, {{.Name}} filled in) against a
    fake model folder and returns the farm config it writes; {} after a problem."""
    script = repo / "deploy" / "kserve" / f"{KSERVE_ENTRYPOINT}.sh"
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / "model.pt").write_bytes(b"")
        (models / "config.json").write_text(
            '{"inputs": [{"name": "INPUT__0", "dtype": "float32", "shape": [-1, 4]}]}')
        filled = [a.replace("{{.Name}}", "example")
                  .replace(f"--model_dir={KSERVE_MODEL_DIR}", f"--model_dir={models}")
                  for a in args]
        run = subprocess.run(["/bin/sh", str(script), *filled, "--print_config"],
                             capture_output=True, text=True, timeout=20,
                             env={"PATH": "/usr/bin:/bin", "TORCHFARM_DEV_DIR": tmp})
    if not check(run.returncode == 0, f"{where}: the entrypoint refused its args {args}: "
                 f"{run.stderr.strip()}"):
        return {}
    try:
        return json.loads(run.stdout)
    except ValueError as e:
        check(False, f"{where}: the entrypoint wrote a config that is not JSON: {e}")
        return {}


def check_runtime(repo: Path, runtime: dict) -> None:
    name = f"ClusterServingRuntime {runtime['metadata']['name']}"
    spec = runtime.get("spec", {})
    check(runtime.get("apiVersion") == "serving.kserve.io/v1alpha1",
          f"{name}: apiVersion must be serving.kserve.io/v1alpha1")
    formats = spec.get("supportedModelFormats", [])
    for f in formats:
        check(isinstance(f.get("name"), str) and isinstance(f.get("version"), str),
              f"{name}: supportedModelFormats entries need a name and a version string")
    auto = {f.get("name") for f in formats if f.get("autoSelect") is True}
    check({"pytorch", "torchscript"} <= auto,
          f"{name}: supportedModelFormats must auto-select pytorch and torchscript")
    protocols = set(spec.get("protocolVersions", []))
    check(bool(protocols) and protocols <= KSERVE_PROTOCOLS and not protocols & {"v1", "grpc-v1"},
          f"{name}: protocolVersions must name v2 and/or grpc-v2, got {sorted(protocols)}")
    containers = spec.get("containers", [])
    if not check(len(containers) == 1, f"{name}: expected one container"):
        return
    c = containers[0]
    check(c.get("name") == "kserve-container", f"{name}: the container must be kserve-container")
    check(bool(c.get("image")), f"{name}: no image")
    check(c.get("command") == [KSERVE_ENTRYPOINT], f"{name}: command must be [{KSERVE_ENTRYPOINT}]")
    args = c.get("args", [])
    check("--model_name={{.Name}}" in args and f"--model_dir={KSERVE_MODEL_DIR}" in args,
          f"{name}: args must pass --model_name={{{{.Name}}}} and --model_dir={KSERVE_MODEL_DIR}")
    config = entrypoint_config(repo, args, name)
    if not config:
        return
    unknown = set(config) - accepted_config_keys(repo)
    check(not unknown, f"{name}: the entrypoint's config has keys the supervisor rejects: "
          f"{sorted(unknown)}")
    check(config.get("insecure") is True, f"{name}: the entrypoint's config must set insecure")
    check(config.get("endpoint", "").startswith("tcp://127.0.0.1:"),
          f"{name}: the job socket must stay on loopback")
    # Knative allows one container port: the one KServe routes the runtime's protocol to.
    ports = c.get("ports", [])
    if not check(len(ports) == 1, f"{name}: declare exactly one port (Knative allows one)"):
        return
    port = ports[0]
    if "v2" in protocols:
        check(port.get("containerPort") == endpoint_port(config, "http_endpoint")
              and port.get("name") == "http1",
              f"{name}: its port must be http1 on the entrypoint's http_endpoint port")
        check_http_probes(name, c, config)
    if "grpc-v2" in protocols:
        check(port.get("containerPort") == endpoint_port(config, "grpc_endpoint")
              and port.get("name") == "h2c",
              f"{name}: its port must be h2c on the entrypoint's grpc_endpoint port")
    if "v2" not in protocols:
        admin = config.get("admin_endpoint", f"ipc://{config.get('run_dir')}/admin.sock")
        for probe in PROBE_PATHS:
            command = " ".join(c.get(probe, {}).get("exec", {}).get("command", []))
            check(re.search(r"torchfarm ctl --admin " + re.escape(admin) + r"\b.*health", command)
                  is not None, f"{name}: {probe} must exec `torchfarm ctl --admin {admin} ... health`")
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts", [])}
    shm = volumes.get(mounts.get("/dev/shm", ""), {}).get("emptyDir", {})
    check(shm.get("medium") == "Memory" and "sizeLimit" in shm,
          f"{name}: /dev/shm must be an emptyDir of medium Memory with a sizeLimit")


def check_inference_service(repo: Path, isvc: dict, runtimes: dict) -> None:
    name = f"InferenceService {isvc['metadata']['name']}"
    check(isvc.get("apiVersion") == "serving.kserve.io/v1beta1",
          f"{name}: apiVersion must be serving.kserve.io/v1beta1")
    model = isvc.get("spec", {}).get("predictor", {}).get("model", {})
    runtime = runtimes.get(model.get("runtime"))
    if not check(runtime is not None, f"{name}: runtime {model.get('runtime')!r} is not defined "
                 f"in deploy/kserve (have {sorted(runtimes)})"):
        return
    spec = runtime["spec"]
    formats = {f.get("name") for f in spec.get("supportedModelFormats", [])}
    check(model.get("modelFormat", {}).get("name") in formats,
          f"{name}: modelFormat must be one of its runtime's {sorted(formats)}")
    check(model.get("protocolVersion") in spec.get("protocolVersions", []),
          f"{name}: protocolVersion must be one its runtime serves ({spec.get('protocolVersions')}); "
          "KServe's default v1 is not")
    check(bool(model.get("storageUri")), f"{name}: no storageUri")
    if model.get("args"):  # appended to the runtime's args by KServe
        entrypoint_config(repo, spec["containers"][0].get("args", []) + model["args"], name)


def check_kserve(repo: Path) -> None:
    directory = repo / "deploy" / "kserve"
    script = directory / f"{KSERVE_ENTRYPOINT}.sh"
    check(script.exists() and script.stat().st_mode & 0o111 != 0,
          f"deploy/kserve/{script.name} missing or not executable")
    check((directory / "README.md").exists(), "deploy/kserve/README.md missing")
    docs = [doc for _, doc in load_all(directory)]
    runtimes = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ClusterServingRuntime"}
    services = [d for d in docs if d.get("kind") == "InferenceService"]
    check("torchfarm" in runtimes, "deploy/kserve: no ClusterServingRuntime torchfarm")
    check(any("v2" in r["spec"].get("protocolVersions", []) for r in runtimes.values()),
          "deploy/kserve: no runtime serves protocolVersion v2")
    check(bool(services), "deploy/kserve: no InferenceService example")
    for runtime in runtimes.values():
        check_runtime(repo, runtime)
    for isvc in services:
        check_inference_service(repo, isvc, runtimes)


def main(repo: Path) -> int:
    directory = repo / "deploy" / "kubernetes"
    docs = load(directory)
    by_kind = {kind: doc for (kind, _), doc in docs.items()}
    for kind in ("ConfigMap", "Service", "Deployment", "DaemonSet", "Kustomization"):
        check(kind in by_kind, f"no {kind} manifest")
    if problems:
        return report()
    config_map = by_kind["ConfigMap"]
    config = check_config(repo, config_map)
    service = by_kind["Service"]
    check(service["spec"].get("clusterIP") == "None", "Service must be headless (clusterIP: None)")
    for kind in ("Deployment", "DaemonSet"):
        workload = by_kind[kind]
        template = workload["spec"]["template"]
        labels = template["metadata"]["labels"]
        selector = workload["spec"]["selector"]["matchLabels"]
        check(selector.items() <= labels.items(), f"{kind}: selector does not match the pod labels")
        check(service["spec"]["selector"].items() <= labels.items(),
              f"Service selector does not select the {kind}'s pods")
        check_pod(kind, template["spec"], labels, config, config_map["metadata"]["name"])
    targets = {p.get("name"): p.get("targetPort") for p in service["spec"].get("ports", [])}
    for port_name in ("jobs", "http", "grpc"):
        check(targets.get(port_name) == port_name,
              f"Service must expose port '{port_name}' with targetPort '{port_name}'")
    check_network_policy(by_kind.get("NetworkPolicy"), config)
    deployment_pod = dict(by_kind["Deployment"]["spec"]["template"]["spec"])
    daemon_pod = dict(by_kind["DaemonSet"]["spec"]["template"]["spec"])
    daemon_pod.pop("nodeSelector", None)
    daemon_pod.pop("tolerations", None)
    check(deployment_pod == daemon_pod, "DaemonSet pod spec drifted from the Deployment's")
    for resource in by_kind["Kustomization"].get("resources", []):
        check((directory / resource).exists(), f"kustomization lists missing {resource}")
    check((directory / "README.md").exists(), "deploy/kubernetes/README.md missing")
    check_kserve(repo)
    return report()


def report() -> int:
    for p in problems:
        print(f"problem: {p}")
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])))
