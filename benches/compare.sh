#!/usr/bin/env bash
# Every figure and ratio of docs/performance.md, measured again in one run: turn throughput of
# W1..W6 with the observer on and off (and instructions per turn under callgrind when valgrind is
# installed), agentsim mock-llm's requests per second and CPU time per request beside aimock's and
# VidaiMock's (each peer installed under target/bench-peers/ at a pinned version, started on
# loopback and measured by the same load generator right after agentsim), `agentsim serve`, and
# what a run against an outside runtime costs. A peer or runtime that cannot be installed or found
# is reported as skipped, with why; nothing is estimated in its place.
#
# Usage: benches/compare.sh [--quick] [--out DIR]
#        benches/compare.sh --from DIR      (print the report of an earlier run's DIR again)
#   --quick   short measurements (a few minutes on 2 cores); VidaiMock only if already built
#   full      (the default) the durations of docs/performance.md, VidaiMock built if missing
#             (cargo install, several minutes)
# The measurements go to DIR (default target/compare/), one JSON file each; benches/compare.py
# reads them and prints the report. Not run in CI: speed is measured, never asserted by a test.
set -euo pipefail
cd "$(dirname "$0")/.."

AIMOCK_VERSION=1.43.0
VIDAIMOCK_VERSION=0.3.1
mode=full
out=target/compare
from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --from) from="${2:?--from needs a directory}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -n "$from" ]; then
  exec python3 benches/compare.py "$from"
fi

if [ "$mode" = quick ]; then
  turn_seconds=0.3; turn_repeat=1; callgrind_seconds=1
  mock_seconds=1; mock_connections=64
  serve_seconds=2; serve_clients=(16)
  runtime_seconds=2
else
  turn_seconds=1.5; turn_repeat=5; callgrind_seconds=3
  mock_seconds=5; mock_connections=64
  serve_seconds=10; serve_clients=(16 64)
  runtime_seconds=10
fi

rm -rf "$out"
mkdir -p "$out/skipped"
peers=target/bench-peers
mkdir -p "$peers"
skip() { # NAME REASON...
  local name=$1; shift
  echo "$*" > "$out/skipped/$name"
  echo "   skipped $name: $*"
}

