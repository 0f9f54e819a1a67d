#!/usr/bin/env bash
# Container CI job (docs/docker.md, "Building offline"): builds a local Debian base (no container
# registry is reachable here), builds the project's Dockerfile on it, runs the image and the
# compose pair (app + PostgreSQL) and checks what a person deploying it relies on.
# Needs root and podman; installs podman and friends with apt when they are missing. Prints
# one "SKIP container job: <why>" line and exits 0 only where podman cannot run at all.
#
# Settings (environment): MAIL_CI_CONTAINER_CACHE (where the base tarball is kept between runs,
# default /var/cache/mail-ci), MAIL_CI_DOCKERFILE (Dockerfile to build, default ./Dockerfile).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
START=$(date +%s)

say() { echo "[container $(($(date +%s) - START))s] $*"; }
skip() {
  echo "SKIP container job: $*"
  exit 0
}
fail() {
  echo "FAIL container job: $*" >&2
  exit 1
}

# --- tools -------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "needs root (rootful podman with the runc runtime); running as uid $(id -u)"
need_install=()
for tool in podman buildah debootstrap runc podman-compose curl; do
  command -v "$tool" >/dev/null 2>&1 || need_install+=("$tool")
done
if [ ${#need_install[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || skip "podman is missing and there is no apt-get to install it"
  say "installing ${need_install[*]} with apt"
  timeout 600 apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq \
    podman buildah debootstrap runc podman-compose curl >/dev/null
fi

# A containers.conf used only by this job: runc (crun cannot run on hybrid cgroups), ulimits
# no higher than this machine allows (podman's defaults exceed a sandbox's), no systemd.
WORK="$(mktemp -d /tmp/mail-ci-container.XXXXXX)"
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
lim() { if [ "$1" = unlimited ] || [ "$1" -gt 32768 ]; then echo 32768; else echo "$1"; fi; }
cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(lim "$hard_nofile"):$(lim "$hard_nofile")", "nproc=$(lim "$hard_nproc"):$(lim "$hard_nproc")"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

PROJECT="mailci$$"
IMAGE="localhost/mail-server:ci"
PG_IMAGE="localhost/mail-ci-postgres"
cleanup() {
  local rc=$?
  set +e
  if [ -n "${COMPOSE_UP:-}" ]; then
    (cd "$ROOT" && timeout 60 podman-compose -p "$PROJECT" -f compose.yaml down -v >/dev/null 2>&1)
  fi
  for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null | grep "^$PROJECT" || true); do
    timeout 30 podman rm -f -t 0 "$c" >/dev/null 2>&1
  done
  for v in $(podman volume ls --format '{{.Name}}' 2>/dev/null | grep "^$PROJECT" || true); do
    timeout 30 podman volume rm -f "$v" >/dev/null 2>&1
  done
  for n in $(podman network ls --format '{{.Name}}' 2>/dev/null | grep "^$PROJECT" || true); do
    timeout 30 podman network rm -f "$n" >/dev/null 2>&1
  done
  # Podman's store keeps the build cache between runs. Each run whose sources changed leaves
  # about 300 MB of layers no image uses any more: drop those older than a day (the dependency
  # layer stays while the latest build builds on it), and the bases of earlier weeks.
  timeout 120 podman image prune -f --filter until=24h >/dev/null 2>&1
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep '^localhost/mail-ci-base:' | grep -v ":${CODENAME:-x}-${WEEK:-x}$" || true); do
    timeout 60 podman rmi -f "$old" >/dev/null 2>&1
  done
  rm -rf "$WORK"
  say "cleaned up (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

timeout 60 podman info >"$WORK/info.txt" 2>&1 || skip "podman cannot start here: $(tail -n1 "$WORK/info.txt")"

# --- local base: debootstrap from this machine's Debian mirror, cached per ISO week ----------
# The mirror is read from the apt configuration at run time (deb822 .sources or one-line lists).
CODENAME="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
debian_mirror() {
  local uri
  uri=$(awk -v suite="$CODENAME" '
    /^[[:space:]]*$/ { if (uris != "" && suites ~ "(^| )" suite "( |$)") { print uris; exit } uris = ""; suites = ""; next }
    tolower($1) == "uris:" { uris = $2 }
    tolower($1) == "suites:" { $1 = ""; suites = $0 " " }
    END { if (uris != "" && suites ~ "(^| )" suite "( |$)") print uris }
  ' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  if [ -z "$uri" ]; then
    uri=$(awk -v suite="$CODENAME" '$1 == "deb" && $3 == suite { print $2; exit }' \
      /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1)
  fi
  echo "$uri"
}
WEEK="$(date -u +%G-W%V)"
BASE="localhost/mail-ci-base:$CODENAME-$WEEK"
CACHE="${MAIL_CI_CONTAINER_CACHE:-/var/cache/mail-ci}"
mkdir -p "$CACHE"
if ! podman image exists "$BASE"; then
  tarball="$CACHE/base-$CODENAME-$WEEK.tar"
  if [ ! -s "$tarball" ]; then
    mirror="$(debian_mirror)"
    [ -n "$mirror" ] || fail "no Debian mirror for $CODENAME found in the apt configuration"
    say "building the local base with debootstrap ($CODENAME, minbase)"
    rootfs="$WORK/rootfs"
    timeout 900 debootstrap --variant=minbase \
      --include=python3,python3-pip,python3-venv,ca-certificates,passwd \
      "$CODENAME" "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
      || { tail -n 20 "$WORK/debootstrap.log"; fail "debootstrap failed"; }
    # Downloads from inside the containers may pass a TLS-intercepting proxy: trust the host's CAs.
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    # Older weeks' tarballs are not needed any more.
    find "$CACHE" -maxdepth 1 -name "base-$CODENAME-*.tar" ! -name "$(basename "$tarball")" -delete
  fi
  say "importing the local base $BASE"
  # Like the official python image: python3 on PATH, a UTF-8 locale. The CA bundle and pip's
  # switch are what builds here need (see above; Debian's pip refuses system-wide installs).
  timeout 300 podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
    --change 'CMD ["python3"]' \
    "$tarball" "$BASE" >"$WORK/import.log" 2>&1 || { cat "$WORK/import.log"; fail "podman import failed"; }
fi
timeout 120 podman run --rm --name "${PROJECT}-probe" "$BASE" true \
  >"$WORK/probe.txt" 2>&1 || skip "podman cannot run a container here: $(tail -n1 "$WORK/probe.txt")"
timeout 120 podman run --rm --name "${PROJECT}-python" "$BASE" python3 -c 'import ssl, venv' \
  >"$WORK/probe.txt" 2>&1 || { cat "$WORK/probe.txt"; fail "the local base has no working python3"; }
say "base ready: $BASE ($(timeout 60 podman image inspect --format '{{.Size}}' "$BASE") bytes)"


# --- helpers --------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }
# wait_health URL SECONDS: poll until GET URL answers 200; prints the milliseconds it took.
wait_health() {
  local url=$1 limit=$2 t0 deadline
  t0=$(now_ms)
  deadline=$((t0 + limit * 1000))
  until curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
  echo $(($(now_ms) - t0))
}
# printed_key CONTAINER ROLE: the key the server printed at its first start ("  user  key (id ..): SECRET").
printed_key() {
  timeout 60 podman logs "$1" >"$WORK/keys.log" 2>&1 || true
  awk -v role="$2" '$1 == role && $2 == "key" { print $NF; exit }' "$WORK/keys.log"
}
json_get() { python3 -c 'import json, sys; v = json.load(sys.stdin)
for k in sys.argv[1:]: v = v[k]
print(v)' "$@"; }
# post_message PORT KEY BODY: POST /message; prints the response body, fails unless 200.
post_message() {
  curl -fsS --max-time 60 -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
    -d "{\"body\": \"$3\"}" "http://127.0.0.1:$1/message"
}
dump_logs() {
  echo "--- podman logs $1 (last 40 lines) ---" >&2
  timeout 60 podman logs --tail 40 "$1" >&2 2>&1 || true
}

# --- the image ----------------------------------------------------------------------------
DOCKERFILE="${MAIL_CI_DOCKERFILE:-Dockerfile}"
build_args=(--build-arg "BASE=$BASE")
# The machine's package index settings, when it has network ones (a file:// index is not
# reachable from inside a build).
for var in PIP_INDEX_URL UV_INDEX_URL UV_DEFAULT_INDEX; do
  value="${!var:-}"
  case "$value" in http://* | https://*) build_args+=(--build-arg "$var=$value") ;; esac
done
say "building $IMAGE from $DOCKERFILE"
t0=$(date +%s)
# --format docker keeps HEALTHCHECK (the OCI image format has no field for it).
timeout 1200 podman build --format docker --layers -f "$DOCKERFILE" "${build_args[@]}" \
  -t "$IMAGE" . >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; fail "podman build failed"; }
image_bytes=$(timeout 60 podman image inspect --format '{{.Size}}' "$IMAGE")
base_bytes=$(timeout 60 podman image inspect --format '{{.Size}}' "$BASE")
say "image built in $(($(date +%s) - t0))s: $image_bytes bytes, of which $((image_bytes - base_bytes)) bytes above the base"
timeout 60 podman history --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" | grep -v '^0 B' | cut -c1-100 | sed 's/^/    layer /'
# The official python:3.12-slim is about 125 MB; the image must stay under 450 MB on it.
[ $((image_bytes - base_bytes)) -lt $((325 * 1000 * 1000)) ] \
  || fail "the image adds $((image_bytes - base_bytes)) bytes to its base (limit 325 MB, for 450 MB on python:3.12-slim)"

user="$(timeout 60 podman image inspect --format '{{.Config.User}}' "$IMAGE")"
uid="$(timeout 60 podman run --rm --no-healthcheck --name "$PROJECT-id" --entrypoint id "$IMAGE" -u)"
[ -n "$user" ] && [ "$uid" != 0 ] || fail "the image runs as root (User='$user', uid $uid)"
healthcheck="$(timeout 60 podman image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")"
case "$healthcheck" in *healthcheck.py*) ;; *) fail "the image has no HEALTHCHECK ($healthcheck)" ;; esac
say "runs as $user (uid $uid); HEALTHCHECK present"

