"""The proof of selective feedback masking in SFT (agentmath.train.sft).

Tool output (``train: false`` pieces) and the prompt carry no loss and no gradient; the model's
own tokens and the closing ``<|im_end|>`` do; and the ids trained on are the prompt's ids
followed by each piece encoded on its own, as the agent loop produces them at inference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

from agentmath.errors import DataError  # noqa: E402
from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from agentmath.train.sft import (  # noqa: E402
    IGNORE_INDEX,
    SFTConfig,
    load_examples,
    masked_lm_loss,
    tokenize_example,
    tokenize_examples,
)
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402

EXAMPLE: dict[str, Any] = {
    "id": "ex-1",
    "messages": [{"role": "system", "content": "Solve the problem."},
                 {"role": "user", "content": "What is 3 * 4?"}],
    "completion": [
        {"text": "I compute it.\n<code>\nx = 3 * 4\nprint(x)\n</code>", "train": True},
        {"text": "\n<interpreter>\n12\n</interpreter>\n", "train": False},
        {"text": "The answer is \\boxed{12}.", "train": True},
    ],
    "answer": "12",
}


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer(synthetic_conversations(120), vocab_size=512)


@pytest.fixture(scope="module")
def model(tok: Any) -> Any:
    return build_model(tok, "nano", seed=0).eval()  # eval: no dropout, fully deterministic


def _encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _spans(tok: Any, example: dict[str, Any]) -> tuple[int, list[tuple[int, int, bool]]]:
    """Prompt length and each piece's [start, end) span and train flag, computed by hand."""
    prompt = tok.apply_chat_template(example["messages"], tokenize=False,
                                     add_generation_prompt=True)
    start = len(_encode(tok, prompt))
    spans = []
    pos = start
    for piece in example["completion"]:
        n = len(_encode(tok, piece["text"]))
        spans.append((pos, pos + n, piece["train"]))
        pos += n
    return start, spans


