"""Continuous batching in HFBackend (agentmath/backends/hf_continuous.py) against one-at-a-time
generation, with a small real model (random weights: equivalence needs no trained model).

Greedy outputs must be token-for-token those of ``generate`` on each prompt alone (the old
backend with max_batch=1) for prompts of different lengths arriving while others decode, with
end-of-turn tokens, stop strings and different max_tokens; seeded sampling must not depend on
the other rows; logprobs must be those of a full forward; a failing request, a failing step and
aclose must fail only what they should."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentmath.backends import hf_decode  # noqa: E402
from agentmath.backends.base import Generation, SamplingParams  # noqa: E402
from agentmath.backends.hf import HFBackend  # noqa: E402
from agentmath.backends.hf_decode import Request as Queued  # noqa: E402
from agentmath.backends.hf_sampling import BatchSampling, RowRandom, sample  # noqa: E402
from agentmath.errors import BackendError, RequestRejected  # noqa: E402
from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402

pytestmark = pytest.mark.integration

GREEDY = SamplingParams(temperature=0, logprobs=True)


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer(synthetic_conversations(120), vocab_size=512)


@pytest.fixture(scope="module")
def model(tok: Any) -> Any:
    return build_model(tok, "nano", seed=0).eval()


@pytest.fixture(scope="module")
def prompts(tok: Any) -> list[list[int]]:
    """Eight prompts of 6 to ~90 tokens."""
    texts = synthetic_conversations(8, seed=1)
    return [tok.encode(t, add_special_tokens=False)[: 6 + 12 * i] for i, t in enumerate(texts)]


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


Request = tuple[list[int], tuple[str, ...], int, SamplingParams]


async def _one_at_a_time(backend: HFBackend, requests: Sequence[Request]) -> list[Generation]:
    try:
        return [await backend.generate(p, stop=s, max_tokens=m, sampling=sp)
                for p, s, m, sp in requests]
    finally:
        await backend.aclose()


async def _staggered(backend: HFBackend, requests: Sequence[Request],
                     delay_s: float = 0.004) -> list[Generation]:
    """Request i arrives i * delay_s after the first (while earlier ones decode)."""
    async def one(i: int, req: Request) -> Generation:
        await asyncio.sleep(i * delay_s)
        p, s, m, sp = req
        return await backend.generate(p, stop=s, max_tokens=m, sampling=sp)

    try:
        return await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    finally:
        await backend.aclose()


@pytest.fixture
def admissions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(rows running, rows admitted) at every call into the decode batch."""
    seen: list[tuple[int, int]] = []
    advance = hf_decode.DecodeBatch.advance

    def spy(self: Any, admit: list[Any], drop: list[Any], steps: int) -> Any:
        seen.append((len(self.rows), len(admit)))
        return advance(self, admit, drop, steps)

    monkeypatch.setattr(hf_decode.DecodeBatch, "advance", spy)
    return seen


def _piece(tok: Any, ids: Sequence[int]) -> str:
    return tok.decode(list(ids), skip_special_tokens=False)


def _cut_alone(model: Any, tok: Any, requests: Sequence[Request]) -> list[Generation]:
    """Each request generated alone (``generate`` on one prompt, to its max_tokens or end of
    turn), then cut where ``HFBackend._cut`` cuts it. Stop strings are left out of
    ``generate``: its stop-string criterion also matches text that begins in the prompt, and
    would end a row early that ``_cut`` then reports as ``length``."""
    backend = HFBackend(model, tok, max_batch=1, continuous=False)
    full = asyncio.run(_one_at_a_time(backend, [(p, (), m, s) for p, _, m, s in requests]))
    return [backend._cut(g.token_ids, Queued(p, stop, m, s, None), g.logprobs)  # type: ignore[arg-type]
            for g, (p, stop, m, s) in zip(full, requests, strict=True)]


def test_greedy_matches_one_at_a_time(tok: Any, model: Any, prompts: list[list[int]],
                                      admissions: list[tuple[int, int]]) -> None:
    free = _cut_alone(model, tok, [(p, (), 40, GREEDY) for p in prompts])
    # an extra end-of-turn id the model does emit, so that some rows end with "eos"
    eos_model = copy.deepcopy(model)
    eos_model.generation_config.eos_token_id = [tok.eos_token_id, free[0].token_ids[12]]
    requests: list[Request] = []
    for i, (p, g) in enumerate(zip(prompts, free, strict=True)):
        ids = g.token_ids
        stop: tuple[str, ...] = ()
        if i % 3 == 1:  # a stop string of one token's text
            stop = (_piece(tok, ids[8 + i : 9 + i]),)
        elif i % 3 == 2:  # one spanning two tokens, beside one that never matches
            stop = ("no such text", _piece(tok, ids[10 + i : 12 + i]))
        requests.append((p, stop, 12 + 4 * i, GREEDY))
    want = _cut_alone(eos_model, tok, requests)
    got = asyncio.run(_staggered(HFBackend(eos_model, tok, max_batch=5), requests))
    for w, g in zip(want, got, strict=True):
        assert (g.token_ids, g.text, g.finish_reason, g.stop_string) == \
            (w.token_ids, w.text, w.finish_reason, w.stop_string)
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
    assert {g.finish_reason for g in got} == {"eos", "stop", "length"}
    assert max(running + new for running, new in admissions) <= 5
    assert any(running and new for running, new in admissions)  # joined a running batch


