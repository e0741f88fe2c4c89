#!/usr/bin/env bash
# Build the odradek images on this machine with no image registry: a locally made base image and wheels
# built on the host; nothing inside `docker build` touches the network.
#
#   deploy/build.sh                 base image (reused when it exists), wheels, the odradek image, and the
#                                   Prometheus image of the compose cluster (odradek-prometheus:latest, on
#                                   its own debootstrapped base odradek-base-prometheus:bookworm with Debian's
#                                   prometheus package)
#   deploy/build.sh --rebuild-base  make the base image again even if it exists
#   deploy/build.sh --if-stale      do nothing when the image was built from the current sources
#   deploy/build.sh --spark         the Spark image instead (odradek-spark:latest: PySpark and a Java
#                                   runtime, on the base odradek-base-spark:bookworm), for the compose
#                                   profile "spark"
#
# Steps:
#   1. Base image ($ODRADEK_BASE_IMAGE, default odradek-base:bookworm). Reused when present. Otherwise
#      debootstrap (installed with apt-get when missing) makes a minimal Debian bookworm root file system
#      with python3 and python3-venv from the mirror this machine's apt sources name, and `docker import`
#      turns it into the base image.
#   2. Wheels: `pip wheel` of the project and its runtime dependencies, on the host (the host's Python
#      must have the base image's major.minor: the compiled dependencies are built for it), into a staging
#      copy of the sources, deploy/build/context: the dependencies in deploy/wheels/, the project's wheel
#      in deploy/build/wheels/.
#   3. The odradek image ($ODRADEK_IMAGE, default odradek:latest) from deploy/Dockerfile with
#      BASE_IMAGE=<the base image> and that staging context (`docker build --network none`; the
#      Dockerfile installs with `pip install --no-index`), labelled with a hash of its sources.
#   4. The Prometheus image ($ODRADEK_PROMETHEUS_IMAGE, default odradek-prometheus:latest) from
#      deploy/prometheus/Dockerfile on $ODRADEK_PROMETHEUS_BASE_IMAGE (default odradek-base-prometheus:bookworm,
#      made by debootstrap with the prometheus package like the base of step 1), also offline.
#
# Environment: PYTHON (the host interpreter for pip; default .venv/bin/python, else python3),
# ODRADEK_BASE_IMAGE, ODRADEK_IMAGE (with --spark: ODRADEK_SPARK_BASE_IMAGE, ODRADEK_SPARK_IMAGE), DEBIAN_MIRROR (default: read from /etc/apt/sources.list.d/debian.sources
# or /etc/apt/sources.list). Prints how long each step took.
set -euo pipefail
{  # the whole script is read before it runs: editing this file during a build cannot break the build

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="${ODRADEK_BASE_IMAGE:-odradek-base:bookworm}"
IMAGE="${ODRADEK_IMAGE:-odradek:latest}"
SUITE=bookworm
APT_LOCK=/tmp/odradek-apt.lock  # tests/support/apt.py's APT_LOCK
STAGE="$ROOT/deploy/build/context"
REBUILD_BASE=0
IF_STALE=0
SPARK=0
INCLUDE=python3,python3-venv,ca-certificates
EXTRAS=""
PROMETHEUS_BASE_IMAGE="${ODRADEK_PROMETHEUS_BASE_IMAGE:-odradek-base-prometheus:bookworm}"
PROMETHEUS_IMAGE="${ODRADEK_PROMETHEUS_IMAGE:-odradek-prometheus:latest}"
PROMETHEUS_INCLUDE=ca-certificates,prometheus
PROMETHEUS_SOURCES=(deploy/prometheus/Dockerfile deploy/prometheus/prometheus.yml deploy/prometheus/alerts.yml)

for arg in "$@"; do
    case "$arg" in
        --rebuild-base) REBUILD_BASE=1 ;;
        --if-stale) IF_STALE=1 ;;
        --spark) SPARK=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "build.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done

if [[ "$SPARK" == 1 ]]; then
    BASE_IMAGE="${ODRADEK_SPARK_BASE_IMAGE:-odradek-base-spark:bookworm}"
    IMAGE="${ODRADEK_SPARK_IMAGE:-odradek-spark:latest}"
    INCLUDE="$INCLUDE,openjdk-17-jre-headless,procps"
    EXTRAS=spark
    STAGE="$ROOT/deploy/build/context-spark"
fi

die() { echo "build.sh: $*" >&2; exit 1; }
now() { date +%s.%N; }
took() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

