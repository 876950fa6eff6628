#!/usr/bin/env bash
# deploy/k8s/dsvisor-daemonset.yaml without a cluster: it parses (python3-yaml); the pod
# is in the Guaranteed QoS class with an integer CPU count (static CPU manager) and
# hugepages-2Mi requests == limits; probes, ports and the dsvisor config agree with
# each other and with `dsvisor start`'s options; the README documents the kubelet
# settings and privileges. The QoS check is also run on broken copies, which must fail.
set -euo pipefail
src="${DSV_SOURCE_DIR:?}"
py=/usr/bin/python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
        echo "SKIP: no python3-yaml"
        exit 77
fi
exec "$py" - "$src" <<'PY'
import copy, json, re, sys, yaml

src = sys.argv[1]
failed = 0
def check(what, ok):
    global failed
    print(("ok     " if ok else "NOT OK ") + what)
    failed |= not ok

docs = [d for d in yaml.safe_load_all(open(f"{src}/deploy/k8s/dsvisor-daemonset.yaml")) if d]
kinds = {d["kind"]: d for d in docs}
check("kinds Namespace, ConfigMap, DaemonSet, Service", sorted(kinds) == ["ConfigMap", "DaemonSet", "Namespace", "Service"])
ds, cm, svc = kinds["DaemonSet"], kinds["ConfigMap"], kinds["Service"]

def qos(pod_spec):
    """The pod's QoS class, by Kubernetes' rules (pkg/apis/core/helper/qos): Guaranteed
    when every container sets cpu and memory limits and requests equal to them."""
    ctrs = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    any_set, all_guaranteed = False, True
    for c in ctrs:
        r = c.get("resources", {})
        req, lim = r.get("requests", {}), r.get("limits", {})
        any_set |= bool(req or lim)
        for res in ("cpu", "memory"):
            if res not in lim or str(req.get(res, lim[res])) != str(lim[res]):
                all_guaranteed = False
    return "Guaranteed" if all_guaranteed else "Burstable" if any_set else "BestEffort"

def exclusive_cpus(pod_spec):
    """The static CPU manager gives exclusive CPUs to Guaranteed containers whose CPU
    request is an integer."""
    return qos(pod_spec) == "Guaranteed" and all(
        re.fullmatch(r"[1-9][0-9]*", str(c["resources"]["limits"]["cpu"])) for c in pod_spec["containers"])

def hugepages_ok(pod_spec):
    for c in pod_spec["containers"]:
        r = c.get("resources", {})
        req, lim = r.get("requests", {}).get("hugepages-2Mi"), r.get("limits", {}).get("hugepages-2Mi")
        if not lim or req != lim or not re.fullmatch(r"[1-9][0-9]*(Mi|Gi)", str(lim)):
            return False
        if lim.endswith("Mi") and int(lim[:-2]) % 2:
            return False
    return True

spec = ds["spec"]["template"]["spec"]
check("pod QoS class is Guaranteed", qos(spec) == "Guaranteed")
check("integer CPU count: exclusive CPUs under the static CPU manager", exclusive_cpus(spec))
check("hugepages-2Mi requests == limits, whole 2 MiB pages", hugepages_ok(spec))

broken = copy.deepcopy(spec)
broken["containers"][0]["resources"]["requests"]["cpu"] = "15"
check("broken copy (cpu request != limit) is not Guaranteed", qos(broken) == "Burstable")
broken = copy.deepcopy(spec)
broken["containers"][0]["resources"]["requests"]["cpu"] = "15500m"
broken["containers"][0]["resources"]["limits"]["cpu"] = "15500m"
check("broken copy (15.5 CPUs) gets no exclusive CPUs", qos(broken) == "Guaranteed" and not exclusive_cpus(broken))
broken = copy.deepcopy(spec)
del broken["containers"][0]["resources"]["limits"]["hugepages-2Mi"]
check("broken copy (no hugepages-2Mi limit) fails the HugePages check", not hugepages_ok(broken))

c = spec["containers"][0]
config = json.loads(cm["data"]["dsvisor.json"])
options = set(re.findall(r'^\s*\{"([a-z-]+)", K_', open(f"{src}/supervisor/config.c").read(), re.M))
check("config keys are dsvisor start options", bool(options) and set(config) <= options)
check("config: one instance per pod, hugepages require, listens on 0.0.0.0",
      config.get("instances") == 1 and config.get("hugepages") == "require" and config.get("host") == "0.0.0.0")
keys = config.get("api-key-file", "")
secret_vols = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
key_mount = [m for m in c["volumeMounts"] if m["name"] in secret_vols and keys.startswith(m["mountPath"].rstrip("/") + "/")]
check("API keys from a Secret volume (0.0.0.0 needs a key), mounted without access for others",
      bool(key_mount) and (secret_vols[key_mount[0]["name"]].get("defaultMode", 0o644) & 0o077) == 0
      and "api-key" not in config and not config.get("allow-unauthenticated"))
check("the probes' /health stays open: no protect-metrics", not config.get("protect-metrics"))
port = {p["name"]: p["containerPort"] for p in c["ports"]}
check("containerPort 'http' is the configured port", port.get("http") == config.get("port"))
check("command runs dsvisor start with the mounted config",
      c["command"][:2] == ["dsvisor", "start"] and any(
          m["name"] == "config" and c["command"][-1].startswith(m["mountPath"] + "/") for m in c["volumeMounts"]))
check("readinessProbe GET /ready, livenessProbe and startupProbe GET /health",
      c["readinessProbe"]["httpGet"]["path"] == "/ready" and c["livenessProbe"]["httpGet"]["path"] == "/health"
      and c["startupProbe"]["httpGet"]["path"] == "/health")
check("startupProbe allows >= 10 min for the weight image",
      c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 600)
check("terminationGracePeriodSeconds covers grace-ms",
      spec["terminationGracePeriodSeconds"] * 1000 > config.get("grace-ms", 10000))
rt = config.get("runtime-dir", "")
check("runtime-dir is below a mount, not a mount point (dsvisor wants a 0700 dir it made)",
      any(rt.startswith(m["mountPath"].rstrip("/") + "/") for m in c["volumeMounts"])
      and not any(rt == m["mountPath"] for m in c["volumeMounts"]))
caps = c["securityContext"]["capabilities"]
check("unprivileged: drops ALL, adds only IPC_LOCK, no privileged",
      caps["drop"] == ["ALL"] and caps.get("add") == ["IPC_LOCK"] and not c["securityContext"].get("privileged"))
sel = ds["spec"]["selector"]["matchLabels"]
check("selector matches the pod labels and the Service selector",
      all(ds["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items()) and svc["spec"]["selector"] == sel)
check("Service targets the http port", svc["spec"]["ports"][0]["targetPort"] == "http")
check("one namespace for all", len({d["metadata"].get("namespace", d["metadata"]["name"]) for d in docs}) == 1)

readme = open(f"{src}/deploy/k8s/README.md").read()
for note in ["cpuManagerPolicy: static", "topologyManagerPolicy: single-numa-node", "memoryManagerPolicy: Static",
             "Guaranteed", "hugepages-2Mi", "privileged: true", "CAP_SYS_NICE", "IPC_LOCK", "rejects"]:
    check(f"README documents '{note}'", note in readme)
sys.exit(1 if failed else 0)
PY
