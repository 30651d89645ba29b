"""Helpers and constants that the tests of the drafters reading the target share (not a test module;
DFlash, DDTree, Domino, EAGLE-3 and the graft tests use them):

* `TARGETS`, two tiny targets with 3 layers to read, `drafter_cfg` (a DFlash drafter of one),
  `random_dflash_params` (perturbed random params of those targets and of their drafters),
  `features_of` (a target's features recomputed from scratch);
* `committed_rounds`, the loop driven round by round, for the draft-cache checks after every round;
* `check_lossless_on_random_weights`, the greedy losslessness check on random weights;
* `DFLASH_SMALL` (+ params), a DFlash drafter of the exact-sampling-law target (tests/fixtures.py);
* `zoo_pair`, the trained zoo target and its DFlash drafter, and `draw_zoo_prompts`;
* `slot_paths`, a tree row's root-to-node token paths.
"""

import functools

import jax
import numpy as np
from hypothesis import strategies as st

from specjax.decode import cache_sizes, generate, generate_ar, initial_state, speculative_round
from specjax.models import init_cache, pad_prompts, prefill_tapped
from specjax.models.dflash import DFlashConfig
from specjax.sampling import Sampling
from specjax.testing import FAMILIES, random_params
from tests.fixtures import MAX_NEW, PROMPT_WIDTH, TARGET, assert_lossless, prompt_batches
from tests.zoo_prompts import HELDOUT, PROMPTS

TARGETS = {"neox": FAMILIES["gpt-neox"], "qwen": FAMILIES["qwen3"]}  # specjax.testing's tiny targets


def drafter_cfg(target, block_size=5, layers=(0, 2), num_layers=2):
    return DFlashConfig.for_target(target, num_layers=num_layers, target_layer_ids=layers, block_size=block_size,
                                   mask_token_id=target.vocab_size - 1)


# Perturbed random params of a `TARGETS` model or of a drafter of one (one jitted function, shipped as
# `specjax.testing.random_params`: its programs are shared by every module that builds them).
random_dflash_params = random_params


def features_of(params, cfg, seqs, layers, width):
    """Target features of whole sequences from scratch: [B, width, n, E]."""
    tokens, lengths = pad_prompts(seqs, width)
    return prefill_tapped(params, cfg, tokens, lengths, init_cache(cfg, len(seqs), width), layers)[3]


ROUNDS_MAX_NEW = 14


def committed_rounds(tparams, target, drafter, dparams, prompts, max_new=ROUNDS_MAX_NEW, eos=(7,), limit=20):
    """Drive the loop round by round through the public `speculative_round`: yields (loop state,
    each row's committed sequence prompt + output so far) after every round."""
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    slots, reserve = cache_sizes(drafter, PROMPT_WIDTH, max_new)
    static = dict(max_new_tokens=max_new, eos_ids=eos, sampling=Sampling())
    state = jax.jit(functools.partial(initial_state, pad_id=0, num_slots=slots, reserve=reserve, **static),
                    static_argnums=(1, 2))(tparams, target, drafter, dparams, tokens, lengths, None)
    step = jax.jit(functools.partial(speculative_round, **static), static_argnums=(1, 2))
    for _ in range(limit):
        if bool(np.all(np.asarray(state.done))):
            return
        state = step(tparams, target, drafter, state)
        yield state, [p + np.asarray(state.out[b, : int(state.count[b])]).tolist() for b, p in enumerate(prompts)]


def check_lossless_on_random_weights(name, block, batch, data, seed, eos, make_drafter):
    """Random target + DFlash weights (seeded), a drawn ragged batch, EOS 3 or none:
    `make_drafter(cfg, target)`'s generation must equal AR's. Returns the generation."""
    target = TARGETS[name]
    cfg = drafter_cfg(target, block_size=block)
    params, dparams = random_dflash_params(target, seed), random_dflash_params(cfg, seed + 3)
    prompts = data.draw(prompt_batches(batch, target.vocab_size))
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    eos_ids = (3,) if eos else ()
    ar = generate_ar(params, target, tokens, lengths, MAX_NEW, eos_ids=eos_ids)
    spec = generate(params, target, make_drafter(cfg, target), dparams, tokens, lengths, MAX_NEW, eos_ids=eos_ids)
    assert_lossless(params, target, prompts, ar, spec)
    return spec


DFLASH_SMALL = DFlashConfig.for_target(TARGET, num_layers=1, target_layer_ids=(1,), block_size=3, mask_token_id=0)
DFLASH_SMALL_PARAMS = random_params(DFLASH_SMALL, 7, 0.6)


@functools.lru_cache(maxsize=1)
def zoo_pair():
    from specjax import zoo

    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    return tcfg, tparams, tok, dcfg, dparams


def draw_zoo_prompts(data, eos: bool, rows: int = 3, width: int = 24):
    """A ragged batch for the zoo target: each row a held-out text prefix or random tokens
    (1..width tokens); EOS = the frequent token ',' or none. -> (rows, tokens, lengths, eos_ids)."""
    from specjax import zoo

    tcfg, _, tok, _, _ = zoo_pair()
    texts = [t for _, t in HELDOUT + PROMPTS]
    out = []
    for _ in range(rows):
        if data.draw(st.booleans()):
            ids = zoo.encode(tok, texts[data.draw(st.integers(0, len(texts) - 1))])
            out.append(ids[: data.draw(st.integers(1, min(len(ids), width)))])
        else:
            out.append(data.draw(st.lists(st.integers(1, tcfg.vocab_size - 1), min_size=1, max_size=width)))
    tokens, lengths = pad_prompts(out, width)
    return out, tokens, lengths, ((int(tok.token_to_id(",")),) if eos else ())


def slot_paths(tree, b: int) -> list[tuple[int, ...]]:
    """Row b's root-to-node token paths of the valid nodes, in slot order."""
    tok, par, val = (np.asarray(x[b]) for x in (tree.tokens, tree.parents, tree.valid))
    paths = []
    for i in np.flatnonzero(val):
        paths.append((paths[par[i]] if par[i] >= 0 else ()) + (int(tok[i]),))
    return paths
