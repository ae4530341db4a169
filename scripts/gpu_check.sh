#!/usr/bin/env bash
# The checks that need a CUDA GPU, in priority order, within one time budget:
#   1. pytest -m gpu (tests/integration/test_cuda.py), the generator's tests, the precision
#      tests and the sharded (FSDP) SFT trainer in bf16 on the GPU, in one process (a cuda
#      bf16 run followed by cpu and fp32 ones); then the SFT recipes' tiny runs on cuda (bf16);
#   2. the whole demo on the GPU (fp32: bf16 weakens its start): benchmarks/demo_seeds.py over
#      seeds 0-2 at once where the machine shows >= 6 CPUs, else `agentmath demo` for seed 0;
#   3. benchmarks/generator.py --device cuda: the continuous generator beside model.generate;
#   4. benchmarks/device_steps.py: the demo's SFT and GRPO steps on cuda bf16 / cuda fp32 / cpu,
#      from the demo's tool model of step 2 (START_MODEL to name another).
# Usage: scripts/gpu_check.sh OUT_DIR [SECONDS]   (default 540). Each step gets what is left of
# the budget (a step cut off by it says so in its log); at most 8 files land in OUT_DIR.
# Run from the repository root with the package importable (installed, or on PYTHONPATH).
set -u
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [SECONDS]}
budget=${2:-540}
mkdir -p "$out"
deadline=$(( $(date +%s) + budget ))
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

step() {  # step NAME MAX_SECONDS COMMAND...: run with min(MAX, what is left), log to OUT/NAME.log
    local name=$1 max=$2; shift 2
    local left=$(( deadline - $(date +%s) ))
    (( left < max )) && max=$left
    if (( max < 20 )); then echo "== $name: skipped, $left s left" | tee -a "$out/steps.log"; return; fi
    local t0=$(date +%s)
    timeout "$max" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s (limit $max s)" | tee -a "$out/steps.log"
    tail -n 25 "$out/$name.log"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  "$py" -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } \
    | tee -a "$out/steps.log"
step pytest_gpu 200 "$py" -m pytest -q -p no:cacheprovider tests/integration/test_cuda.py \
    tests/integration/test_hf_continuous.py tests/integration/test_rl_precision.py \
    tests/integration/test_sft_fsdp.py::test_sharded_bf16_sft_on_one_gpu
# the SFT recipes' tiny runs (configs/sft: full, LoRA, Qwen3-MoE LoRA) on cuda in their bf16;
# the eval, synth and RL recipes need a vLLM server, which the lent machines do not have
step recipes_cuda 90 env AGENTMATH_RECIPE_DEVICE=cuda "$py" -m pytest -q -p no:cacheprovider \
    tests/integration/test_recipes_eval.py -k sft_recipe
if (( $(nproc) >= 6 )); then  # each seed its own demo process (two threads each), one GPU
    step demo_cuda 300 bash -c "'$py' benchmarks/demo_seeds.py --seeds 0 1 2 --device cuda \
        --parallel 3 --out /tmp/demo-seeds --json > '$out/demo_seeds.json'"
    tool_model=/tmp/demo-seeds/seed-0/model-tool/final
else
    step demo_cuda 300 "$py" -m agentmath.cli demo --device cuda --out /tmp/demo-cuda \
        --no-save-model --json
    tool_model=/tmp/demo-cuda/model-tool/final
fi
step generator_cuda 60 "$py" benchmarks/generator.py --device cuda --repeats 1
step device_steps 230 "$py" benchmarks/device_steps.py --sft-steps 40 --rl-steps 4 \
    --model "${START_MODEL:-$tool_model}" --out /tmp/bench-device-steps \
    --json-out "$out/device_steps.json"
cat "$out/steps.log"
