#!/usr/bin/env bash
# Why is a GRPO step's rollout slower on a GPU than on one CPU thread? The demo's GRPO steps
# (benchmarks/device_steps.py, one row per process) on cuda bf16 under a stack sampler (py-spy
# where ptrace is allowed, else scripts/stack_sampler.py), then cuda fp32 without one.
# Usage: scripts/gpu_profile.sh OUT_DIR [START_MODEL] [RL_STEPS]
set -u
out=${1:?usage: scripts/gpu_profile.sh OUT_DIR [START_MODEL] [RL_STEPS]}
model=${2:-runs/demo/model-tool/final}
steps=${3:-6}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
args=(--sft-steps 8 --rl-steps "$steps" --model "$model" --out /tmp/gpu-profile)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
nproc | tee -a "$out/gpu.txt"
t0=$(date +%s)
if command -v py-spy > /dev/null && timeout 10 py-spy record -o /tmp/probe.txt -f raw -- \
        "$py" -c "import time; time.sleep(1)" > /dev/null 2>&1; then
    timeout 200 py-spy record -r 100 --threads --idle -f raw -o "$out/bf16_stacks.txt" -- \
        "$py" benchmarks/device_steps.py --only "cuda bf16" "${args[@]}" > "$out/bf16.log" 2>&1
else
    timeout 200 "$py" scripts/stack_sampler.py "$out/bf16_stacks.txt" -- \
        benchmarks/device_steps.py --only "cuda bf16" "${args[@]}" > "$out/bf16.log" 2>&1
fi
echo "== cuda bf16 (profiled): rc=$? in $(( $(date +%s) - t0 )) s"; tail -n 3 "$out/bf16.log"
t0=$(date +%s)
timeout 150 "$py" benchmarks/device_steps.py --only "cuda fp32" "${args[@]}" > "$out/fp32.log" 2>&1
echo "== cuda fp32: rc=$? in $(( $(date +%s) - t0 )) s"; tail -n 3 "$out/fp32.log"