# --- run it: /health, POST /message with the printed key, SIGTERM, restart with the volume ---
PORT=$(free_port)
APP="$PROJECT-app"
t0=$(now_ms)
# No systemd here to time the HEALTHCHECK: it is run by hand below (podman healthcheck run).
timeout 60 podman run -d --health-interval disable --name "$APP" -p "127.0.0.1:$PORT:8000" \
  -v "$PROJECT-data:/data" "$IMAGE" >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "podman run failed"; }
ms=$(wait_health "http://127.0.0.1:$PORT/health" 90) || { dump_logs "$APP"; fail "no /health answer within 90 s"; }
say "/health answered $(($(now_ms) - t0)) ms after podman run"
openapi="$(curl -fsS --max-time 10 "http://127.0.0.1:$PORT/openapi.json")" \
  || { dump_logs "$APP"; fail "GET /openapi.json failed (is spec/openapi.yaml in the image?)"; }
case "$openapi" in *'"openapi"'*) ;; *) fail "GET /openapi.json is not the OpenAPI document" ;; esac
key="$(printed_key "$APP" user)"
[ -n "$key" ] || { dump_logs "$APP"; fail "the server printed no user key"; }
t0=$(now_ms)
answer="$(post_message "$PORT" "$key" 'What is 12 * 7?')" || { dump_logs "$APP"; fail "POST /message failed"; }
task_id="$(echo "$answer" | json_get task_id)"
reply="$(echo "$answer" | json_get response)" || fail "POST /message answered without a response: $answer"
case "$reply" in *84*) ;; *) fail "the demo swarm's answer to 12 * 7 lacks 84: $answer" ;; esac
say "POST /message with the printed key: 200 in $(($(now_ms) - t0)) ms (task $task_id)"
t0=$(now_ms)
post_message "$PORT" "$key" 'What is 2 + 2?' >/dev/null || fail "a second POST /message failed"
say "a second POST /message: 200 in $(($(now_ms) - t0)) ms"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H 'Authorization: Bearer wrong' "http://127.0.0.1:$PORT/whoami")
[ "$code" = 401 ] || fail "a wrong key got $code from /whoami, expected 401"
timeout 60 podman healthcheck run "$APP" >/dev/null || { dump_logs "$APP"; fail "the image's HEALTHCHECK reports unhealthy"; }
say "HEALTHCHECK passes in the running container"