def _loss_and_grads(model: Any, ids: torch.Tensor, labels: torch.Tensor,
                    loss_mask: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """Loss, every parameter's gradient, and the gradient w.r.t. the logits."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    logits.retain_grad()
    loss = masked_lm_loss(logits, labels, loss_mask)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return loss.detach(), grads, logits.grad.detach().clone()


# (a) ----------------------------------------------------------------------------------------

def test_labels_are_masked_exactly_on_prompt_and_tool_output(tok: Any) -> None:
    ids, labels = tokenize_example(tok, EXAMPLE, max_length=4096)
    prompt_len, spans = _spans(tok, EXAMPLE)
    assert len(ids) == len(labels) == spans[-1][1] + 1
    masked = {i for i, label in enumerate(labels) if label == IGNORE_INDEX}
    expected = set(range(prompt_len)) | {i for s, e, train in spans if not train
                                         for i in range(s, e)}
    assert masked == expected
    for start, end, train in spans:
        assert labels[start:end] == (ids[start:end] if train else [IGNORE_INDEX] * (end - start))
    assert ids[-1] == labels[-1] == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(ids[spans[1][0]:spans[1][1]]) == EXAMPLE["completion"][1]["text"]


def test_truncation_keeps_or_drops_and_counts(tok: Any) -> None:
    ids, labels = tokenize_example(tok, EXAMPLE, max_length=4096)
    prompt_len, spans = _spans(tok, EXAMPLE)
    cut = tokenize_example(tok, EXAMPLE, max_length=prompt_len + 3)
    assert cut == (ids[:prompt_len + 3], labels[:prompt_len + 3])
    assert tokenize_example(tok, EXAMPLE, max_length=prompt_len) is None  # nothing trainable
    tool_only = {**EXAMPLE, "completion": [EXAMPLE["completion"][1]]}
    assert tokenize_example(tok, tool_only, max_length=spans[1][1] - spans[1][0] + prompt_len
                            ) is None  # only masked tool output survives the cut
    _, stats = tokenize_examples(tok, [EXAMPLE, EXAMPLE], max_length=prompt_len + 3)
    assert stats == {"total": 2, "kept": 2, "truncated": 2, "dropped": 0}
    _, stats = tokenize_examples(tok, [EXAMPLE], max_length=prompt_len)
    assert stats == {"total": 1, "kept": 0, "truncated": 0, "dropped": 1}


# (b) ----------------------------------------------------------------------------------------

def test_loss_and_gradients_ignore_tool_output_targets(tok: Any, model: Any) -> None:
    ids_list, labels_list = tokenize_example(tok, EXAMPLE, max_length=4096)
    ids = torch.tensor([ids_list])
    labels = torch.tensor([labels_list])
    train_mask = labels != IGNORE_INDEX
    tool = torch.zeros_like(train_mask)
    for start, end, train in _spans(tok, EXAMPLE)[1]:
        tool[0, start:end] = not train
    assert tool.sum() > 0
    # The same targets with real ids everywhere, masked by train_mask; then with the tool
    # positions' target ids replaced by other (random) ids, still masked.
    full = ids.clone()
    other = full.clone()
    other[tool] = (full[tool] + torch.randint(1, len(tok), full[tool].shape)) % len(tok)
    assert not torch.equal(full, other)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one fixed reduction order, whatever else the machine is doing
    try:
        loss_a, grads_a, dlogits = _loss_and_grads(model, ids, labels)
        loss_b, grads_b, _ = _loss_and_grads(model, ids, full, train_mask)
        loss_c, grads_c, _ = _loss_and_grads(model, ids, other, train_mask)
    finally:
        torch.set_num_threads(threads)
    # -100 labels and an explicit mask are two code paths: equal up to float rounding.
    assert torch.allclose(loss_a, loss_b, rtol=1e-6, atol=0)
    # Same path, only the masked tool targets differ: bit-identical.
    assert torch.equal(loss_b, loss_c)
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], rtol=1e-5, atol=1e-9), name
        assert torch.equal(grads_b[name], grads_c[name]), name
    # Logits at position t predict token t+1: zero gradient wherever t+1 is prompt or tool.
    predicts_masked = ~train_mask[0, 1:]
    assert torch.count_nonzero(dlogits[0, :-1][predicts_masked]) == 0
    assert torch.count_nonzero(dlogits[0, -1]) == 0  # the last position predicts nothing
    for t in torch.nonzero(~predicts_masked).flatten().tolist():
        assert torch.count_nonzero(dlogits[0, t]) > 0, t
    tool_predictors = torch.nonzero(tool[0, 1:]).flatten()
    assert torch.count_nonzero(dlogits[0, tool_predictors]) == 0


def test_loss_is_the_mean_over_model_tokens_only(tok: Any, model: Any) -> None:
    ids_list, labels_list = tokenize_example(tok, EXAMPLE, max_length=4096)
    ids, labels = torch.tensor([ids_list]), torch.tensor([labels_list])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        logp = torch.log_softmax(logits[0].float(), dim=-1)
        targets = [t for t in range(1, len(ids_list)) if labels_list[t] != IGNORE_INDEX]
        by_hand = -torch.stack([logp[t - 1, ids_list[t]] for t in targets]).mean()
        assert torch.allclose(masked_lm_loss(logits, labels), by_hand, atol=1e-6)
        total = masked_lm_loss(logits, labels, reduction="sum")
        assert torch.allclose(total / len(targets), by_hand, atol=1e-6)


# (c) ----------------------------------------------------------------------------------------

def test_loss_and_gradients_depend_on_model_token_targets(tok: Any, model: Any) -> None:
    ids_list, labels_list = tokenize_example(tok, EXAMPLE, max_length=4096)
    ids, labels = torch.tensor([ids_list]), torch.tensor([labels_list])
    _, spans = _spans(tok, EXAMPLE)
    for position in (spans[0][0] + 1, spans[2][0], len(ids_list) - 1):  # code, answer, EOS
        changed = labels.clone()
        changed[0, position] = (labels[0, position] + 7) % len(tok)
        loss_a, grads_a, _ = _loss_and_grads(model, ids, labels)
        loss_b, grads_b, _ = _loss_and_grads(model, ids, changed)
        assert not torch.equal(loss_a, loss_b), position
        assert any(not torch.equal(grads_a[n], grads_b[n]) for n in grads_a), position


# (d) ----------------------------------------------------------------------------------------

def test_pieces_are_encoded_separately_and_concatenated(tok: Any) -> None:
    ids, _ = tokenize_example(tok, EXAMPLE, max_length=4096)
    prompt = tok.apply_chat_template(EXAMPLE["messages"], tokenize=False,
                                     add_generation_prompt=True)
    expected = _encode(tok, prompt)
    for piece in EXAMPLE["completion"]:
        expected += _encode(tok, piece["text"])
    assert ids == expected + [tok.eos_token_id]
    text = prompt + "".join(p["text"] for p in EXAMPLE["completion"]) + "<|im_end|>"
    assert tok.decode(ids) == text
    # Why separately: a boundary inside a word tokenizes differently from the joined text,
    # and the model at inference sees the pieces' own tokens (the agent loop appends ids).
    split = {**EXAMPLE, "completion": [{"text": "Let me comp", "train": True},
                                       {"text": "ute it.", "train": True}]}
    split_ids, _ = tokenize_example(tok, split, max_length=4096)
    joined = _encode(tok, prompt) + _encode(tok, "Let me compute it.") + [tok.eos_token_id]
    assert split_ids == (_encode(tok, prompt) + _encode(tok, "Let me comp")
                         + _encode(tok, "ute it.") + [tok.eos_token_id])
    assert split_ids != joined


def test_padding_does_not_change_the_loss(tok: Any, model: Any) -> None:
    ids_list, labels_list = tokenize_example(tok, EXAMPLE, max_length=4096)
    n, pad = len(ids_list), 5
    ids = torch.tensor([ids_list + [tok.pad_token_id] * pad])
    labels = torch.tensor([labels_list + [IGNORE_INDEX] * pad])
    mask = torch.tensor([[1] * n + [0] * pad])
    with torch.no_grad():
        alone = masked_lm_loss(model(input_ids=torch.tensor([ids_list])).logits,
                               torch.tensor([labels_list]))
        padded = masked_lm_loss(model(input_ids=ids, attention_mask=mask).logits, labels)
    assert torch.allclose(alone, padded, atol=1e-5)


# data loading and config --------------------------------------------------------------------

def test_load_examples_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "sft.jsonl"
    bad = {**EXAMPLE, "completion": [{"text": "x", "train": "yes"}]}
    path.write_text(json.dumps(EXAMPLE) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"sft\.jsonl:3: field 'completion\[0\]\.train'"):
        load_examples(path)
    path.write_text(json.dumps(EXAMPLE) + "\n{not json\n")
    with pytest.raises(DataError, match=r"sft\.jsonl:2: invalid JSON"):
        load_examples(path)
    path.write_text(json.dumps({"messages": [], "completion": []}) + "\n")
    with pytest.raises(DataError, match=r"sft\.jsonl:1: field 'messages'"):
        load_examples(path)
    path.write_text(json.dumps(EXAMPLE) + "\n")
    assert load_examples(path) == [EXAMPLE]


def test_config_bounds() -> None:
    from pydantic import ValidationError

    assert SFTConfig().lora is False
    for field, value in (("learning_rate", 0), ("batch_size", 0), ("lora_dropout", 1.0),
                         ("unknown", 1)):
        with pytest.raises(ValidationError):
            SFTConfig(**{field: value})


def test_chat_prompt_ids_equal_the_templates_own_tokenization(tok: Any) -> None:
    """Every backend with a Hugging Face tokenizer and SFT render a prompt as text, then encode
    it (agentmath.backends.base.chat_prompt_ids): the same ids as transformers' own
    ``apply_chat_template(tokenize=True)``, which the OpenAI backend used before the merge."""
    from agentmath.backends.base import chat_prompt_ids

    conversations = [
        [{"role": "user", "content": "What is 2 + 2?"}],
        [{"role": "system", "content": "Use <code> blocks."},
         {"role": "user", "content": "Σ of 1..100, then ×3 — naïvely?"}],
        [{"role": "user", "content": "a"},
         {"role": "assistant", "content": "b\n<code>\nx=1\n</code>"},
         {"role": "user", "content": "  spaces  and\ttabs\n\n"}],
    ]
    for messages in conversations:
        out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        own = out["input_ids"] if hasattr(out, "keys") else out
        assert chat_prompt_ids(tok, messages) == [int(t) for t in own]


def test_the_logits_kept_give_the_loss_and_gradients_of_the_whole_sequence(
        tok: Any, model: Any) -> None:
    """SFT asks the model only for the logits from the first position any row trains on
    (trained_tail); loss and every gradient equal those of the full logits."""
    from agentmath.train.plumbing import collate
    from agentmath.train.sft import trained_tail

    longer = {**EXAMPLE, "messages": [EXAMPLE["messages"][0], {
        "role": "user", "content": "A shop has 12 boxes of 34 pens each. How many pens?"}]}
    rows = [tokenize_example(tok, ex, 256) for ex in (EXAMPLE, longer)]
    ids, mask, labels = collate(rows, tok.pad_token_id)
    keep = trained_tail(labels)
    first = min(next(i for i, x in enumerate(lab) if x != IGNORE_INDEX) for _, lab in rows)
    assert keep == ids.shape[1] - (first - 1)  # the earliest trained label's predictor onwards
    assert 0 < keep < ids.shape[1]

    def loss_and_grads(**kw: Any) -> tuple[float, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, attention_mask=mask, **kw).logits
        part = labels[:, -logits.shape[1]:]
        loss = masked_lm_loss(logits, part, reduction="sum")
        loss.backward()
        return float(loss.detach()), [p.grad.clone() for p in model.parameters()]

    full, full_grads = loss_and_grads()
    kept, kept_grads = loss_and_grads(logits_to_keep=keep)
    assert kept == pytest.approx(full, rel=1e-6)
    for a, b in zip(full_grads, kept_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)  # float order only
    no_loss = torch.full_like(labels, IGNORE_INDEX)
    assert trained_tail(no_loss) == labels.shape[1]  # nothing trained: every position kept
