"""Training of tool-integrated math agents: supervised fine-tuning (``agentmath.train.sft``).

Importing this package is cheap: torch, transformers and peft are imported by the functions
that need them (install them with ``pip install 'agentmath[train]'``).
"""