echo "== building agentsim (release)"
cargo build --release --quiet
agentsim=target/release/agentsim
{
  echo "mode=$mode"
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+changes')"
  echo "cpus=$(nproc)"
} > "$out/meta.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Starts "$@" in the background, waits (bounded) until PORT answers and sets `started` to its
# pid; returns 1 (with the server's log) when it does not answer in 10 s.
started=""
start() {
  local port=$1; shift
  "$@" > "$out/server-$port.log" 2>&1 &
  started=$!
  pids+=("$started")
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

echo "== turn throughput: W1..W6, observer on and off ($turn_seconds s, $turn_repeat repetition(s))"
"$agentsim" bench --seconds "$turn_seconds" --repeat "$turn_repeat" --json > "$out/turns.json"

if command -v valgrind >/dev/null 2>&1; then
  echo "== instructions per turn (callgrind, inside the timed region, ${callgrind_seconds} s each)"
  for w in w1 w2 w3 w4 w5 w6; do
    for obs in on off; do
      valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        --toggle-collect='agentsim::workloads::Prepared::run' \
        "$agentsim" bench --workload "$w" --observer "$obs" --json \
        --seconds "$callgrind_seconds" > "$out/callgrind-$w-$obs.json" 2> "$out/callgrind-$w-$obs.log"
    done
  done
else
  skip callgrind "valgrind is not installed (apt-get install valgrind): instructions per turn not counted"
fi

echo "== mock-llm: agentsim and its peers, ${mock_seconds} s per server and mode"
aimock_url=""
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip aimock "node and npm are not installed"
else
  if [ ! -d "$peers/aimock/node_modules/@copilotkit/aimock" ]; then
    echo "   installing aimock $AIMOCK_VERSION"
    mkdir -p "$peers/aimock"
    if ! (cd "$peers/aimock" && npm install --silent --no-audit --no-fund "@copilotkit/aimock@$AIMOCK_VERSION") \
      > "$out/aimock-install.log" 2>&1; then
      skip aimock "npm install @copilotkit/aimock@$AIMOCK_VERSION failed: $(tail -n 3 "$out/aimock-install.log" | tr '\n' ' ')"
    fi
  fi
  if [ ! -e "$out/skipped/aimock" ]; then
    cp benches/mock-llm/aimock.mjs "$peers/aimock/server.mjs"
    if start 4010 node "$peers/aimock/server.mjs" 4010; then
      aimock_url=http://127.0.0.1:4010
      aimock_pid=$started
    else
      skip aimock "it did not answer on port 4010: $(tail -n 3 "$out/server-4010.log" | tr '\n' ' ')"
    fi
  fi
fi
if [ -n "$aimock_url" ]; then
  echo "   agentsim against aimock $AIMOCK_VERSION"
  "$agentsim" bench mock-llm --seconds "$mock_seconds" --connections "$mock_connections" \
    --against "aimock=$aimock_url" --against-pid "aimock=$aimock_pid" --json > "$out/mock-aimock.json"
else
  echo "   agentsim alone"
  "$agentsim" bench mock-llm --seconds "$mock_seconds" --connections "$mock_connections" \
    --json > "$out/mock-agentsim.json"
fi

vidaimock=$peers/vidaimock/bin/vidaimock
if [ ! -x "$vidaimock" ]; then
  if [ "$mode" = quick ]; then
    skip vidaimock "not built yet, and building it takes several minutes: run benches/compare.sh without --quick once"
  elif ! command -v cargo >/dev/null 2>&1; then
    skip vidaimock "cargo is not installed"
  else
    echo "   building vidaimock $VIDAIMOCK_VERSION (several minutes)"
    if ! cargo install --quiet --locked --root "$peers/vidaimock" "vidaimock@$VIDAIMOCK_VERSION" \
      > "$out/vidaimock-install.log" 2>&1; then
      skip vidaimock "cargo install vidaimock@$VIDAIMOCK_VERSION failed: $(tail -n 3 "$out/vidaimock-install.log" | tr '\n' ' ')"
    fi
  fi
fi
if [ -x "$vidaimock" ] && [ ! -e "$out/skipped/vidaimock" ]; then
  if start 4020 "$vidaimock" --host 127.0.0.1 --port 4020 --mode benchmark \
    --config-dir benches/mock-llm/vidaimock; then
    # VidaiMock paces every stream (at least 20 ms a piece), so only plain requests compare.
    echo "   agentsim against vidaimock $VIDAIMOCK_VERSION (plain requests)"
    "$agentsim" bench mock-llm --seconds "$mock_seconds" --connections "$mock_connections" \
      --stream no --against vidaimock=http://127.0.0.1:4020 --against-pid "vidaimock=$started" \
      --json > "$out/mock-vidaimock.json"
  else
    skip vidaimock "it did not answer on port 4020: $(tail -n 3 "$out/server-4020.log" | tr '\n' ' ')"
  fi
fi
cleanup
pids=()

echo "== serve: the async-session flow, ${serve_seconds} s per client count"
for c in "${serve_clients[@]}"; do
  "$agentsim" bench serve --connections "$c" --seconds "$serve_seconds" --json > "$out/serve-$c.json"
done

echo "== a run against an outside runtime, ${runtime_seconds} s each"
if ! command -v python3 >/dev/null 2>&1; then
  skip runtime "python3 is not installed (the built-in runtime is a Python script)"
else
  "$agentsim" bench runtime --seconds "$runtime_seconds" --json > "$out/runtime.json"
  "$agentsim" bench runtime --workload w1 --seconds "$runtime_seconds" --json > "$out/runtime-stdlib.json"
  if [ -x target/proto-venv/bin/python ] \
    && target/proto-venv/bin/python -c 'import anthropic, agentsim_runtime' 2>/dev/null; then
    "$agentsim" bench runtime --workload w1 --workload w2 --seconds "$runtime_seconds" --json \
      --runtime "target/proto-venv/bin/python examples/runtimes/python/runtime.py" \
      > "$out/runtime-python.json"
  else
    skip runtime-python "no target/proto-venv with the anthropic SDK and agentsim_runtime (python3 -m venv target/proto-venv && target/proto-venv/bin/pip install -r examples/runtimes/python/requirements.txt ./clients/python)"
  fi
fi
if [ -f examples/runtimes/typescript/dist/runtime.js ] && command -v node >/dev/null 2>&1; then
  "$agentsim" bench runtime --workload w1 --workload w2 --seconds "$runtime_seconds" --json \
    --runtime "node examples/runtimes/typescript/dist/runtime.js" > "$out/runtime-typescript.json"
else
  skip runtime-typescript "examples/runtimes/typescript is not built (npm ci && npm run build there)"
fi

echo "took=${SECONDS}s" >> "$out/meta.txt"
echo
python3 benches/compare.py "$out"
