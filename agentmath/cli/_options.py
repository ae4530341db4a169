"""Command-line options generated from a pydantic settings model: one definition per setting.

:func:`config_options` gives a command one option per named field of its settings model
(``"samples"``, ``"loop.max_tool_calls"``): the option is named after the field
(``--max-tool-calls``; a trailing ``_s``, seconds, is left out of the name and shown as the
``SECONDS`` placeholder), its help is the field's description, its placeholder comes from the
field's type and its bounds are the field's. Every generated option defaults to None, so that
an option not given overrides nothing: the values given reach the command as one nested dict
(``{"loop": {"max_tool_calls": 4}}``) that :func:`agentmath.cli._common.build_config` merges
over the config file and ``--set``.

Typer reads a command's parameters from its signature, so the decorator wraps the command in
a :class:`GeneratedCommand` whose ``__signature__`` holds the command's own parameters with the
generated ones where its ``settings`` parameter stood, and whose call gathers the generated
values into ``settings``. The signature is made when typer first asks for it (the model may be
named as ``"package.module:Name"``), so that importing a command imports no settings model.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

#: The default of a command's ``settings`` parameter (never used: the decorator replaces the
#: parameter by the generated options).
GENERATED: Any = None

#: The offline vLLM engine's settings (agentmath.config.VLLMEngineConfig) as options, for
#: every command whose settings have a ``vllm`` section (eval, solve).
VLLM_FIELDS = tuple(f"vllm.{name}" for name in (
    "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "dtype",
    "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
    "enable_prefix_caching", "enforce_eager", "quantization", "kv_cache_dtype",
    "trust_remote_code"))

#: Placeholders by field name, where the name says more than the type.
NAMED_METAVARS = {"model": "MODEL", "dataset": "DATASET", "device": "DEVICE"}


@dataclass(frozen=True)
class GeneratedOption:
    """One option made from one field: where the field is, the parameter that receives it."""

    path: tuple[str, ...]  # the field's path in the model, e.g. ("loop", "max_tool_calls")
    param: str  # the Python parameter name, e.g. "loop__max_tool_calls"
    collapse: bool  # a ``str | list[str]`` field: one value given is passed as a string
    annotation: Any  # the parameter's type: what typer parses the value as
    option: Any  # the typer.Option


def field_at(model: type[BaseModel], path: Sequence[str]) -> FieldInfo:
    """The field of ``model`` at ``path`` (through nested models); KeyError naming the path."""
    current: Any = model
    info: FieldInfo | None = None
    for name in path:
        fields = getattr(current, "model_fields", {})
        if name not in fields:
            raise KeyError(f"{model.__name__} has no field {'.'.join(path)!r}")
        info = fields[name]
        current = _nested_model(info.annotation)
    assert info is not None
    return info


def _nested_model(annotation: Any) -> Any:
    """The model class inside an annotation (``LoopConfig``, ``RayConfig | None``), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _strip_optional(annotation: Any) -> Any:
    """``X | None`` as ``X`` (a union of several other types is kept as it is)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
    return annotation


def _value_type(annotation: Any) -> tuple[Any, bool, bool]:
    """The option's Python type for a field's annotation, whether it repeats (a list), and
    whether one value given stands for the whole field (``str | list[str]``)."""
    annotation = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        lists = [a for a in args if typing.get_origin(a) in (list, tuple)]
        if str in args and lists:
            return str, True, True
        raise TypeError(f"no option type for the field type {annotation}")
    if origin in (list, tuple):
        return _value_type(typing.get_args(annotation)[0])[0], True, False
    if origin is Literal:
        return str, False, False
    if annotation in (bool, int, float, str) or annotation is Path:
        return annotation, False, False
    raise TypeError(f"no option type for the field type {annotation}")


def metavar(name: str, annotation: Any, value_type: Any) -> str:
    """The placeholder of a field's value: an upper-case noun (N, NUMBER, SECONDS, FILE, DIR,
    URL, NAME, TEXT, or one the field's name gives: MODEL, DATASET, DEVICE)."""
    if name in NAMED_METAVARS:
        return NAMED_METAVARS[name]
    if "url" in name:
        return "URL"
    if name.endswith("_file") or value_type is Path:
        return "FILE"
    if name.endswith("_dir"):
        return "DIR"
    if value_type is int:
        return "N"
    if value_type is float:
        return "SECONDS" if name.endswith("_s") else "NUMBER"
    literal = typing.get_origin(_strip_optional(annotation)) is Literal
    if literal or name in ("format", "backend", "converter") or name.endswith(("_size", "_name")):
        return "NAME"
    return "TEXT"


