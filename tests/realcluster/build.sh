#!/usr/bin/env bash
# Builds the real control plane used by the real-cluster test tier from pinned Go modules:
# kube-apiserver, kube-controller-manager and kube-scheduler per Kubernetes release, etcd, kwok,
# and the JobSet CRD manifests. Each piece lands in the cache, keyed by its version, and is
# built only when missing, so a second run takes seconds.
#
#   tests/realcluster/build.sh [--jobset-manager] [--kueue-manager] [K8S_VERSION ...]
#                                           (default: every release in versions.env)
#
# --jobset-manager also builds upstream's JobSet controller manager (sigs.k8s.io/jobset's
# main.go) for the benchmark that runs it beside kbatchd; the test tiers never start it, so
# `make control-plane` does not pay for its first build (about 2 minutes on 2 cores, its
# dependencies downloaded). --kueue-manager likewise builds Kueue's manager (sigs.k8s.io/kueue's
# cmd/kueue, the pinned KUEUE_VERSION) with its CRDs and webhook configurations, for the
# benchmark that runs it beside kbatchd's gang admission.
#
# Prints the cache directory on its last line. On failure it prints one line naming the step
# and the module, and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${KBATCHD_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kbatchd/control-plane}
mkdir -p "$cache"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
log="$cache/build.log"
: >"$log"

fail() { echo "control plane build failed: $1 (log: $log: $(grep -m1 -iE 'error|cannot|invalid|missing' "$log" || tail -n1 "$log"))" >&2; exit 1; }
command -v go >/dev/null || { echo "control plane build failed: no Go toolchain on PATH" >&2; exit 1; }

# A module of our own whose go.mod pins what we build; go's module cache does the downloading.
new_module() {  # dir, module path
    rm -rf "$1"; mkdir -p "$1"
    printf 'module %s\n\ngo 1.26\n' "$2" >"$1/go.mod"
}

