"""Startup checks: before a command sends its first sample, is what it needs there?

Every command that runs a model (``eval``, ``solve``, ``synth``'s teacher and judge, ``rl``'s
model and generator servers, ``sft``'s model) calls these first, so that an unreachable
server, a missing model or a tokenizer without a chat template is one clear message within
seconds, not a run of failed samples after minutes of retries (an outage gate waits up to
``max_outage_s`` for a server that was up and went away; one that never answered is not an
outage). Each check raises :class:`~agentmath.errors.StartupCheckError` naming the thing (the
URL, the directory, the model's name); the CLI exits 1 with its message.

* :func:`check_server`: the server answers (``GET /v1/models``, else ``GET /health``), serves
  the model by that name when it lists its models, and renders a chat (``POST /tokenize``
  with one message, where the server has that route: vLLM's fails without a chat template).
* :func:`check_model_dir`: a local model directory exists, its ``config.json`` and tokenizer
  files read, and its tokenizer has a chat template (one that takes ``tools`` when the run
  sends them). Read as files, without importing transformers (seconds on a busy machine).
* :func:`check_hub_model`: a name that is no directory: a hub id found in the local Hugging
  Face cache passes; otherwise the hub must answer for it within the probe's timeout (an
  offline machine fails at once, not after a minute of the hub client's retries).
* :func:`check_backend`: the checks a backend built from :class:`BackendSettings` needs (of
  several servers behind a router, one that does not answer is a note while another does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from agentmath.backends.registry import BackendSettings
from agentmath.errors import StartupCheckError
from agentmath.models.local import model_dir_problem

__all__ = ["PROBE_TIMEOUT_S", "Unreachable", "check_backend", "check_hub_model", "check_model_dir",
           "check_server", "template_problem"]

#: Time limit of each probe request, in seconds: a few requests stay well under 10 s.
PROBE_TIMEOUT_S = 3.0
#: Where a tokenizer's chat template may be saved (transformers: in the config, or beside it).
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_PROBE_MESSAGES = [{"role": "user", "content": "What is 1 + 1?"}]


def _root(url: str) -> str:
    """A server's root URL: no trailing ``/`` or ``/v1`` (as the openai backend names it)."""
    return url.rstrip("/").removesuffix("/v1")


class Unreachable(StartupCheckError):
    """The server gave no answer at all (refused, unresolvable, silent): of several servers
    behind a router, the others may serve the run."""


def _get(client: httpx.Client, url: str) -> httpx.Response:
    """The server's answer to ``GET url``; :class:`Unreachable` when none comes."""
    try:
        return client.get(url)
    except httpx.TimeoutException:
        raise Unreachable(f"the model server at {url} gave no answer within "
                          f"{client.timeout.read:g} s") from None
    except httpx.HTTPError as exc:
        raise Unreachable(f"cannot reach the model server at {url}: "
                          f"{type(exc).__name__}: {exc or 'no connection'} "
                          "(is it started? is the URL right?)") from None


def served_models(body: Any) -> list[str] | None:
    """The model ids of a ``/v1/models`` body (None: not an OpenAI model list)."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id") is not None]


def _models(client: httpx.Client, root: str) -> list[str] | None:
    """The models the server lists (None: it has no list, but answers ``/health``)."""
    reply = _get(client, f"{root}/v1/models")
    if reply.status_code == 200:
        try:
            listed = served_models(reply.json())
        except ValueError:
            listed = None
        if listed is not None:
            return listed
    if reply.status_code in (401, 403):
        raise StartupCheckError(f"the model server at {root} refused the request (HTTP "
                                f"{reply.status_code}): check the API key")
    return None  # an answer, though no list (a server without /v1/models): it is up


def _chat_renders(client: httpx.Client, root: str, model: str) -> None:
    """``POST /tokenize`` with one chat message: vLLM answers 400 naming the chat template
    when the model has none. A server without the route (404, 405, 501) is not asked more."""
    try:
        reply = client.post(f"{root}/tokenize", json={
            "model": model, "messages": _PROBE_MESSAGES, "add_generation_prompt": True})
    except httpx.HTTPError:
        return  # it answered /v1/models a moment ago; the run reports what follows
    if reply.status_code == 400 and "template" in reply.text.lower():
        raise StartupCheckError(f"the model server at {root} cannot render a chat for "
                                f"{model!r} (no chat template): {reply.text[:300]}")


def check_server(url: str, model: str, *, api_key: str | None = None,
                 timeout_s: float = PROBE_TIMEOUT_S, chat: bool = True) -> None:
    """The server at ``url`` answers, serves ``model`` (when it lists its models) and, with
    ``chat``, renders a chat for it; StartupCheckError naming the URL and the model if not."""
    root = _root(url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        listed = _models(client, root)
        if listed is not None and model not in listed:
            names = ", ".join(repr(m) for m in listed[:10]) or "none"
            raise StartupCheckError(f"the model server at {root} does not serve {model!r} "
                                    f"(it serves {names}): pass one of those as the model")
        if chat:
            _chat_renders(client, root, model)


def _json_file(path: Path) -> Any:
    """A JSON file's content; StartupCheckError naming it when it does not read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise StartupCheckError(f"{path}: does not read as JSON ({exc})") from None