# Measured from the stop command to the container's recorded exit (podman's own tear-down after
# the exit, a few hundred ms on a busy machine, is reported but not held against the image).
t0=$(now_ms)
timeout 30 podman stop -t 10 "$APP" >/dev/null 2>&1
wall_ms=$(($(now_ms) - t0))
finished_ns="$(timeout 60 podman inspect --format '{{.State.FinishedAt.UnixNano}}' "$APP")"
stop_ms=$((finished_ns / 1000000 - t0))
exit_code="$(timeout 60 podman inspect --format '{{.State.ExitCode}}' "$APP")"
say "stopped on SIGTERM: exited $stop_ms ms after podman stop (command returned after $wall_ms ms), exit code $exit_code"
[ "$stop_ms" -lt 2000 ] || { dump_logs "$APP"; fail "SIGTERM took $stop_ms ms (limit 2000 ms)"; }
[ "$exit_code" = 0 ] || { dump_logs "$APP"; fail "exit code $exit_code after SIGTERM (expected 0)"; }

timeout 60 podman start "$APP" >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "podman start failed"; }
wait_health "http://127.0.0.1:$PORT/health" 90 >/dev/null || { dump_logs "$APP"; fail "no /health after restart"; }
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $key" "http://127.0.0.1:$PORT/whoami")
[ "$code" = 200 ] || { dump_logs "$APP"; fail "the key from the first start got $code after a restart (the /data volume lost it?)"; }
keys_printed=$(timeout 60 podman logs "$APP" 2>&1 | grep -c 'No API keys were found' || true)
[ "$keys_printed" = 1 ] || fail "the server created keys again after a restart ($keys_printed times)"
timeout 60 podman exec "$APP" test -s /data/registries/keys.json || fail "no /data/registries/keys.json in the volume"
say "restart keeps the keys (volume /data)"
# The other subcommands work in the running container against the same volume (docs/docker.md).
newkey="$(timeout 60 podman exec "$APP" mail keys create --role user --id ci-added 2>&1 | grep -o 'mail_[A-Za-z0-9_-]*' | head -n1 || true)"
[ -n "$newkey" ] || fail "podman exec ... mail keys create printed no key"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $newkey" "http://127.0.0.1:$PORT/whoami")
[ "$code" = 200 ] || fail "a key made with 'mail keys create' in the container got $code from /whoami"
say "mail keys create in the running container: the new key works at once"
timeout 30 podman rm -f -t 5 "$APP" >/dev/null 2>&1