def test_logprobs_are_those_of_a_full_forward(tok: Any, model: Any,
                                              prompts: list[list[int]]) -> None:
    sampled = SamplingParams(temperature=0.7, seed=3, logprobs=True)
    requests: list[Request] = [(p, (), 20, GREEDY if i % 2 else sampled)
                               for i, p in enumerate(prompts[:4])]
    got = asyncio.run(_staggered(HFBackend(model, tok, max_batch=8), requests))
    for (prompt, _, _, sampling), g in zip(requests, got, strict=True):
        ids = torch.tensor([prompt + g.token_ids], device=model.device)  # cuda where any
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float().cpu()
        if sampling.temperature > 0:
            logits = logits / sampling.temperature
        full = logits.log_softmax(-1).gather(1, torch.tensor(g.token_ids)[:, None])
        assert g.logprobs == pytest.approx(full.squeeze(1).tolist(), abs=1e-4)


def test_seeded_sampling_does_not_depend_on_the_batch(tok: Any, model: Any,
                                                      prompts: list[list[int]]) -> None:
    def sampling(seed: int) -> SamplingParams:
        return SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=seed)

    mine: Request = (prompts[3], (), 30, sampling(7))
    alone = asyncio.run(_staggered(HFBackend(model, tok, max_batch=8), [mine]))[0]
    others: list[Request] = [(p, (), 10 + 5 * i, sampling(100 + i))
                             for i, p in enumerate(prompts[:5])]
    crowd = asyncio.run(_staggered(HFBackend(model, tok, max_batch=8),
                                   [*others[:2], mine, *others[2:]], delay_s=0.002))
    assert crowd[2].token_ids == alone.token_ids
    again = asyncio.run(_staggered(HFBackend(model, tok, max_batch=8),
                                   [(prompts[3], (), 30, sampling(8))]))[0]
    assert again.token_ids != alone.token_ids  # another seed, another sample


def test_sampling_cuts_to_top_k_and_top_p() -> None:
    """The per-row sampler on fixed logits: top-k and top-p leave only the tokens they keep,
    sampled in proportion; a greedy row takes the argmax; logprobs are of the uncut logits."""
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    settings = [SamplingParams(top_k=2), SamplingParams(top_p=0.8), SamplingParams(),
                SamplingParams(temperature=0)]
    params = BatchSampling.of(settings, 4, "cpu")
    randoms = [RowRandom(i) for i in range(3)] + [None]
    counts = torch.zeros(4, 4)
    for _ in range(3000):
        tokens, lps = sample(probs.log().expand(4, 4), params, randoms)
        for r, t in enumerate(tokens):
            counts[r, t] += 1
    freq = counts / counts.sum(1, keepdim=True)
    assert freq[0].tolist() == pytest.approx([4 / 7, 3 / 7, 0, 0], abs=0.04)
    assert freq[1].tolist() == pytest.approx([4 / 9, 3 / 9, 2 / 9, 0], abs=0.04)
    assert freq[2].tolist() == pytest.approx(probs.tolist(), abs=0.04)
    assert freq[3].tolist() == [1, 0, 0, 0]
    assert lps is not None and lps[3] == pytest.approx(probs[0].log().item(), abs=1e-6)
    first = sample(probs.log().expand(1, 4), BatchSampling.of(settings[2:3], 4, "cpu"),
                   [RowRandom(5)])
    assert [sample(probs.log().expand(1, 4), BatchSampling.of(settings[2:3], 4, "cpu"),
                   [RowRandom(5)]) for _ in range(3)] == [first] * 3  # a seed, one stream


