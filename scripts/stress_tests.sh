#!/usr/bin/env bash
# Run the client contract suite and the TLS and WebSocket tests RUNS times in a row
# while BURNERS busy loops hold the CPU, stopping at the first failure (a test that
# fails under load is a defect to find, never a retry). Usage:
#   scripts/stress_tests.sh [RUNS]        (RUNS defaults to 10; BURNERS to 2)
# Extra pytest arguments go in PYTEST_ARGS (e.g. PYTEST_ARGS="-n 2").
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
BURNERS=${BURNERS:-2}
PY=${PY:-.venv/bin/python}
FILES=(
    tests/integration/test_client_api.py
    tests/integration/test_client_tls_threads.py
    tests/integration/test_tls.py
    tests/integration/test_tls_accept.py
    tests/integration/test_tls_certs.py
    tests/integration/test_tls_handover.py
    tests/integration/test_tls_browser.py
    tests/integration/test_stomp_websocket.py
    tests/integration/test_websocket_origin.py
)

pids=()
stop_burners() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_burners EXIT
for _ in $(seq "$BURNERS"); do
    "$PY" -c 'while 1: pass' &
    pids+=($!)
done

for run in $(seq "$RUNS"); do
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! "$PY" -m pytest -q ${PYTEST_ARGS:-} "${FILES[@]}"; then
        echo "stress: run $run of $RUNS FAILED (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        exit 1
    fi
    echo "stress: run $run of $RUNS passed in $(($(date +%s) - start)) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "stress: all $RUNS runs passed under $BURNERS CPU burners"
