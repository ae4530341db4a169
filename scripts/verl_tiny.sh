#!/usr/bin/env bash
# One tiny verl training step of a configs/verl recipe: the recipe's trainer YAML, agent-loop
# YAML and router, on the random-weight Qwen3-like test model, with only the sizes swapped (one
# prompt of two samples, one step, short contexts, one GPU). GPU only: verl 0.9.1 does not train
# on a CPU (docs/verl.md, "What runs on a CPU"); the CPU suite runs each recipe up to one
# agent-loop episode (tests/verl/test_recipes.py).
#
#   bash scripts/verl_tiny.sh deepmath_like|agentmath_like [VERL_PYTHON]
#
# VERL_PYTHON (default .venv-verl/bin/python) must have verl 0.9.1 with its GPU stack: vLLM
# (verl pins 0.24) and TransferQueue (the verl-core extra; the default V1 trainer imports it),
# and agentmath importable. The main venv (.venv) builds the test model.
set -euo pipefail
recipe=${1:?usage: scripts/verl_tiny.sh deepmath_like|agentmath_like [VERL_PYTHON]}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${2:-$root/.venv-verl/bin/python}
case $recipe in
  deepmath_like) loop=agent_loop_deepmath.yaml ;;
  agentmath_like) loop=agent_loop_agentmath.yaml ;;
  *) echo "unknown recipe $recipe (deepmath_like, agentmath_like)" >&2; exit 2 ;;
esac
work=$(mktemp -d /tmp/verl-tiny.XXXXXX)
cd "$root"
model=$(PYTHONPATH=$root .venv/bin/python -c \
  'from tests.fixtures.qwen3_like import qwen3_like_dir; print(qwen3_like_dir())')
printf '%s\n' '{"id": "p0", "problem": "What is 17 * 23?", "answer": "391"}' \
  '{"id": "p1", "problem": "What is 2**10 - 24?", "answer": "1000"}' > "$work/train.jsonl"
PYTHONPATH=$root "$py" -m agentmath.verl.data --dataset "$work/train.jsonl" \
  --out "$work/train.parquet"
cd "$work"  # verl resolves relative paths against each Ray worker's directory: all absolute
PYTHONPATH=$root "$py" -m verl.trainer.main_ppo --config-path="$root/configs/verl" \
  --config-name="$recipe" \
  actor_rollout_ref.model.path="$model" \
  data.train_files="$work/train.parquet" data.val_files="$work/train.parquet" \
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$root/configs/verl/$loop" \
  actor_rollout_ref.rollout.router_config_path="$root/configs/verl/router.yaml" \
  data.train_batch_size=1 actor_rollout_ref.rollout.n=2 \
  actor_rollout_ref.actor.ppo_mini_batch_size=1 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
  data.max_prompt_length=512 data.max_response_length=256 \
  actor_rollout_ref.rollout.agent.num_workers=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=1 \
  trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \
  trainer.default_local_dir="$work/ckpt" "trainer.logger=[console]"
echo "== verl tiny run of $recipe done ($work)"
