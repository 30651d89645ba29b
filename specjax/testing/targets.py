"""The kit's targets and Hypothesis strategies (`specjax.testing`): tiny random targets of every model family,
the embedded trained pair, a 4-token target whose law is enumerable, and the strategies that draw prompts,
EOS sets, samplings and valid padded trees; `build` makes a drafter of a subject for a target.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from specjax.drafters import registry
from specjax.drafters.protocol import Drafter
from specjax.models import GPTNeoXConfig, LlamaConfig, param_shapes
from specjax.pipeline import load_pair
from specjax.sampling import Sampling
from specjax.tree import Tree

__all__ = ["FAMILIES", "Target", "available", "build", "eos_sets", "law_target", "perturbed", "prompt_batches",
           "random_params", "samplings", "spread", "tiny_target", "tiny_targets", "tree_from_arrays", "tree_rows",
           "trees", "zoo_target"]

# One config per family (3 layers, so drafters reading layers 0 and 2 fit); examples draw their params.
FAMILIES = {
    "gpt-neox": GPTNeoXConfig(vocab_size=40, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64,
                              rotary_dim=4),
    "llama": LlamaConfig(vocab_size=48, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8,
                         intermediate_size=64, tie_word_embeddings=True, rope_theta=1000.0),
    "qwen2": LlamaConfig(vocab_size=48, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8,
                         intermediate_size=64, qkv_bias=True, flavor="qwen2"),
    "qwen3": LlamaConfig(vocab_size=48, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8,
                         intermediate_size=64, qk_norm=True, flavor="qwen3", rope_theta=1e4),
}
_DRAFT_LM = GPTNeoXConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, rotary_dim=8)
_LAW_TARGET = GPTNeoXConfig(vocab_size=4, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, rotary_dim=4)
_LAW_DRAFT = GPTNeoXConfig(vocab_size=4, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, rotary_dim=4)
# Natural text for the trained zoo target (its prompts are prefixes of these).
_ZOO_TEXTS = (
    "The river flows through the valley and into the sea, where the fishing boats wait for the tide.",
    "Once upon a time there was a small village at the edge of a great forest.",
    "The history of the city begins in the twelfth century, when a bridge was built across the river.",
    "Music is an art form whose medium is sound, organised in time by rhythm, melody and harmony.",
    "The first railway in the country was opened in 1830 and carried both goods and passengers.",
)



@dataclasses.dataclass(frozen=True)
class Target:
    """A target a drafter is tested on.

    Fields:
      name: how failures name it ("zoo", "qwen3 seed 12", ...).
      cfg: the target's config (static).
      params: the target's params.
      draft: a draft LM of the target's vocabulary as (cfg, params), or None.
      readers: reader kind -> (cfg, params) of trained drafters reading this target ({} for random targets).
      texts: token ids of natural texts whose prefixes make prompts (() for random targets).
    """

    name: str
    cfg: object
    params: object = dataclasses.field(repr=False)
    draft: tuple | None = dataclasses.field(default=None, repr=False)
    readers: dict = dataclasses.field(default_factory=dict, repr=False)
    texts: tuple = dataclasses.field(default=(), repr=False)


# What `init_params` puts in a leaf, by the leaf's name: norm scales are ones, biases zeros, everything else
# normal(0, 0.02) (tests/test_testing_kit.py checks this against `init_params` for every registered family).
_ONES, _ZEROS, _INIT_STD = ("scale", "weight"), ("bias",), 0.02


def _leaf_name(path) -> str:
    key = path[-1]
    return str(getattr(key, "key", getattr(key, "name", key)))


def init_kind(name: str) -> str:
    """"ones", "zeros" or "normal": what `init_params` fills a leaf named `name` with."""
    return "ones" if name in _ONES else "zeros" if name in _ZEROS or name.endswith("_bias") else "normal"


@functools.cache
def _shapes(cfg, dtype):
    return param_shapes(cfg, dtype)  # traced once per config, never compiled


def perturbed(params, seed: int, sigma: float = 0.2):
    """Every leaf of a params pytree plus N(0, sigma) noise, so biases and norms sit far from their trivial initial
    values and a layout mistake shows in the logits. Drawn on the host with numpy (seeded by `seed`): no XLA
    program to compile (jitted, each pytree structure cost a compile of 1-2 s, ~30 of them in a suite run)."""
    rng = np.random.default_rng(seed)

    def noisy(x):
        x = np.asarray(x)
        return jnp.asarray((x.astype(np.float32) + sigma * rng.standard_normal(x.shape, np.float32)).astype(x.dtype))

    return jax.tree.map(noisy, params)


def random_params(cfg, seed: int, sigma: float = 0.3, dtype=jnp.float32):
    """Random params of a model config, drawn on the host with numpy from `seed`: what `init_params` makes (norm
    scales one, biases zero, the rest N(0, 0.02)) plus N(0, sigma) noise on every leaf, so the logits sit far from
    uniform. No XLA program is compiled (`init_params` and the noise jitted took 1-3 s of compile per config)."""
    rng = np.random.default_rng(seed)

    def leaf(path, shape):
        kind = init_kind(_leaf_name(path))
        base = 1.0 if kind == "ones" else 0.0
        std = float(np.hypot(_INIT_STD, sigma)) if kind == "normal" else sigma
        return jnp.asarray((base + std * rng.standard_normal(shape.shape, np.float32)).astype(shape.dtype))

    return jax.tree_util.tree_map_with_path(leaf, _shapes(cfg, dtype))


def tiny_target(family: str, seed: int = 0) -> Target:
    """The `FAMILIES` target `family` with params drawn from `seed`, and a tiny random draft LM of its vocabulary."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; the families are {', '.join(FAMILIES)}")
    cfg = FAMILIES[family]
    draft = dataclasses.replace(_DRAFT_LM, vocab_size=cfg.vocab_size)
    return Target(f"{family} seed {seed}", cfg, random_params(cfg, seed), (draft, random_params(draft, seed + 7)))