build_kubernetes() {  # version without the v, e.g. 1.37.2
    local version=$1 out="$cache/kubernetes-$1" minor=${1#*.}
    minor=${minor%%.*}
    [[ -x $out/kube-apiserver && -x $out/kube-controller-manager && -x $out/kube-scheduler ]] && return
    local src="$cache/src/kubernetes-$version"
    new_module "$src" kbatchd.test/kubernetes
    local mod
    mod=$(curl -fsS "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/v$version.mod") \
        || fail "fetching go.mod of k8s.io/kubernetes v$version"
    {
        echo "require k8s.io/kubernetes v$version"
        # Every staging module k8s.io/kubernetes requires at v0.0.0 is published as v0.<minor>.<patch>.
        grep -E '^\s+k8s\.io/[a-z-]+ v0\.0\.0$' <<<"$mod" | awk -v v="v0.${version#*.}" \
            '{print "replace " $1 " => " $1 " " v}'
    } >>"$src/go.mod"
    printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler/app"\n)\n' >"$src/tools.go"
    echo "building Kubernetes $version (first build: about 15 minutes on 2 cores)" >&2
    (cd "$src" && go mod tidy) >>"$log" 2>&1 || fail "go mod tidy for k8s.io/kubernetes v$version"
    local pkg=k8s.io/component-base/version
    local ldflags="-s -w -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    mkdir -p "$out.tmp"
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler) >>"$log" 2>&1 \
        || fail "go build of k8s.io/kubernetes v$version"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

build_etcd() {
    local out="$cache/etcd-$ETCD_VERSION"
    [[ -x $out/etcd ]] && return
    local src="$cache/src/etcd-$ETCD_VERSION"
    new_module "$src" kbatchd.test/etcd
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" >>"$src/go.mod"
    # etcd's own main is this one call; the server module holds everything else.
    printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"$src/main.go"
    echo "building etcd $ETCD_VERSION" >&2
    (cd "$src" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .) \
        >>"$log" 2>&1 || fail "go build of go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

build_kwok() {
    local out="$cache/kwok-$KWOK_VERSION"
    [[ -x $out/kwok && -s $out/node-stages.yaml ]] && return
    echo "building kwok $KWOK_VERSION" >&2
    mkdir -p "$out.tmp"
    GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
        >>"$log" 2>&1 || fail "go install of sigs.k8s.io/kwok/cmd/kwok $KWOK_VERSION"
    # kwok's own node Stages (initialize, then heartbeat with a Lease): kwok manages no node,
    # and so no pod, without node Stages; the pod Stages are ours (stages.yaml).
    local dir
    dir=$(module_dir "sigs.k8s.io/kwok@$KWOK_VERSION")
    { cat "$dir/kustomize/stage/node/fast/node-initialize.yaml"; echo "---"
      cat "$dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"; } \
        >"$out.tmp/node-stages.yaml" 2>>"$log" || fail "reading the node Stages of sigs.k8s.io/kwok $KWOK_VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

module_dir() {  # module@version: where the module cache unpacked it
    go mod download -json "$1" 2>>"$log" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p' || true
}

fetch_jobset_crds() {
    local out="$cache/jobset-$JOBSET_VERSION"
    [[ -s $out/jobset.x-k8s.io_jobsets.yaml ]] && return
    local dir
    dir=$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")
    [[ -n $dir ]] || fail "go mod download of sigs.k8s.io/jobset $JOBSET_VERSION"
    mkdir -p "$out.tmp"
    cp "$dir"/config/components/crd/bases/*.yaml "$out.tmp/" 2>>"$log" \
        || fail "copying the CRDs of sigs.k8s.io/jobset $JOBSET_VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

# Built in a copy of the module (the module cache is read-only) with the module's own go.mod
# and go.sum, so its dependencies are the ones its release pins.
build_jobset_manager() {
    local out="$cache/jobset-manager-$JOBSET_VERSION"
    [[ -x $out/manager && -s $out/webhook/manifests.yaml ]] && return
    local dir src="$cache/src/jobset-$JOBSET_VERSION"
    dir=$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")
    [[ -n $dir ]] || fail "go mod download of sigs.k8s.io/jobset $JOBSET_VERSION"
    rm -rf "$src"; mkdir -p "$(dirname "$src")"
    { cp -r "$dir" "$src" && chmod -R u+w "$src"; } 2>>"$log" || fail "copying sigs.k8s.io/jobset $JOBSET_VERSION"
    echo "building the JobSet manager $JOBSET_VERSION" >&2
    local ldflags="-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/manager" .) >>"$log" 2>&1 \
        || fail "go build of sigs.k8s.io/jobset $JOBSET_VERSION"
    # Its webhook configurations (and the patches that give the pod webhooks their selector):
    # ControlPlane.start_jobset_manager registers them by URL.
    cp -r "$src/config/components/webhook" "$out.tmp/webhook" 2>>"$log" \
        || fail "copying the webhook configurations of sigs.k8s.io/jobset $JOBSET_VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

# Kueue's manager, built like the JobSet manager, with what ControlPlane.start_kueue_manager
# installs beside it: its CRDs (and the patches that give some of them a conversion webhook),
# its webhook configurations (and the kustomization whose patches give the pod webhooks their
# namespace selector) and the configuration its install ships.
build_kueue_manager() {
    local out="$cache/kueue-manager-$KUEUE_VERSION"
    [[ -x $out/manager && -s $out/webhook/manifests.yaml && -s $out/controller_manager_config.yaml ]] && return
    local dir src="$cache/src/kueue-$KUEUE_VERSION"
    dir=$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")
    [[ -n $dir ]] || fail "go mod download of sigs.k8s.io/kueue $KUEUE_VERSION"
    rm -rf "$src"; mkdir -p "$(dirname "$src")"
    { cp -r "$dir" "$src" && chmod -R u+w "$src"; } 2>>"$log" || fail "copying sigs.k8s.io/kueue $KUEUE_VERSION"
    echo "building the Kueue manager $KUEUE_VERSION" >&2
    local ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/manager" ./cmd/kueue) \
        >>"$log" 2>&1 || fail "go build of sigs.k8s.io/kueue $KUEUE_VERSION"
    { cp -r "$src/config/components/crd" "$out.tmp/crd" \
        && cp -r "$src/config/components/webhook" "$out.tmp/webhook" \
        && cp "$src/config/components/manager/controller_manager_config.yaml" "$out.tmp/"; } \
        2>>"$log" || fail "copying the CRDs, webhook configurations and configuration of sigs.k8s.io/kueue $KUEUE_VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
}

jobset_manager=false kueue_manager=false
while [[ ${1:-} == --*-manager ]]; do
    case $1 in
        --jobset-manager) jobset_manager=true ;;
        --kueue-manager) kueue_manager=true ;;
        *) echo "build.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || read -ra versions <<<"$K8S_VERSIONS"
fetch_jobset_crds
$jobset_manager && build_jobset_manager
$kueue_manager && build_kueue_manager
build_etcd
build_kwok
for v in "${versions[@]}"; do build_kubernetes "$v"; done
echo "$cache"
