"""Validates one rendered kustomization (see deploy/kubernetes/check): argv = rendered YAML, the
ServiceMonitor schema, a scratch path prefix. Exit status 1 on any failure or warning."""
import json
import subprocess
import sys

import jsonschema
import yaml

rendered, monitor_schema, scratch = sys.argv[1:4]
documents = [d for d in yaml.safe_load_all(open(rendered)) if d]
failures = []


def restricted(kind, name, pod):
    """The restricted Pod Security Standard's rules for one pod spec."""
    problems = []
    security = pod.get("securityContext", {})
    if security.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
        problems.append("pod seccompProfile is not RuntimeDefault")
    for container in pod.get("initContainers", []) + pod.get("containers", []):
        own = container.get("securityContext", {})
        where = f"container {container['name']}"
        if not (own.get("runAsNonRoot", security.get("runAsNonRoot")) is True):
            problems.append(f"{where}: runAsNonRoot is not true")
        if own.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        if own.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{where}: capabilities do not drop ALL")
        if own.get("privileged"):
            problems.append(f"{where}: privileged")
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            problems.append(f"volume {volume['name']} is a hostPath")
    return [f"{kind}/{name}: {p}" for p in problems]


ordinary = []
for document in documents:
    kind, name = document["kind"], document["metadata"]["name"]
    if document["apiVersion"] == "monitoring.coreos.com/v1":
        schema = json.load(open(monitor_schema))
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))
        failures += [f"{kind}/{name}: {e.json_path}: {e.message}" for e in errors]
        print(f"  {kind}/{name}: {'fails' if errors else 'passes'} schemas/servicemonitor-v1.json")
        continue
    ordinary.append(document)
    template = document.get("spec", {}).get("template", {}).get("spec")
    if template:
        failures += restricted(kind, name, template)

path = scratch + ".core.yaml"
with open(path, "w") as out:
    yaml.safe_dump_all(ordinary, out)
run = subprocess.run(
    [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.37.0", path],
    capture_output=True,
    text=True,
)
output = (run.stdout + run.stderr).strip()
for line in output.splitlines():
    print("  " + line)
    if not line.startswith("INFO"):
        failures.append(line)
if run.returncode != 0:
    failures.append(f"kubernetes-validate exited with {run.returncode}")

for failure in failures:
    print("FAIL " + failure, file=sys.stderr)
sys.exit(1 if failures else 0)