def test_a_failing_request_fails_alone(tok: Any, model: Any, prompts: list[list[int]],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bad = [7] * 9
    prefill = hf_decode.DecodeBatch._prefill

    def failing(self: Any, rows: list[Any], hits: Any) -> Any:
        if any(r.prompt == bad for r in rows):
            raise RuntimeError("injected prefill failure")
        return prefill(self, rows, hits)

    monkeypatch.setattr(hf_decode.DecodeBatch, "_prefill", failing)
    good = [(p, (), 15, GREEDY) for p in prompts[:3]]
    want = asyncio.run(_one_at_a_time(HFBackend(model, tok, max_batch=1, continuous=False),
                                      good))

    async def run() -> list[Any]:
        backend = HFBackend(model, tok, max_batch=8)
        try:
            calls = [backend.generate(p, stop=s, max_tokens=m, sampling=sp)
                     for p, s, m, sp in [good[0], (bad, (), 15, GREEDY), *good[1:],
                                         ([1, len(tok) + 5], (), 5, GREEDY)]]
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await backend.aclose()

    out = asyncio.run(run())  # all admitted together: one prefill, then each alone
    assert isinstance(out[1], BackendError) and "injected" in str(out[1])
    assert isinstance(out[4], RequestRejected)  # an id out of the vocabulary
    assert [g.token_ids for g in (out[0], out[2], out[3])] == [w.token_ids for w in want]


def test_a_failing_step_fails_its_rows_and_the_loop_goes_on(
        tok: Any, model: Any, prompts: list[list[int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    step = hf_decode.DecodeBatch._step
    calls = {"n": 0}

    def failing(self: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise_in = self.model.forward

            def boom(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("injected decode failure")

            self.model.forward = boom
            try:
                return step(self)
            finally:
                self.model.forward = raise_in
        return step(self)

    monkeypatch.setattr(hf_decode.DecodeBatch, "_step", failing)

    async def run() -> tuple[list[Any], Generation]:
        backend = HFBackend(model, tok, max_batch=8)
        try:
            first = await asyncio.gather(
                *(backend.generate(p, stop=(), max_tokens=20, sampling=GREEDY)
                  for p in prompts[:3]), return_exceptions=True)
            after = await backend.generate(prompts[4], stop=(), max_tokens=10, sampling=GREEDY)
            return first, after
        finally:
            await backend.aclose()

    first, after = asyncio.run(run())
    assert all(isinstance(x, BackendError) and "injected" in str(x) for x in first)
    want = asyncio.run(_one_at_a_time(HFBackend(model, tok, max_batch=1, continuous=False),
                                      [(prompts[4], (), 10, GREEDY)]))[0]
    assert after.token_ids == want.token_ids


def test_aclose_while_requests_run_and_a_cancelled_caller(
        tok: Any, model: Any, prompts: list[list[int]],
        admissions: list[tuple[int, int]]) -> None:
    async def run() -> None:
        backend = HFBackend(model, tok, max_batch=8)
        tasks = [asyncio.create_task(backend.generate(p, stop=(), max_tokens=3000,
                                                      sampling=GREEDY)) for p in prompts[:4]]
        while not admissions or admissions[-1][0] < 4:
            await asyncio.sleep(0.01)
        tasks[0].cancel()  # its row leaves the batch at the next call
        while admissions[-1][0] != 3:
            await asyncio.sleep(0.01)
        await backend.aclose()
        out = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert isinstance(out[0], asyncio.CancelledError)
        assert all(isinstance(x, BackendError) and "closed" in str(x) for x in out[1:])
        again = await backend.generate(prompts[0], stop=(), max_tokens=5, sampling=GREEDY)
        assert len(again.token_ids) == 5  # usable again after aclose
        await backend.aclose()

    asyncio.run(run())


def test_a_lora_model_decodes_as_generate_does(tok: Any, prompts: list[list[int]]) -> None:
    """The RL trainer's generator may be a peft model (LoRA): its forward must take the cache
    argument through to the base model (a dropped cache would decode garbage, not fail)."""
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    lora = peft.get_peft_model(build_model(tok, "nano", seed=1), config).eval()
    requests: list[Request] = [(p, (), 25, GREEDY) for p in prompts[:4]]
    want = _cut_alone(lora, tok, requests)
    got = asyncio.run(_staggered(HFBackend(lora, tok, max_batch=4), requests))
    assert [g.token_ids for g in got] == [w.token_ids for w in want]


async def _two_turns(backend: HFBackend, first: Sequence[Request], tails: Sequence[list[int]],
                     between: Any = None) -> tuple[list[Generation], list[Generation]]:
    """Each episode's second request extends its first prompt with the ids it generated and
    a tail (a tool's output), as the agent loop does; ``between`` runs before the second
    turns (on the model thread)."""
    try:
        one = await _staggered_open(backend, first)
        if between is not None:
            await backend.run_on_model_thread(between)
        second = [(p + g.token_ids + t, s, m, sp)
                  for (p, s, m, sp), g, t in zip(first, one, tails, strict=True)]
        return one, await _staggered_open(backend, second)
    finally:
        await backend.aclose()


async def _staggered_open(backend: HFBackend, requests: Sequence[Request]) -> list[Generation]:
    async def one(i: int, req: Request) -> Generation:
        await asyncio.sleep(i * 0.004)
        p, s, m, sp = req
        return await backend.generate(p, stop=s, max_tokens=m, sampling=sp)

    return await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))


def test_a_next_turn_prefills_only_its_tail_and_decodes_the_same(
        tok: Any, model: Any, prompts: list[list[int]]) -> None:
    first: list[Request] = [(p, (), 6 + 3 * i, GREEDY) for i, p in enumerate(prompts)]
    tails = [prompts[(i + 1) % len(prompts)][: 1 + 2 * i] for i in range(len(prompts))]
    backend = HFBackend(model, tok, max_batch=4)
    one, two = asyncio.run(_two_turns(backend, first, tails))
    assert backend._batcher is not None
    hits, reused = backend._batcher.prefix_reuse
    # every second turn reused its first turn's KV: prompt and generation but the last token
    assert hits == len(prompts)
    assert reused == sum(len(p) + len(g.token_ids) - 1 for p, g in zip(prompts, one, strict=True))
    second: list[Request] = [(p + g.token_ids + t, (), m, sp) for (p, _, m, sp), g, t
                             in zip(first, one, tails, strict=True)]
    want = _cut_alone(model, tok, second)
    for w, g in zip(want, two, strict=True):
        assert g.token_ids == w.token_ids
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def test_a_weight_update_empties_the_prefix_stash(tok: Any, model: Any,
                                                  prompts: list[list[int]]) -> None:
    changed = copy.deepcopy(model)
    first: list[Request] = [(p, (), 8, GREEDY) for p in prompts[:4]]
    tails = [prompts[5][:3]] * 4

    def step() -> None:  # what an optimizer step does: parameters changed in place
        with torch.no_grad():
            for p in changed.parameters():
                p.mul_(1.05)

    backend = HFBackend(changed, tok, max_batch=8)
    one, two = asyncio.run(_two_turns(backend, first, tails, between=step))
    assert backend._batcher is not None and backend._batcher.prefix_reuse == (0, 0)
    second: list[Request] = [(p + g.token_ids + t, (), m, sp) for (p, _, m, sp), g, t
                             in zip(first, one, tails, strict=True)]
    want = _cut_alone(changed, tok, second)
    assert [g.token_ids for g in two] == [w.token_ids for w in want]


def test_the_prefix_stash_keeps_the_longest_proper_prefix_and_a_bound() -> None:
    from agentmath.backends.hf_prefix import PrefixStash

    param = torch.zeros(2)
    stash = PrefixStash(torch.nn.ParameterList([torch.nn.Parameter(param)]), rows=2)
    stamp = stash.refresh()
    stash.put([1, 2], [("k12", "v12")], stamp)
    stash.put([1, 2, 3], [("k123", "v123")], stamp)
    assert stash.take([1, 2, 3]) == (2, [("k12", "v12")])  # equal is not a proper prefix
    assert stash.take([1, 2, 3, 4]) == (3, [("k123", "v123")])
    assert stash.take([1, 2, 3, 4]) is None  # taken entries are gone
    for i in range(3):
        stash.put([9, i], [("k", "v")], stamp)
    assert list(stash.entries) == [(9, 1), (9, 2)]  # the oldest left
    stash.put([7], [("k", "v")], stamp - 1)  # computed under other weights: not kept
    assert (7,) not in stash.entries
    with torch.no_grad():
        stash.model[0].add_(1.0)
    stash.refresh()
    assert not stash.entries and (stash.hits, stash.reused_tokens) == (2, 5)


def test_a_group_of_one_prompt_is_prefilled_once(tok: Any, model: Any, prompts: list[list[int]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """GRPO's G samples of a prompt arrive together: one row of prefill, then each samples on
    its own seed exactly as it would alone."""
    widths: list[int] = []
    prefill = hf_decode.DecodeBatch._prefill

    def spy(self: Any, rows: list[Any], hits: Any) -> Any:
        widths.append(len(rows))
        return prefill(self, rows, hits)

    group: list[Request] = [(prompts[4], (), 12, SamplingParams(temperature=1.0, seed=s,
                                                                 logprobs=True))
                            for s in range(6)] + [(prompts[2], (), 12, GREEDY)]
    alone = [asyncio.run(_staggered(HFBackend(model, tok, max_batch=8), [r]))[0] for r in group]
    monkeypatch.setattr(hf_decode.DecodeBatch, "_prefill", spy)
    together = asyncio.run(_staggered(HFBackend(model, tok, max_batch=8), group, delay_s=0))
    assert widths == [2]  # seven requests, two distinct prompts, one forward
    for a, t in zip(alone, together, strict=True):
        assert t.token_ids == a.token_ids
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert len({tuple(t.token_ids) for t in together[:6]}) > 1  # the seeds still differ