@functools.cache
def zoo_target() -> Target:
    """The embedded trained pair (`specjax.zoo`): the tiny GPT-NeoX target, its draft LM and its DFlash, EAGLE-3 and
    Domino drafters (`specjax.pipeline.load_pair("zoo")`), with natural texts for prompts. Loaded once."""
    pair = load_pair("zoo")
    return Target("zoo", pair.cfg, pair.params, pair.draft, dict(pair.readers),
                  tuple(tuple(pair.encode(t)) for t in _ZOO_TEXTS))


@functools.cache
def law_target() -> Target:
    """A 4-token GPT-NeoX target (and a draft LM) with strongly perturbed weights: the law of its next few
    tokens is enumerable (`assert_sampling_law`)."""
    params = random_params(_LAW_TARGET, 0, 0.6)
    draft_params = random_params(_LAW_DRAFT, 2, 0.6)
    return Target("law", _LAW_TARGET, params, (_LAW_DRAFT, draft_params))


# ------------------------------------------------------------------------------------------ strategies


def tiny_targets(families=tuple(FAMILIES)):
    """Strategy: a `tiny_target` of one of `families`, its params drawn from a seed."""
    return st.builds(tiny_target, st.sampled_from(tuple(families)), st.integers(0, 2**16))


@st.composite
def prompt_batches(draw, vocab: int, batch: int = 3, max_len: int = 8, texts=()):
    """Strategy: `batch` prompts (lists of 1..max_len token ids in [0, vocab)), ragged; with `texts`, a row is
    a prefix of one of them half of the time."""
    rows = []
    for _ in range(batch):
        if texts and draw(st.booleans()):
            text = texts[draw(st.integers(0, len(texts) - 1))]
            rows.append(list(text[: draw(st.integers(1, min(len(text), max_len)))]))
        else:
            rows.append(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max_len)))
    return rows


def eos_sets(vocab: int, max_size: int = 2):
    """Strategy: an EOS set (a sorted tuple of up to `max_size` ids in [0, vocab); () never stops)."""
    return st.sets(st.integers(0, vocab - 1), max_size=max_size).map(lambda s: tuple(sorted(s)))


def samplings(greedy: bool = True):
    """Strategy: a `Sampling`: greedy (when allowed) or a temperature in {0.7, 1} with or without top-k / top-p."""
    sampled = st.builds(Sampling, st.sampled_from((0.7, 1.0)), st.sampled_from((None, 2, 5)),
                        st.sampled_from((None, 0.9)))
    return st.one_of(st.just(Sampling()), sampled) if greedy else sampled


