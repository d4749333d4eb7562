#!/usr/bin/env bash
# agentsim mock-llm against the mock servers users pick today, under one load in one run:
# aimock (npm @copilotkit/aimock, Node) and, with --vidaimock, VidaiMock (crate vidaimock, Rust;
# its build takes minutes). Each peer is installed under target/bench-peers/ at a pinned version,
# set up to give the benchmark's reply (benches/mock-llm/aimock.mjs, benches/mock-llm/vidaimock/),
# started on a loopback port, measured by `agentsim bench mock-llm --against`, and stopped.
#
# Usage: benches/mock-llm/compare.sh [--vidaimock] [--seconds S] [--connections N]
# Not run in CI: speed is measured here, on purpose, never asserted by a test.
set -euo pipefail
cd "$(dirname "$0")/../.."

AIMOCK_VERSION=1.43.0
VIDAIMOCK_VERSION=0.3.1
seconds=5
connections=64
vidaimock=no
while [ $# -gt 0 ]; do
  case "$1" in
    --vidaimock) vidaimock=yes ;;
    --seconds) seconds="$2"; shift ;;
    --connections) connections="$2"; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

peers=target/bench-peers
mkdir -p "$peers/aimock"
cargo build --release --quiet
agentsim=target/release/agentsim

if [ ! -d "$peers/aimock/node_modules/@copilotkit/aimock" ]; then
  echo "== installing aimock $AIMOCK_VERSION"
  (cd "$peers/aimock" && npm install --silent --no-audit --no-fund "@copilotkit/aimock@$AIMOCK_VERSION")
fi
cp benches/mock-llm/aimock.mjs "$peers/aimock/server.mjs"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Starts "$@" and waits (bounded) until PORT answers.
start() {
  local port=$1; shift
  "$@" > "$peers/$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "the server on port $port did not start:" >&2
  cat "$peers/$port.log" >&2
  exit 1
}

start 4010 node "$peers/aimock/server.mjs" 4010
echo "== agentsim against aimock $AIMOCK_VERSION"
"$agentsim" bench mock-llm --seconds "$seconds" --connections "$connections" \
  --against aimock=http://127.0.0.1:4010

if [ "$vidaimock" = yes ]; then
  if [ ! -x "$peers/vidaimock/bin/vidaimock" ]; then
    echo "== building vidaimock $VIDAIMOCK_VERSION (several minutes)"
    cargo install --quiet --locked --root "$peers/vidaimock" "vidaimock@$VIDAIMOCK_VERSION"
  fi
  start 4020 "$peers/vidaimock/bin/vidaimock" --host 127.0.0.1 --port 4020 --mode benchmark \
    --config-dir benches/mock-llm/vidaimock
  # VidaiMock paces every stream (at least 20 ms a piece), so only plain requests compare.
  echo "== agentsim against vidaimock $VIDAIMOCK_VERSION (plain requests)"
  "$agentsim" bench mock-llm --seconds "$seconds" --connections "$connections" --stream no \
    --against vidaimock=http://127.0.0.1:4020
fi