def option_name(path: Sequence[str]) -> str:
    """The generated option name of a field path: its last name, kebab-case, without a
    trailing ``_s`` (``loop.tool_timeout_s`` -> ``--tool-timeout``)."""
    return "--" + path[-1].removesuffix("_s").replace("_", "-")


def _checker(info: FieldInfo, value_type: Any) -> Callable[[str], Any] | None:
    """A parser of the option's value that enforces the field's bounds or choices, so that
    click names the option of a bad value (exit 2) before any work; None when the field has
    neither."""
    literal = _strip_optional(info.annotation)
    choices = [str(c) for c in typing.get_args(literal)] if (
        typing.get_origin(literal) is Literal) else None
    checks: list[tuple[Callable[[Any], bool], str]] = []
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            checks.append((lambda v, b=item.ge: v >= b, f">= {item.ge}"))
        elif isinstance(item, annotated_types.Gt):
            checks.append((lambda v, b=item.gt: v > b, f"> {item.gt}"))
        elif isinstance(item, annotated_types.Le):
            checks.append((lambda v, b=item.le: v <= b, f"<= {item.le}"))
        elif isinstance(item, annotated_types.Lt):
            checks.append((lambda v, b=item.lt: v < b, f"< {item.lt}"))
    if choices is None and (not checks or value_type not in (int, float)):
        return None

    def parse(text: str) -> Any:
        if choices is not None:
            if text not in choices:
                raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
            return text
        try:
            value = value_type(text)
        except ValueError:
            kind = "an integer" if value_type is int else "a number"
            raise ValueError(f"{text!r} is not {kind}") from None
        failed = [bound for ok, bound in checks if not ok(value)]
        if failed:
            raise ValueError(f"{text} is out of range (must be {' and '.join(failed)})")
        return value

    return parse


def _help(info: FieldInfo, where: str) -> str:
    """The field's description, with its default when the description does not say it."""
    text = (info.description or "").strip()
    if not text:
        raise ValueError(f"{where} has no description: give the field one (it is the help)")
    if info.is_required():
        return f"{text} Required, here or in the config file."
    if "default" in text.lower() or info.default_factory is not None:
        return text
    default = info.get_default()
    if default is None or default in ((), [], ""):
        return text
    if isinstance(default, bool):
        return text
    return f"{text} [default: {default}]"


def make_option(model: type[BaseModel], dotted: str, name: str | None = None,
                short: str | None = None, meta: str | None = None) -> GeneratedOption:
    """The option of the field ``dotted`` of ``model``; ``name`` (``"--lr"``, or
    ``"--lora/--full"`` for a flag) replaces the generated name."""
    path = tuple(dotted.split("."))
    info = field_at(model, path)
    value_type, multiple, collapse = _value_type(info.annotation)
    where = f"{model.__name__}.{dotted}"
    flag = name or option_name(path)
    decls = [flag if value_type is not bool or "/" in flag else f"{flag}/--no-{flag[2:]}"]
    decls += [short] if short else []
    kwargs: dict[str, Any] = {"help": _help(info, where), "show_default": False}
    if value_type is bool:
        kwargs["metavar"] = ""  # a flag takes no value: no placeholder
    else:
        kwargs["metavar"] = meta or metavar(path[-1], info.annotation, value_type)
        checker = _checker(info, value_type)
        if checker is not None:
            kwargs["parser"] = checker
    annotation = list[value_type] if multiple else value_type  # type: ignore[valid-type]
    option = typer.Option(None, *decls, **kwargs)
    param = "__".join(path)
    return GeneratedOption(path, param, collapse, annotation, option)


