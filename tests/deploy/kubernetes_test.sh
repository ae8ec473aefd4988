#!/usr/bin/env bash
# deploy/kubernetes renders and is valid: the base and every overlay through
# `kubectl kustomize`, every object checked against the Kubernetes schemas
# (the npm kubernetes-models package, tools/k8s-validate), the daemon's and the
# engines' hostPath mounts equal in each, and the DaemonSet's command line with
# its ConfigMap's seedd.toml accepted by `seedd --check-config`. The validator
# itself must refuse a broken object.
# Usage: tests/deploy/kubernetes_test.sh BIN_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
validate="$root/tools/k8s-validate/validate.js"
[ -d "$root/tools/k8s-validate/node_modules/kubernetes-models" ] \
  || { echo "kubernetes test: tools/k8s-validate is not installed (scripts/setup.sh test)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
chmod 600 "$work/token"
count=0
for dir in "$root/deploy/kubernetes/base" "$root"/deploy/kubernetes/overlays/*/; do
  name="$(basename "$dir")"
  kubectl kustomize "$dir" > "$work/$name.yaml" 2> "$work/$name.err" \
    || { echo "kubectl kustomize $dir failed:" >&2; cat "$work/$name.err" >&2; exit 1; }
  node "$validate" "$work/$name.yaml" > "$work/$name.valid" \
    || { cat "$work/$name.valid" >&2; exit 1; }
  # The mounts agree; the daemon's flags and configuration pass --check-config.
  /usr/bin/python3 - "$work/$name.yaml" "$work" "$name" > "$work/$name.args" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
work, name = sys.argv[2], sys.argv[3]
paths = {}
for d in docs:
    if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet"):
        for v in d["spec"]["template"]["spec"].get("volumes", []):
            if "hostPath" in v:
                paths["%s %s" % (d["kind"], d["metadata"]["name"])] = v["hostPath"]["path"]
assert any(k.startswith("DaemonSet") for k in paths), paths
assert len(set(paths.values())) == 1, "the hostPath mounts disagree: %s" % paths
assert all(p.startswith("/") for p in paths.values()), paths
ds = next(d for d in docs if d["kind"] == "DaemonSet")
c = ds["spec"]["template"]["spec"]["containers"][0]
config_map = next(v["configMap"]["name"] for v in ds["spec"]["template"]["spec"]["volumes"]
                  if "configMap" in v)
toml = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map)
with open("%s/%s.toml" % (work, name), "w") as f:
    f.write(toml["data"]["seedd.toml"])
args = [a.replace("$(POD_IP)", "10.0.0.7") for a in c["args"]]
args = ["%s/%s.toml" % (work, name) if a == "/etc/seedd/seedd.toml" else a for a in args]
print("\n".join(args))
PY
  mapfile -t args < "$work/$name.args"
  # The paths inside the pod replaced by local ones (the token, the cache).
  "$bin/seedd" --check-config "${args[@]}" --token-file "$work/token" \
    --cache-dir "$work/cache-$name" > "$work/$name.check" 2>&1 \
    || { echo "$name: seedd --check-config refused the DaemonSet's flags:" >&2; cat "$work/$name.check" >&2; exit 1; }
  count=$((count + $(grep -c '^ok ' "$work/$name.valid")))
  echo "kubernetes test: $name: $(grep -c '^ok ' "$work/$name.valid") objects valid, mounts agree, flags accepted"
done
# The validator can fail: a DaemonSet whose container port is not a number.
sed 's/containerPort: 7420/containerPort: seven/' "$work/base.yaml" > "$work/broken.yaml"
if node "$validate" "$work/broken.yaml" > "$work/broken.out"; then
  echo "the validator accepted a broken DaemonSet" >&2
  exit 1
fi
grep -q "FAIL DaemonSet seedd" "$work/broken.out"
echo "kubernetes test: $count objects in all; a broken DaemonSet refused"
