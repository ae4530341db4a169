"""The inference backends by name: the one place that maps ``--backend NAME`` (the CLI, an
eval or synth config, a Ray worker, the RL trainer's servers) to a :class:`Backend`.

Adding a backend: write its module here in ``backends/``, give it a factory below (a function
of :class:`BackendSettings` that imports the module when called, so that naming the registry
costs nothing), and add one line to :data:`BACKENDS`. Configs that name a backend type the field
as :data:`BackendName` (checked against the registry), so every command accepts the new name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator

from agentmath.backends.base import Backend
from agentmath.config import VLLMEngineConfig

if TYPE_CHECKING:
    from agentmath.backends.routing import RouterConfig


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """What a run tells its backend; each factory reads the settings it needs and ignores the
    rest (a local model has no URL, no HTTP retries). ``None``: the backend's own default.
    Picklable: a :class:`~agentmath.distributed.worker.WorkerSpec` carries it to Ray workers."""

    model: str  # a served model name (a server backend) or a path (a local one)
    base_url: str | Sequence[str] | None = None  # one server, or several (a router over them)
    api_key: str | None = None
    timeout_s: float | None = None  # one HTTP request
    max_retries: int | None = None  # of a failed HTTP request
    max_concurrency: int | None = None  # HTTP requests in flight to one server
    #: How long requests wait for an unreachable server (every server, behind a router) to
    #: answer again before they fail; 0 or None: not at all (backends/outage.py).
    max_outage_s: float | None = None
    #: Routing, spill and probing of the router over several URLs (None: its defaults).
    router: RouterConfig | None = None
    #: Where a model in this process runs ('cpu', 'cuda', 'cuda:N'); None or 'auto': cuda
    #: when there is one. A server backend ignores it.
    device: str | None = None
    #: The offline vLLM engine's settings (tensor parallelism, max_model_len, dtype, ...);
    #: None: vLLM's defaults. Only the vllm backend reads them.
    vllm: VLLMEngineConfig | None = None

    def http_options(self) -> dict[str, Any]:
        """The HTTP settings that were given, as keyword arguments of an HTTP backend."""
        options = {"api_key": self.api_key, "timeout_s": self.timeout_s,
                   "max_retries": self.max_retries, "max_concurrency": self.max_concurrency,
                   "max_outage_s": self.max_outage_s}
        return {k: v for k, v in options.items() if v is not None}


BackendFactory = Callable[[BackendSettings], Backend]


def _openai(settings: BackendSettings) -> Backend:
    """Any OpenAI-compatible server; several URLs give a
    :class:`~agentmath.backends.router.Router` over one server backend per URL (a malformed or
    duplicate URL is a ConfigError naming it)."""
    base_url = settings.base_url
    urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
    if not urls:
        raise ValueError("the openai backend needs --base-url (e.g. http://127.0.0.1:8000)")
    if len(urls) > 1:
        from agentmath.backends.router import Router

        return Router.from_urls(urls, settings.model, settings.router,
                                **settings.http_options())
    from agentmath.backends.openai import OpenAIBackend

    return OpenAIBackend(urls[0], settings.model, **settings.http_options())


def _hf(settings: BackendSettings) -> Backend:
    """A local transformers model (a path or hub id), generating in process."""
    from agentmath.backends.hf import HFBackend

    device = None if settings.device in (None, "auto") else settings.device
    return HFBackend(settings.model, device=device)


def _vllm(settings: BackendSettings) -> Backend:
    """vLLM's offline engine over a local model path, with the run's engine settings."""
    from agentmath.backends.vllm_engine import VLLMBackend, engine_args

    return VLLMBackend(settings.model, **engine_args(settings.vllm))


#: Backend name -> factory. One line per backend.
BACKENDS: dict[str, BackendFactory] = {
    "openai": _openai,
    "hf": _hf,
    "vllm": _vllm,
}


def check_backend(name: str) -> str:
    """``name`` if it is a registered backend; ValueError naming the choices otherwise (a
    config's validator, so that a wrong name fails when the config is read)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


#: A config field that names a backend: a str checked against the registry when read.
BackendName = Annotated[str, AfterValidator(check_backend)]


def build_backend(kind: str, settings: BackendSettings) -> Backend:
    """Build the backend registered as ``kind`` from ``settings`` (how a run's composition,
    or a Ray worker handed a :class:`~agentmath.distributed.worker.WorkerSpec`, opens one)."""
    return BACKENDS[check_backend(kind)](settings)


def make_backend(kind: str, model: str, *, base_url: str | Sequence[str] | None = None,
                 **settings: Any) -> Backend:
    """Build the backend registered as ``kind``. ``model`` is a served model name (openai) or
    a path (hf, vllm); ``settings`` are the other :class:`BackendSettings` fields (a name that
    is none of them is a TypeError)."""
    return build_backend(kind, BackendSettings(model, base_url, **settings))
