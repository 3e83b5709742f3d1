#!/usr/bin/env bash
# compose-up.sh: runs docker-compose.yml (beside this script) with each
# service in a gpuslice slice of its own, all on one GPU (README.md).
#
#   compose-up.sh [--dry-run] [--state-dir DIR] [--in-job] up [ARGS...]
#   compose-up.sh [--dry-run] [--state-dir DIR] down [ARGS...]
#
# up: submits one holder job per service (`sleep infinity` in a slice with
# the service's caps, table below), waits until each runs, writes one
# override file per service (`gpuslice container-args --compose SERVICE ID`)
# into the state directory, and starts the services with
# `docker compose -f docker-compose.yml -f DIR/SERVICE.yml... up -d ARGS`.
# If anything fails, what it started is stopped and the holders cancelled.
# down: `docker compose ... down ARGS`, then cancels the holder jobs (only
# once the containers are gone: a container outliving its job would use
# memory the daemon has given to another).
#
# --dry-run prints the commands instead of running them (job ids shown as
# ID_SERVICE); it runs nothing and writes nothing.
# --state-dir: where the job ids and the overrides are kept (default .gpuslice
# beside this script).
# --in-job: also put each service's container under its job's cgroup
# (cgroup_parent), so that the daemon counts its processes as the job's and
# ends them with it; only with dockerd's cgroupfs driver (with systemd's,
# the default on most hosts, a cgroup parent must be a slice).
#
# Environment: GPUSLICE, the CLI (default gpuslice); GPUSLICE_COMPOSE, the
# compose command (default `docker compose` if it works, else
# docker-compose); GPUSLICE_COMPOSE_TIMEOUT, seconds to wait for the slices
# (default 300). Needs python3 (to read `gpuslice show --json`).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
compose_file=$here/docker-compose.yml

# One slice per service of docker-compose.yml:
#   service    memory  compute  compute mode     priority
slices=(
  "inference   6GiB    30%      hard             high"
  "notebook    4GiB    20%      hard             normal"
  "trainer     10GiB   50%      work-conserving  low"
)

die() {
  echo "compose-up: $*" >&2
  exit 1
}

usage() {
  echo "usage: $0 [--dry-run] [--state-dir DIR] [--in-job] up|down [COMPOSE ARGS...]" >&2
  exit 2
}

dry_run=0
in_job=()
state_dir=$here/.gpuslice
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry_run=1; shift ;;
    --in-job) in_job=(--in-job); shift ;;
    --state-dir)
      [ $# -ge 2 ] || usage
      state_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
action=$1
shift

gpuslice=${GPUSLICE:-gpuslice}
timeout=${GPUSLICE_COMPOSE_TIMEOUT:-300}
case $timeout in '' | *[!0-9]*) die "GPUSLICE_COMPOSE_TIMEOUT must be a number of seconds" ;; esac
jobs_file=$state_dir/jobs

# The compose command, as an array.
compose=()
if [ -n "${GPUSLICE_COMPOSE:-}" ]; then
  read -r -a compose <<<"$GPUSLICE_COMPOSE"
elif [ "$dry_run" = 1 ]; then
  compose=(docker compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  die "neither 'docker compose' nor docker-compose works here; set GPUSLICE_COMPOSE"
fi

# Prints a command as one could type it.
show() {
  local out=
  printf -v out '%q ' "$@"
  echo "+ ${out% }"
}

# Runs a command, or with --dry-run prints it.
run() {
  if [ "$dry_run" = 1 ]; then
    show "$@"
  else
    "$@"
  fi
}

# The -f arguments of compose: the services, then the override of each
# service named.
compose_args() {
  local service
  printf '%s\n' -f "$compose_file"
  for service in "$@"; do
    printf '%s\n' -f "$state_dir/$service.yml"
  done
}

# The state of job $1 (queued, running, exited, ...).
job_state() {
  "$gpuslice" show --json "$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])'
}

wait_running() {
  local id=$1 service=$2 state
  local deadline=$((SECONDS + timeout))
  while :; do
    state=$(job_state "$id")
    case $state in
      running) return 0 ;;
      queued) ;;
      *) die "the slice of $service (job $id) is $state, not running; see: $gpuslice show $id" ;;
    esac
    if [ "$SECONDS" -ge "$deadline" ]; then
      die "the slice of $service (job $id) is still queued after ${timeout}s; see: $gpuslice show $id"
    fi
    sleep 1
  done
}

