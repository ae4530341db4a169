"""Tiny models and tokenizers built offline, for tests, demos and CPU experiments.

No model can be downloaded on an offline machine, so agentmath grows its own: a byte-level BPE
tokenizer trained in seconds on text we supply, with the ChatML special tokens and chat template
that Qwen-style servers and TRL understand, and a randomly initialised Qwen3 model of a chosen
size. Both save as a normal Hugging Face model directory that transformers, vLLM and TRL load.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentmath._lazy import require

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Added (non-special) tokens, as in Qwen2.5: vLLM's hermes tool parser looks them up by id.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# ChatML, as Qwen2.5 writes it: system, user, assistant (with tool_calls) and tool turns, and
# the tool schemas listed in the system turn when ``tools`` is given. It is prefix-preserving:
# rendering a conversation and then one more turn only appends text.
CHAT_TEMPLATE = (
    "{%- set sys = (messages[0]['content'] if messages and messages[0]['role'] == 'system'"
    " else '') %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' + sys + '\\n\\n# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\nCall a tool with <tool_call>\\n{\"name\": <name>, \"arguments\": "
    "<args>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif sys %}{{- '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set args = call['function']['arguments'] %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": '"
    " + (args if args is string else (args | tojson)) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# name -> (hidden, intermediate, layers, heads, kv_heads); ~1M to ~30M parameters at vocab 2k.
SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "nano": (64, 192, 2, 2, 1),
    "micro": (128, 384, 4, 4, 2),
    "tiny": (256, 768, 4, 4, 2),
    "small": (384, 1152, 8, 6, 2),
    "base": (512, 1536, 10, 8, 4),
}


def known_size(size: str) -> str:
    """``size`` when it names one of :data:`SIZES` (the check of every config that takes a
    size; no torch: sizes are plain data); ValueError naming the sizes there are otherwise."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)}")
    return size


def build_tokenizer(texts: Iterable[str], out_dir: str | Path | None = None,
                    vocab_size: int = 2048) -> Any:
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast``.

    Digits are split one per token (as in Qwen and Llama 3) so that numbers tokenize the same
    way wherever they appear. Saved to ``out_dir`` when given.
    """
    tk = require("tokenizers", "train")
    transformers = require("transformers", "train")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence([
        tk.pre_tokenizers.Digits(individual_digits=True),
        tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_tokens([tk.AddedToken(t, special=False, normalized=False)
                          for t in TOOL_TOKENS])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None, chat_template=CHAT_TEMPLATE)
    fast.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast


def build_model(tokenizer: Any, size: str = "tiny", out_dir: str | Path | None = None,
                seed: int = 0, max_position_embeddings: int = 4096) -> Any:
    """A randomly initialised Qwen3 causal LM sized by ``size`` (see :data:`SIZES`)."""
    known_size(size)
    torch = require("torch", "train")
    transformers = require("transformers", "train")
    hidden, inter, layers, heads, kv = SIZES[size]
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=inter,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=hidden // heads, tie_word_embeddings=True,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32")
    torch.manual_seed(seed)
    model = transformers.Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if out_dir is not None:
        model.save_pretrained(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
    return model
