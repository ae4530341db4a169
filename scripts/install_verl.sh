#!/usr/bin/env bash
# Install verl (the RL engine agentmath's verl agent loop and router plug in to) into its own
# virtualenv, .venv-verl/, for tests/verl and for running agentmath inside verl.
#
# verl 0.9.1 pins transformers >=5.5.3,<5.11 (and tensordict <=0.10), while the main .venv has
# a newer transformers, so verl cannot live in the main venv. To stay light, .venv-verl does not
# reinstall what it shares with the main venv (torch, numpy, agentmath's own dependencies and
# agentmath itself, editable): a .pth file makes the main venv's site-packages visible AFTER
# .venv-verl's own, so only verl, its extra dependencies and the versions verl pins differently
# (transformers, ...) are installed here, and they shadow the main venv's. pip sees the main
# venv's packages as installed and never touches them ("Not uninstalling ..., outside
# environment"); it installs the pinned versions into .venv-verl instead.
#
# Requires the main .venv (scripts/test.sh creates it first). Idempotent: a second run with a
# working install only re-checks it.
# verl's base requirements miss two modules its agent loop imports (cachetools, fastapi: they are
# in its heavy verl-core extra, with CUDA-only packages), so they are installed by name.
# Environment: PYTHON (interpreter for the venv, default python3), VERL_SPEC (pip spec, default
# verl==0.9.1), VENV (default .venv-verl), MAIN_VENV (default .venv), in the repository root.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv-verl}"
MAIN_VENV="${MAIN_VENV:-.venv}"
SPEC="${VERL_SPEC:-verl==0.9.1}"
EXTRA=(cachetools fastapi)

[[ -x "$MAIN_VENV/bin/python" ]] || {
  echo "== $MAIN_VENV is missing: create it first (bash scripts/test.sh does)" >&2; exit 1; }

check() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import sys

import agentmath
import transformers
import verl
from verl.experimental.agent_loop.agent_loop import AgentLoopBase  # noqa: F401
from verl.workers.rollout.router import RequestLoadBalancer  # noqa: F401

sys.stdout.write(f"verl {verl.__version__}, transformers {transformers.__version__}")
PY
}

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"

# The main venv's site-packages, processed as a site dir (its own .pth files too: agentmath's
# editable install) and appended after .venv-verl's site-packages, so .venv-verl's packages win.
main_site="$("$MAIN_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
verl_site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
pth="$verl_site/zz_agentmath_main_venv.pth"
line="import site; site.addsitedir('$main_site')"
if [[ ! -f "$pth" ]] || [[ "$(cat "$pth")" != "$line" ]]; then
  printf '%s\n' "$line" >"$pth"
  echo "== $pth: the main venv's packages ($main_site) are visible after .venv-verl's own"
fi

if version="$(check)"; then
  echo "== already installed in $VENV: $version"
else
  echo "== installing $SPEC into $VENV (only what the main venv lacks or verl pins differently)"
  "$VENV/bin/python" -m pip install -q "$SPEC" "${EXTRA[@]}" 2>&1 \
    | { grep -v "^WARNING: Location 'file:" || true; }
  version="$(check)" || {
    echo "== verl does not import in $VENV:" >&2
    "$VENV/bin/python" -c 'import verl.experimental.agent_loop.agent_loop' 2>&1 | tail -n 15 >&2
    exit 1
  }
fi
echo "== $version ready: $VENV/bin/python"