def overrides(options: Sequence[GeneratedOption], values: Mapping[str, Any]) -> dict[str, Any]:
    """The nested override dict of the options given (None and empty lists: not given)."""
    out: dict[str, Any] = {}
    for opt in options:
        value = values.get(opt.param)
        if value is None or (isinstance(value, list | tuple) and not value):
            continue
        if isinstance(value, list | tuple):
            value = value[0] if opt.collapse and len(value) == 1 else list(value)
        if isinstance(value, Path):
            value = str(value)
        node = out
        for part in opt.path[:-1]:
            node = node.setdefault(part, {})
        node[opt.path[-1]] = value
    return out


def _load(model: type[BaseModel] | str) -> type[BaseModel]:
    """The model class, or the one ``"package.module:Name"`` names (imported now)."""
    if not isinstance(model, str):
        return model
    module, _, name = model.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


class GeneratedCommand:
    """A command whose options are generated from a settings model: callable like the
    function it wraps, with a ``__signature__`` (what typer reads) made when first asked for,
    so that importing the CLI imports no settings model; building the command does."""

    def __init__(self, func: Callable[..., Any], model: type[BaseModel] | str,
                 fields: Sequence[str], settings: str, names: Mapping[str, str],
                 shorts: Mapping[str, str], metavars: Mapping[str, str]) -> None:
        if settings not in inspect.signature(func).parameters:
            raise TypeError(f"{func.__name__} has no {settings!r} parameter")
        functools.update_wrapper(self, func, assigned=("__module__", "__name__",
                                                       "__qualname__", "__doc__"))
        self._func, self._model, self._fields, self._settings = func, model, fields, settings
        self._names, self._shorts, self._metavars = names, shorts, metavars

    @functools.cached_property
    def generated_options(self) -> list[GeneratedOption]:
        """One option per field, in the order the fields were named."""
        model = _load(self._model)
        return [make_option(model, f, self._names.get(f), self._shorts.get(f),
                            self._metavars.get(f)) for f in self._fields]

    @functools.cached_property
    def __signature__(self) -> inspect.Signature:  # type: ignore[override]
        """The function's parameters, the generated options where ``settings`` stood."""
        signature = inspect.signature(self._func)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name != self._settings:
                params.append(param)
                continue
            params += [inspect.Parameter(opt.param, param.kind, default=opt.option,
                                         annotation=opt.annotation)
                       for opt in self.generated_options]
        return signature.replace(parameters=params)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        """The function's annotations without ``settings``, with the generated options'."""
        own = {k: v for k, v in self._func.__annotations__.items() if k != self._settings}
        return {**own, **{opt.param: opt.annotation for opt in self.generated_options}}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        options = self.generated_options
        given = {opt.param: kwargs.pop(opt.param, None) for opt in options}
        return self._func(*args, **kwargs, **{self._settings: overrides(options, given)})


def config_options(model: type[BaseModel] | str, fields: Sequence[str], *,
                   names: Mapping[str, str] | None = None,
                   shorts: Mapping[str, str] | None = None,
                   metavars: Mapping[str, str] | None = None,
                   settings: str = "settings") -> Callable[[Callable[..., Any]],
                                                           GeneratedCommand]:
    """Decorate a command so that it takes one option per field of ``model`` (a class, or
    ``"package.module:Name"`` to import it only when the command is built) in ``fields``; the
    command receives the values given as a nested dict in its ``settings`` parameter.

    ``names`` maps a field path to its option name where the generated one would not do;
    ``shorts`` to another name (``{"learning_rate": "--lr"}``); ``metavars`` to a
    placeholder. A field without a description is an error when the command is built.
    """
    def decorate(func: Callable[..., Any]) -> GeneratedCommand:
        return GeneratedCommand(func, model, fields, settings, names or {}, shorts or {},
                                metavars or {})

    return decorate
