"""agentmath's command-line interface (``agentmath``; see :mod:`agentmath.cli.main`)."""