def chat_template(directory: Path) -> str | None:
    """The chat template saved with a tokenizer in ``directory`` (its config's
    ``chat_template``, a string or named templates, or a template file), None when none."""
    config_path = directory / "tokenizer_config.json"
    found: Any = _json_file(config_path).get("chat_template") if config_path.is_file() else None
    if found is None and (directory / TEMPLATE_FILES[0]).is_file():
        found = (directory / TEMPLATE_FILES[0]).read_text(encoding="utf-8")
    if found is None and (directory / TEMPLATE_FILES[1]).is_file():
        found = _json_file(directory / TEMPLATE_FILES[1]).get("chat_template")
    if isinstance(found, list):  # named templates: [{"name": ..., "template": ...}]
        found = "\n".join(str(t.get("template", "")) for t in found if isinstance(t, dict))
    return found if isinstance(found, str) and found.strip() else None


def template_problem(template: str | None, *, needs_tools: bool = False) -> str | None:
    """What is wrong with a chat template for a run: none at all, or (``needs_tools``: native
    tool calls are sent as ``tools``) one that never reads ``tools``; None when it will do."""
    if template is None:
        return "its tokenizer has no chat template (agentmath renders every prompt with one)"
    if needs_tools and "tools" not in template:
        return "its chat template does not take tools (the native tool-call format needs one)"
    return None


def check_model_dir(model: str | Path, *, needs_tools: bool = False,
                    template: bool = True) -> None:
    """``model`` is a local model directory whose config and tokenizer read and whose
    tokenizer has a chat template the run can use (``template=False``: not asked);
    StartupCheckError naming the directory and what is wrong otherwise."""
    path = Path(model).expanduser()
    problem = model_dir_problem(path)
    if problem is not None:
        raise StartupCheckError(f"{model}: {problem}")
    config = _json_file(path / "config.json")
    if not isinstance(config, dict):
        raise StartupCheckError(f"{path / 'config.json'}: not a JSON object")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise StartupCheckError(f"{model}: no tokenizer in it (none of "
                                f"{', '.join(TOKENIZER_FILES)})")
    if template:
        why = template_problem(chat_template(path), needs_tools=needs_tools)
        if why is not None:
            raise StartupCheckError(f"{model}: {why}")


def check_hub_model(model: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """``model`` (not a directory) as a Hugging Face hub id: in the local cache, or the hub
    answers for it; StartupCheckError naming it otherwise (offline, no such repository)."""
    from agentmath._lazy import require

    hub = require("huggingface_hub", "train")
    where = f"{model}: no such model directory, and not in the Hugging Face cache"
    try:
        if isinstance(hub.try_to_load_from_cache(model, "config.json"), str):
            return
    except ValueError as exc:  # not a valid hub id either (HFValidationError)
        raise StartupCheckError(f"{model}: no such model directory, nor a hub id ({exc})") \
            from None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise StartupCheckError(f"{where} (HF_HUB_OFFLINE is set): pass a model directory")
    try:
        hub.HfApi().model_info(model, timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - the hub client raises many types; one message
        raise StartupCheckError(f"{where}, and the hub has no such model or cannot be "
                                f"reached ({type(exc).__name__}, {timeout_s:g} s limit): pass "
                                "a model directory, or a served model with --base-url") \
            from None


def _urls(base_url: str | Sequence[str] | None) -> list[str]:
    return [base_url] if isinstance(base_url, str) else list(base_url or [])


def check_backend(kind: str, settings: BackendSettings, *,
                  needs_tools: bool = False) -> list[str]:
    """The checks the backend ``kind`` built from ``settings`` needs: the servers of the
    openai backend (of several behind a router, those that do not answer are returned as
    notes while one does: the router serves the run on the others), or the local model of an
    in-process one (a local path as a directory, another name as a hub id)."""
    if kind == "openai":
        notes: list[str] = []
        urls = _urls(settings.base_url)
        for url in urls:
            try:
                check_server(url, settings.model, api_key=settings.api_key)
            except Unreachable as exc:
                if len(notes) + 1 == len(urls):
                    raise StartupCheckError("; ".join([*notes, str(exc)])) from None
                notes.append(str(exc))
        return notes  # no URL at all: the backend itself says so when built
    text = settings.model
    path = Path(text).expanduser()
    if path.exists() or path.is_absolute() or text.startswith((".", "~")):
        check_model_dir(path, needs_tools=needs_tools)
    else:
        check_hub_model(text)
    return []