# Set while `up` runs: what to undo if it fails.
submitted=()
started=0

undo_up() {
  local rc=$?
  trap - EXIT
  [ "$rc" -ne 0 ] || exit 0
  [ ${#submitted[@]} -gt 0 ] || exit "$rc"
  echo "compose-up: up failed; undoing it" >&2
  local ids=() services=() entry args=()
  for entry in "${submitted[@]}"; do
    services+=("${entry%% *}")
    ids+=("${entry##* }")
  done
  if [ "$started" = 1 ]; then
    mapfile -t args < <(compose_args "${services[@]}")
    "${compose[@]}" "${args[@]}" down || true
  fi
  "$gpuslice" cancel "${ids[@]}" || true
  for entry in "${services[@]}"; do
    rm -f "$state_dir/$entry.yml" "$state_dir/$entry.yml.tmp"
  done
  rm -f "$jobs_file"
  exit "$rc"
}

up() {
  [ ! -e "$jobs_file" ] || die "already up: $jobs_file lists the jobs; run '$0 down' first"
  local line service mem compute mode priority id services=() args=()
  if [ "$dry_run" = 0 ]; then
    command -v python3 >/dev/null || die "python3 is needed to read gpuslice show --json"
    mkdir -p "$state_dir"
    trap undo_up EXIT
    trap 'exit 130' INT  # Interrupted: undone as a failure.
    trap 'exit 143' TERM
  fi
  for line in "${slices[@]}"; do
    read -r service mem compute mode priority <<<"$line"
    services+=("$service")
    if [ "$dry_run" = 1 ]; then
      show "$gpuslice" submit --name "compose-$service" --mem "$mem" --compute "$compute" \
        --compute-mode "$mode" --priority "$priority" -- sleep infinity
      continue
    fi
    id=$("$gpuslice" submit --name "compose-$service" --mem "$mem" --compute "$compute" \
      --compute-mode "$mode" --priority "$priority" -- sleep infinity)
    case $id in '' | *[!0-9]*) die "gpuslice submit printed '$id', not a job id" ;; esac
    submitted+=("$service $id")
    echo "$service $id" >>"$jobs_file"
    echo "compose-up: $service: job $id ($mem, $compute $mode, $priority priority)"
  done
  for line in "${slices[@]}"; do
    read -r service _ <<<"$line"
    if [ "$dry_run" = 1 ]; then
      echo "# wait until job ID_$service is running ($gpuslice show --json ID_$service)"
      echo "+ $(printf '%q ' "$gpuslice" container-args "${in_job[@]}" --compose "$service" "ID_$service")>" \
        "$(printf '%q' "$state_dir/$service.yml")"
      continue
    fi
    id=$(awk -v s="$service" '$1 == s { print $2 }' "$jobs_file")
    wait_running "$id" "$service"
    "$gpuslice" container-args "${in_job[@]}" --compose "$service" "$id" >"$state_dir/$service.yml.tmp"
    mv "$state_dir/$service.yml.tmp" "$state_dir/$service.yml"
  done
  mapfile -t args < <(compose_args "${services[@]}")
  started=1
  run "${compose[@]}" "${args[@]}" up -d "$@"
  if [ "$dry_run" = 0 ]; then
    trap - EXIT
    echo "compose-up: up; the same files for other compose commands:"
    show "${compose[@]}" "${args[@]}"
  fi
}

down() {
  local service id services=() ids=() args=()
  if [ -e "$jobs_file" ]; then
    while read -r service id; do
      services+=("$service")
      ids+=("$id")
    done <"$jobs_file"
  elif [ "$dry_run" = 1 ]; then
    for line in "${slices[@]}"; do
      read -r service _ <<<"$line"
      services+=("$service")
      ids+=("ID_$service")
    done
  else
    die "not up: no $jobs_file"
  fi
  mapfile -t args < <(compose_args "${services[@]}")
  if ! run "${compose[@]}" "${args[@]}" down "$@"; then
    die "compose down failed; the slices stay (jobs ${ids[*]}) while containers may run. Run '$0 down' again"
  fi
  run "$gpuslice" cancel "${ids[@]}"
  if [ "$dry_run" = 0 ]; then
    for service in "${services[@]}"; do rm -f "$state_dir/$service.yml"; done
    rm -f "$jobs_file"
    echo "compose-up: down; cancelled jobs ${ids[*]}"
  fi
}

case $action in
  up) up "$@" ;;
  down) down "$@" ;;
  *) usage ;;
esac