# Configuration by a mounted mail.toml (another port) and the environment (the health check's port).
printf '%s\n' '[server]' 'port = 8100' '[server.swarm]' 'name = "demo"' \
  'source = "/opt/mail/swarms.json"' 'registry = "registries/demo.json"' >"$WORK/mail.toml"
timeout 60 podman run -d --health-interval disable --name "$APP-cfg" -p "127.0.0.1:$PORT:8100" \
  -e MAIL_HEALTHCHECK_PORT=8100 -v "$WORK/mail.toml:/opt/mail/mail.toml:ro" \
  -v "$PROJECT-data:/data" "$IMAGE" >"$WORK/run.log" 2>&1 \
  || { cat "$WORK/run.log"; fail "podman run with a mounted mail.toml failed"; }
wait_health "http://127.0.0.1:$PORT/health" 90 >/dev/null \
  || { dump_logs "$APP-cfg"; fail "no /health on the port of a mounted mail.toml"; }
timeout 60 podman healthcheck run "$APP-cfg" >/dev/null || fail "HEALTHCHECK fails with MAIL_HEALTHCHECK_PORT=8100"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $key" "http://127.0.0.1:$PORT/whoami")
[ "$code" = 200 ] || fail "a new container on the same volume refused the first key ($code)"
say "a mounted mail.toml moves the server to port 8100, MAIL_HEALTHCHECK_PORT follows; a new container on the volume keeps the keys"
timeout 30 podman rm -f -t 5 "$APP-cfg" >/dev/null 2>&1

