#!/bin/sh
# Before `kubectl apply -k deploy/kubernetes`: fails, naming each one, when a required value is
# still missing (docs/kubernetes.md: Install on Kubernetes, "Before you start").
#
#   deploy/kubernetes/check.sh            the manifests, then the Secret in kubectl's namespace
#   deploy/kubernetes/check.sh --offline  the manifests only (no cluster needed)
#
# The manifests: the image is a registry's (kustomization.yaml's newName), AUTHSERVER_ISSUER is
# not the example https://auth.example.com, AUTHSERVER_TRUSTED_PROXIES is not the placeholder.
# The Secret `tokengate` has every key the manifests read. The NetworkPolicy's Prometheus
# namespace (`monitoring`) is only mentioned: it may be yours.
# Exit status: 0 ready, 1 something to set (each said on a line of its own), 2 bad usage.
set -u

dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
offline=false
case "${1:-}" in
  --offline) offline=true ;;
  "") ;;
  *) echo "usage: $0 [--offline]" >&2; exit 2 ;;
esac

missing=0
say_missing() {
  echo "missing: $*" >&2
  missing=$((missing + 1))
}

# What `kubectl apply -k` would apply (kubectl renders the kustomization itself, no cluster
# needed); without kubectl, the files as they are.
if command -v kubectl >/dev/null 2>&1; then
  if ! rendered=$(kubectl kustomize "$dir"); then
    echo "kubectl kustomize $dir failed (above): fix the manifests first" >&2
    exit 1
  fi
else
  rendered=$(cat "$dir/authserver.yaml" "$dir/sidecar.yaml")
fi
has() { printf '%s\n' "$rendered" | grep -qE "$1"; }

if has 'image: "?tokengate(:latest)?"?$'; then
  say_missing "the image: set images[0].newName and newTag in $dir/kustomization.yaml to the image you pushed (step 2)"
fi
if has 'value: "?https://auth\.example\.com"?'; then
  say_missing "AUTHSERVER_ISSUER in $dir/authserver.yaml: your authorization server's public https:// address (the ingress's)"
fi
if has 'REPLACE-WITH-INGRESS-CONTROLLER-CIDR'; then
  say_missing "AUTHSERVER_TRUSTED_PROXIES in $dir/authserver.yaml: the network your ingress controller's pods are in (a CIDR)"
fi
if has 'kubernetes.io/metadata.name: monitoring'; then
  echo "note: the NetworkPolicy in $dir/sidecar.yaml admits the admin port from the namespace monitoring: keep it if Prometheus runs there" >&2
fi

if ! $offline; then
  # The keys the manifests read from the Secret tokengate (secretKeyRef and the mounted files).
  keys=$(sed -n 's/.*key: \([a-z-]*\).*/\1/p' "$dir/authserver.yaml" "$dir/sidecar.yaml" | sort -u)
  if ! command -v kubectl >/dev/null 2>&1; then
    say_missing "kubectl, to check the Secret tokengate (or run $0 --offline to check the manifests only)"
  elif ! have=$(kubectl get secret tokengate -o go-template='{{range $k, $v := .data}}{{$k}}{{"\n"}}{{end}}' 2>/dev/null); then
    say_missing "the Secret tokengate in kubectl's current namespace (step 3: kubectl create secret generic tokengate ...)"
  else
    for key in $keys; do
      if ! printf '%s\n' "$have" | grep -qx "$key"; then
        say_missing "the key $key of the Secret tokengate (step 3)"
      fi
    done
  fi
fi

if [ "$missing" -gt 0 ]; then
  echo "$missing value(s) to set before kubectl apply -k $dir" >&2
  exit 1
fi
echo "ready: kubectl apply -k $dir"
