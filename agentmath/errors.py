"""Typed errors raised at agentmath's boundaries.

Code that calls into agentmath catches these instead of bare exceptions. Inside a rollout, a
failure of the sandbox or the model becomes data on the trajectory; these errors are for the
places where there is no trajectory to record it on (start-up, configuration, bad input).
"""

from __future__ import annotations


class AgentMathError(Exception):
    """Base class of every error agentmath raises on purpose."""


class ConfigError(AgentMathError, ValueError):
    """A configuration file, field or override is invalid; the message names which."""


class SandboxError(AgentMathError):
    """The sandbox itself failed (could not start, protocol broken, closed).

    Errors *in the user's code* are not SandboxErrors: they are reported in the result.
    """


class BackendError(AgentMathError):
    """A generation backend failed (unreachable server, bad response, missing extra)."""


class StartupCheckError(BackendError):
    """What a command needs before its first sample is not there (the server does not answer
    or serve the model, the model directory or its chat template is missing); the message
    names the URL, path or model. The CLI exits 1 with it (agentmath/backends/preflight.py)."""


class RequestRejected(BackendError):
    """The server refused the request itself (HTTP 400, 413, 422...: a prompt too long, a
    token id out of vocabulary): sending it to another server would fail the same way, so a
    router re-raises it instead of taking the server out of rotation."""


class GradingError(AgentMathError):
    """An answer could not be graded (verifier crashed or timed out where that is fatal)."""


class DataError(AgentMathError, ValueError):
    """A dataset file or row is malformed; the message names file, line and field."""


class MissingExtraError(AgentMathError, ImportError):
    """An optional dependency is not installed; the message says which extra to install."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module!r} is not installed; install it with: pip install 'agentmath[{extra}]'"
        )
        self.module = module
        self.extra = extra


class ClusterError(AgentMathError):
    """The Ray cluster cannot run the work (no worker could start, or all of them died)."""


class ServerTimeout(BackendError):
    """A server took a request and gave no answer within its timeout (a hung or overloaded
    server): ``url`` names the server's endpoint, ``timeout_s`` the limit (the backend's
    ``timeout_s``, ``http_timeout_s`` in eval and RL configs). A router fails it over."""

    def __init__(self, message: str, *, url: str = "", timeout_s: float = 0.0) -> None:
        super().__init__(message)
        self.url = url
        self.timeout_s = timeout_s

    def __reduce__(self) -> tuple[object, ...]:  # keeps url and timeout_s across processes
        return (_server_timeout, (str(self), self.url, self.timeout_s))


def _server_timeout(message: str, url: str, timeout_s: float) -> ServerTimeout:
    return ServerTimeout(message, url=url, timeout_s=timeout_s)