# --- compose: app + PostgreSQL ---------------------------------------------------------------
say "building the CI stand-in for the postgres image"
timeout 900 podman build --format docker --layers -f .ci/container/postgres.Containerfile \
  --build-arg "BASE=$BASE" -t "$PG_IMAGE" .ci/container >"$WORK/pg-build.log" 2>&1 \
  || { tail -n 30 "$WORK/pg-build.log"; fail "building the postgres stand-in failed"; }
CPORT=$(free_port)
export MAIL_IMAGE="$IMAGE" POSTGRES_IMAGE="$PG_IMAGE" MAIL_PORT="127.0.0.1:$CPORT" POSTGRES_PASSWORD="ci-$$"
compose() { timeout 300 podman-compose -p "$PROJECT" -f compose.yaml "$@"; }
t0=$(now_ms)
COMPOSE_UP=1
compose up -d --no-build >"$WORK/compose.log" 2>&1 || { cat "$WORK/compose.log"; fail "compose up failed"; }
CAPP="${PROJECT}_app_1"
CPG="${PROJECT}_postgres_1"
wait_health "http://127.0.0.1:$CPORT/health" 120 >/dev/null || { dump_logs "$CPG"; dump_logs "$CAPP"; fail "compose app: no /health within 120 s"; }
say "compose pair up in $(($(now_ms) - t0)) ms"
# The app waited for the database itself: it never failed and was restarted.
restarts="$(timeout 60 podman inspect --format '{{.RestartCount}}' "$CAPP")"
[ "$restarts" = 0 ] || { dump_logs "$CAPP"; fail "compose app was restarted $restarts times while PostgreSQL came up"; }
timeout 60 podman logs "$CAPP" >"$WORK/app.log" 2>&1 || true
if grep -q 'waiting for PostgreSQL' "$WORK/app.log"; then
  say "compose app waited for PostgreSQL before starting (no restart)"
fi
ckey="$(printed_key "$CAPP" user)"
[ -n "$ckey" ] || { dump_logs "$CAPP"; fail "compose app printed no user key"; }
answer="$(post_message "$CPORT" "$ckey" 'What is 6 * 7?')" || { dump_logs "$CAPP"; fail "compose POST /message failed"; }
ctask="$(echo "$answer" | json_get task_id)"
stored=$(timeout 60 podman exec "$CPG" psql -U mail -d mail -tAc "SELECT count(*) FROM tasks WHERE task_id = '$ctask'" 2>&1) || true
[ "$stored" = 1 ] || fail "task $ctask is not in PostgreSQL's tasks table (count '$stored')"
say "task $ctask stored in PostgreSQL"
timeout 60 podman restart -t 10 "$CAPP" >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "podman restart failed"; }
wait_health "http://127.0.0.1:$CPORT/health" 90 >/dev/null || { dump_logs "$CAPP"; fail "compose app: no /health after restart"; }
tasks="$(curl -fsS --max-time 10 -H "Authorization: Bearer $ckey" "http://127.0.0.1:$CPORT/tasks")" \
  || { dump_logs "$CAPP"; fail "GET /tasks with the first key failed after a restart"; }
case "$tasks" in *"$ctask"*) ;; *) fail "task $ctask is missing from GET /tasks after a restart: $tasks" ;; esac
say "after an app restart the key still works and GET /tasks lists task $ctask (from PostgreSQL)"
compose down -v >/dev/null 2>&1 || true
COMPOSE_UP=

say "PASS container job in $(($(date +%s) - START))s"
