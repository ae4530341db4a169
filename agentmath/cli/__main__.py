"""``python -m agentmath.cli``: the same as the ``agentmath`` console script."""

from agentmath.cli.main import app

app(prog_name="agentmath")