command -v docker >/dev/null || die "no docker command on the PATH"
docker info >/dev/null 2>&1 || die "no Docker Engine answers (docker info failed)"

if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

debian_mirror() {
    if [[ -n "${DEBIAN_MIRROR:-}" ]]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri=""
    if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
        # deb822: the URIs of the first stanza that lists the suite
        uri="$(awk -v suite="$SUITE" '
            /^[[:space:]]*$/ { if (uris != "" && has) { print uris; exit } uris=""; has=0; next }
            /^URIs:/ { uris=$2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) has=1 }
            END { if (uris != "" && has) print uris }' /etc/apt/sources.list.d/debian.sources | head -n1)"
    fi
    if [[ -z "$uri" && -r /etc/apt/sources.list ]]; then
        uri="$(awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list)"
    fi
    [[ -n "$uri" ]] || die "cannot find a Debian mirror for $SUITE in the apt sources; set DEBIAN_MIRROR"
    echo "$uri"
}

build_base() {  # [IMAGE INCLUDE]: the base image (default $BASE_IMAGE with $INCLUDE)
    local image="${1:-$BASE_IMAGE}" include="${2:-$INCLUDE}"
    local start; start="$(now)"
    if ! command -v debootstrap >/dev/null; then
        [[ "$(id -u)" == 0 ]] || die "debootstrap is missing and installing it needs root (apt-get install debootstrap)"
        echo "build.sh: installing debootstrap" >&2
        # one install at a time with the test suite's (tests/support/apt.py takes the same lock): apt-get
        # update fails at once, without waiting, while another apt-get holds apt's own lock
        (
            flock -w 900 8 || die "another install held $APT_LOCK for 900 s"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
                || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
        ) 8>>"$APT_LOCK" || die "apt-get install debootstrap failed"
    fi
    local mirror rootfs
    mirror="$(debian_mirror)"
    rootfs="$(mktemp -d /tmp/odradek-rootfs.XXXXXX)"
    trap 'rm -rf "${rootfs:-}"; trap - RETURN TERM INT' RETURN  # once: not again when the caller returns
    # stopped (the test suite stops a build still running at its end): no half-made root file system left
    trap 'rm -rf --one-file-system "$rootfs" "$rootfs.log"; exit 143' TERM INT
    echo "build.sh: debootstrap $SUITE from $mirror into $rootfs" >&2
    debootstrap --variant=minbase --include="$include" "$SUITE" "$rootfs" "$mirror" \
        >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
    rm -f "$rootfs.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
        "$rootfs"/usr/share/man/*
    tar -C "$rootfs" --numeric-owner -c . | docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --message "debootstrap --variant=minbase $SUITE with $include" - "$image" >/dev/null
    echo "build.sh: base image $image made in $(took "$start") s" >&2
}

PACKAGES=(common odradek log proto metadata controller broker replication spark chaos)
SOURCES=(pyproject.toml README.md deploy/Dockerfile deploy/wheels/README.md "${PACKAGES[@]}")

source_hash() {  # [BASE FILES...]: default $BASE_IMAGE and $SOURCES
    # what the image is built from: the sources it copies and the base image's id
    local base="$BASE_IMAGE" files=("${SOURCES[@]}")
    if [[ $# -gt 0 ]]; then base="$1"; shift; files=("$@"); fi
    (cd "$ROOT" && python3 - "$(docker image inspect -f '{{.Id}}' "$base") $EXTRAS" "${files[@]}" <<'PY'
import hashlib, os, sys
digest = hashlib.sha256(sys.argv[1].encode())
for top in sys.argv[2:]:
    paths = [top] if os.path.isfile(top) else sorted(
        os.path.join(d, f) for d, dirs, files in os.walk(top) for f in files
        if "__pycache__" not in d and ".egg-info" not in d and not f.endswith(".pyc"))
    for path in paths:
        digest.update(path.encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
print(digest.hexdigest()[:16])
PY
    )
}

build_wheels() {
    local start; start="$(now)"
    local host_py image_py
    host_py="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    image_py="$(docker run --rm --network none "$BASE_IMAGE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$host_py" == "$image_py" ]] || die "the host's $PYTHON is Python $host_py but $BASE_IMAGE has $image_py; \
set PYTHON to a Python $image_py interpreter (the compiled dependencies are built for it)"
    rm -rf "$STAGE"
    mkdir -p "$STAGE/deploy/wheels" "$STAGE/deploy/build/wheels"
    # the staging context: what deploy/Dockerfile copies, then the wheels
    (cd "$ROOT" && tar -c --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' "${SOURCES[@]}") \
        | tar -C "$STAGE" -x
    local out="$STAGE/deploy/build/all-wheels"
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$out" "$STAGE${EXTRAS:+[$EXTRAS]}" \
        >"$STAGE.pip.log" 2>&1 \
        || { tail -n 30 "$STAGE.pip.log" >&2; die "pip wheel failed (it needs the package index for the dependencies)"; }
    rm -rf "$STAGE.pip.log" "$STAGE/build" "$STAGE"/*.egg-info
    mv "$out"/odradek-*.whl "$STAGE/deploy/build/wheels/"  # the project: a layer of its own
    mv "$out"/*.whl "$STAGE/deploy/wheels/"                # the dependencies
    rmdir "$out"
    echo "build.sh: $(ls "$STAGE/deploy/wheels" | grep -c '\.whl$') dependency wheels and the project's built in \
$(took "$start") s" >&2
}

build_image() {
    local start old; start="$(now)"
    old="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
    # The legacy builder: this Engine has no BuildKit, and the Dockerfile needs nothing BuildKit offers.
    DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "EXTRAS=$EXTRAS" \
        --label "org.odradek.source-hash=$1" -f "$STAGE/deploy/Dockerfile" -t "$IMAGE" "$STAGE" \
        >"$STAGE.docker.log" 2>&1 \
        || { tail -n 30 "$STAGE.docker.log" >&2; die "docker build of $IMAGE failed"; }
    rm -f "$STAGE.docker.log"
    # what the legacy builder leaves behind: the sources stage, and the image this one replaced
    docker image prune --force --filter "label=org.odradek.stage=sources" >/dev/null
    if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then
        docker rmi "$old" >/dev/null 2>&1 || true  # still used by a container: leave it
    fi
    echo "build.sh: image $IMAGE built in $(took "$start") s" >&2
}

up_to_date() {  # IMAGE HASH: --if-stale and the image was built from these sources
    [[ "$IF_STALE" == 1 ]] \
        && [[ "$(docker image inspect -f '{{index .Config.Labels "org.odradek.source-hash"}}' "$1" 2>/dev/null)" == "$2" ]]
}

build_prometheus() {
    local start; start="$(now)"
    if [[ "$REBUILD_BASE" == 1 ]] || ! docker image inspect "$PROMETHEUS_BASE_IMAGE" >/dev/null 2>&1; then
        build_base "$PROMETHEUS_BASE_IMAGE" "$PROMETHEUS_INCLUDE"
    fi
    local hash stage="$ROOT/deploy/build/context-prometheus"
    hash="$(source_hash "$PROMETHEUS_BASE_IMAGE" "${PROMETHEUS_SOURCES[@]}")"
    if up_to_date "$PROMETHEUS_IMAGE" "$hash"; then
        echo "build.sh: $PROMETHEUS_IMAGE is up to date (sources $hash)" >&2
        return
    fi
    rm -rf "$stage"
    mkdir -p "$stage"
    (cd "$ROOT" && tar -c "${PROMETHEUS_SOURCES[@]}") | tar -C "$stage" -x
    DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$PROMETHEUS_BASE_IMAGE" \
        --label "org.odradek.source-hash=$hash" -f "$stage/deploy/prometheus/Dockerfile" -t "$PROMETHEUS_IMAGE" "$stage" \
        >"$stage.docker.log" 2>&1 \
        || { tail -n 30 "$stage.docker.log" >&2; die "docker build of $PROMETHEUS_IMAGE failed"; }
    rm -f "$stage.docker.log"
    echo "build.sh: image $PROMETHEUS_IMAGE built in $(took "$start") s (sources $hash)" >&2
}

total="$(now)"
mkdir -p "$ROOT/deploy/build"
exec 9>"$ROOT/deploy/build/.lock"
flock 9  # one build at a time: they share the staging directory and the tags
if [[ "$REBUILD_BASE" == 1 ]] || ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    build_base
else
    echo "build.sh: reusing base image $BASE_IMAGE" >&2
fi
hash="$(source_hash)"
if up_to_date "$IMAGE" "$hash"; then
    echo "build.sh: $IMAGE is up to date (sources $hash)" >&2
else
    build_wheels
    build_image "$hash"
fi
if [[ "$SPARK" == 0 ]]; then
    build_prometheus
fi
echo "build.sh: done in $(took "$total") s: $IMAGE (base $BASE_IMAGE, sources $hash)" >&2
exit 0
}
