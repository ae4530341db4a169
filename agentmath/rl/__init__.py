"""Agentic GRPO: rewards, losses, rollouts and the training loop (issue 10)."""
