"""agentmath: build, train and evaluate tool-integrated math reasoning agents.

Importing the package is cheap: heavy parts (torch, vLLM, Ray) live in submodules that are
imported only when used.
"""

__version__ = "0.1.0"