@st.composite
def tree_rows(draw, budget: int, vocab: int, min_nodes: int = 0, unique_siblings: bool = False):
    """Strategy: one row as (tokens, parents) Python lists of length <= budget, topologically ordered.

    Parents are drawn to give both bushy trees and long chains (half of the time a node hangs below the
    previous node). With unique_siblings, duplicate siblings are dropped together with their subtrees.
    """
    n = draw(st.integers(min_nodes, budget))
    tokens, parents = [], []
    for i in range(n):
        chain = draw(st.booleans()) and i > 0
        parents.append(i - 1 if chain else draw(st.integers(-1, i - 1)))
        tokens.append(draw(st.integers(0, vocab - 1)))
    if unique_siblings:
        keep, new_index, seen = [], {}, set()
        for i, (t, p) in enumerate(zip(tokens, parents)):
            if (p >= 0 and p not in new_index) or (p, t) in seen:
                continue  # parent dropped, or duplicate sibling
            seen.add((p, t))
            new_index[i] = len(keep)
            keep.append((t, new_index[p] if p >= 0 else -1))
        tokens, parents = [t for t, _ in keep], [p for _, p in keep]
    return tokens, parents


def spread(tokens, parents, budget: int, slots, pad_token: int = 0):
    """Place the nodes of a packed row at increasing `slots` of a row of length budget (padding gaps in
    between), remapping parents; returns full-length arrays (tokens int32[N], parents int32[N], valid bool[N]).
    Padding carries `pad_token` (tokens of invalid nodes are don't-care and must be ignored)."""
    tok = np.full(budget, pad_token, np.int32)
    par = np.full(budget, -1, np.int32)
    val = np.zeros(budget, bool)
    for i, (t, p) in enumerate(zip(tokens, parents)):
        tok[slots[i]], par[slots[i]], val[slots[i]] = t, (slots[p] if p >= 0 else -1), True
    return tok, par, val


@st.composite
def trees(draw, batch: int = 3, budget: int = 8, vocab: int = 6, min_nodes: int = 0,
          unique_siblings: bool = False, packed: bool = False) -> Tree:
    """Strategy: a valid Tree [batch, budget]: each row its own size, shape and tokens; unless `packed`,
    valid nodes are spread over the row with padding gaps in between."""
    rows = []
    for _ in range(batch):
        tokens, parents = draw(tree_rows(budget, vocab, min_nodes, unique_siblings))
        if packed:
            slots = list(range(len(tokens)))
        else:
            slots = sorted(draw(st.lists(st.integers(0, budget - 1), min_size=len(tokens),
                                         max_size=len(tokens), unique=True)))
        rows.append(spread(tokens, parents, budget, slots, draw(st.integers(0, vocab - 1))))
    tok, par, val = (np.stack(x) for x in zip(*rows))
    return tree_from_arrays(tok, par, val)


def tree_from_arrays(tok, par, val) -> Tree:
    """Tree [B, N] from numpy rows (parents before children), depths computed on the host."""
    dep = np.zeros_like(tok)
    for r in range(tok.shape[0]):
        for i in range(tok.shape[1]):
            if val[r, i]:
                dep[r, i] = 1 if par[r, i] < 0 else dep[r, par[r, i]] + 1
    return Tree(tokens=jnp.asarray(tok, jnp.int32), parents=jnp.asarray(par, jnp.int32),
                depth=jnp.asarray(dep, jnp.int32), valid=jnp.asarray(val, bool))


# ------------------------------------------------------------------------------------------ subjects


def available(target: Target) -> set[str]:
    """What `target` offers a drafter: "target", "draft" when it has a draft LM, and its reader kinds."""
    return {"target"} | ({"draft"} if target.draft is not None else set()) | set(target.readers)


def build(subject, target: Target, draft_params=None):
    """(drafter, draft_params) of `subject` for `target` (module docstring), or None when the target lacks
    what it drafts with (a draft LM, a trained reader) or the drafter does not `validate` for it."""
    if isinstance(subject, str):
        if set(registry.needs_of(subject)) - available(target):
            return None
        m = registry.method(subject, target.cfg, draft=target.draft, target_params=target.params, **target.readers)
        if m.is_ar:
            raise ValueError("'ar' has no drafter to test")
        try:
            m.drafter.validate(target.cfg)  # e.g. a tree wider than the 4-token law target's vocabulary
        except ValueError:
            return None
        return m.drafter, m.params
    if isinstance(subject, Drafter):
        try:
            subject.validate(target.cfg)
        except ValueError:
            return None
        return subject, draft_params
    if callable(subject):
        return subject(target)
    raise TypeError(f"a subject is a method string, a drafter or make(target) -> (drafter, draft_params); "
                    f"got {type(subject).__name__}")
