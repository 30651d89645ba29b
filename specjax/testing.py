"""The researcher's testing kit: property-test a drafter (yours or a registered method) the way the
project tests its own.

    from specjax import testing
    testing.assert_greedy_lossless("chain3")              # a method by name (the registry builds it)
    testing.assert_greedy_lossless(make)                  # make(target) -> (drafter, draft_params): yours
    testing.check_proposals(make)                         # every proposed tree valid (`specjax.tree.check_tree`)
    testing.assert_sampling_law(make)                     # the sampled law is the target's (enumerated exactly)
    testing.assert_conforms("ddtree-8")                   # the conformance checks tests/test_conformance.py runs

A *subject* is a method string (`specjax.drafters.registry.forms()`), a drafter object (used as is on every
target it `validate`s for; `draft_params` passed along), or a callable ``make(target) -> (drafter, draft_params)``
(None: this target does not suit it) that builds your drafter for a `Target`: its config, params, a draft LM
and the trained drafters that read it.

Targets: `FAMILIES` (tiny random GPT-NeoX / Llama / Qwen2 / Qwen3 targets with a tiny draft LM of their
vocabulary; `tiny_target`, Hypothesis's `tiny_targets`), `zoo_target()` (the embedded *trained* pair,
`specjax.zoo`, with its draft LM and DFlash / EAGLE-3 / Domino drafters: a wrong tree that random weights
never accept is caught there) and `law_target()` (a 4-token target whose law over a few tokens is enumerated).
Strategies (`hypothesis.strategies`): `tiny_targets`, `prompt_batches` (ragged), `eos_sets`, `samplings`,
`trees` / `tree_rows` (valid padded trees), with `spread` and `tree_from_arrays`.

Programs are shared between examples: every target of a family has one config (only its params are
drawn), prompts are padded to one width and EOS sets are traced, so each (family, drafter) compiles once.
Hypothesis is a core dependency of specjax so that this module imports like the rest of the package.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from specjax.zoo import EOS_ID as ZOO_EOS_ID
from specjax.core import generate_ar_core, generate_core
from specjax.decode import cache_sizes, generate, generate_ar, initial_state, speculative_round
from specjax.drafters import registry
from specjax.drafters.protocol import Drafter
from specjax.drafters.spec import render_form
from specjax.equality import compare_with_ar
from specjax.inputs import pad_prompts
from specjax.models import GPTNeoXConfig, LlamaConfig, init_cache, init_params, prefill
from specjax.pipeline import check_source, load_pair
from specjax.sampling import Sampling
from specjax.tree import Tree, check_tree

__all__ = ["FAMILIES", "Conformance", "Target", "assert_conforms", "assert_greedy_lossless", "assert_sampling_law",
           "build", "check_proposals", "eos_sets", "example_spec", "law_target", "perturbed", "prompt_batches",
           "random_params", "registered_methods", "samplings", "spread", "tiny_target", "tiny_targets",
           "tree_from_arrays", "tree_rows", "trees", "zoo_target"]

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
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


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


@jax.jit
def perturbed(params, seed: int, sigma: float = 0.2):
    """Every leaf of a params pytree plus N(0, sigma) noise (one jitted program per pytree structure), so
    biases and norms sit far from their trivial initial values and a layout mistake shows in the logits."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    noisy = [x + sigma * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(treedef, noisy)


@functools.partial(jax.jit, static_argnums=0)
def random_params(cfg, seed):
    """Perturbed random params of a model config: `init_params(cfg, key(seed))` plus N(0, 0.3) noise."""
    return perturbed(init_params(cfg, jax.random.key(seed)), seed + 1, 0.3)


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
    params = perturbed(init_params(_LAW_TARGET, jax.random.key(0)), 1, 0.6)
    draft_params = perturbed(init_params(_LAW_DRAFT, jax.random.key(2)), 3, 0.6)
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


def _available(target: Target) -> set[str]:
    return {"target"} | ({"draft"} if target.draft is not None else set()) | set(target.readers)


def build(subject, target: Target, draft_params=None):
    """(drafter, draft_params) of `subject` for `target` (module docstring), or None when the target lacks
    what it drafts with (a draft LM, a trained reader) or the drafter does not `validate` for it."""
    if isinstance(subject, str):
        if set(registry.needs_of(subject)) - _available(target):
            return None
        m = registry.method(subject, target.cfg, draft=target.draft, target_params=target.params, **target.readers)
        if m.is_ar:
            raise ValueError("'ar' has no drafter to test")
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


def _hypothesis(max_examples: int, shrink: bool):
    phases = tuple(p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain))
    return settings(settings(), max_examples=max_examples, phases=phases, **_SETTINGS)


def _assert_rows_match(target: Target, prompts, ar, spec, what: str) -> None:
    """Every row of `spec` identical to AR's, or parting from it at a near-tie (`specjax.equality`)."""
    for b, prompt in enumerate(prompts):
        n_ar, n_spec = int(ar.num_tokens[b]), int(spec.num_tokens[b])
        agreement = compare_with_ar(target.params, target.cfg, prompt, ar.tokens[b, :n_ar], spec.tokens[b, :n_spec])
        if agreement.kind == "near-tie":
            continue  # after a legitimate near-tie the continuations may differ
        assert agreement.kind == "identical", (f"{what} on target {target.name}: row {b} (prompt {prompt}) differs "
                                               f"from autoregressive greedy decoding: {agreement}")


def assert_greedy_lossless(subject, draft_params=None, *, families=tuple(FAMILIES), zoo: bool = True,
                           max_examples: int = 6, zoo_examples: int = 3, max_new_tokens: int = 12,
                           zoo_new_tokens: int = 32, batch: int = 3,
                           check_trees: bool = False, shrink: bool = True) -> tuple[str, ...]:
    """Greedy `generate` with `subject` equals `generate_ar` token for token (or parts at a near-tie), with
    Hypothesis drawing the target (a random `tiny_targets` of `families`), a ragged prompt batch and an EOS
    set; then the same on the trained `zoo_target` (prompts: prefixes of natural text or random ids,
    `zoo_new_tokens` each), where a drafter's trees are accepted deeply and a wrong position, mask or depth
    changes the output (a depth off by one shifts the positions of the committed keys: the output parts
    from AR's within 32 tokens in most batches, rarely within 12). Random targets the
    subject cannot run on (a method needing trained readers) are skipped; with `zoo`, the zoo must run it.

    Returns the names of the targets checked, in order; raises AssertionError naming the target, the row and where the
    output parted from AR's. `check_trees`: also validate every proposed tree in the loop. Hypothesis's
    settings are the active profile's, with `max_examples`; `shrink=False` reports the first failing example
    as found (faster) instead of the smallest.
    """
    checked = []

    def run(target: Target, prompts, eos, width: int, new_tokens: int):
        built = build(subject, target, draft_params)
        if built is None:
            return
        drafter, dparams = built
        tokens, lengths = pad_prompts(prompts, width)
        ar = generate_ar(target.params, target.cfg, tokens, lengths, new_tokens, eos_ids=eos)
        spec = generate(target.params, target.cfg, drafter, dparams, tokens, lengths, new_tokens, eos_ids=eos,
                        check_trees=check_trees)
        _assert_rows_match(target, prompts, ar, spec, f"{type(drafter).__name__} (EOS {eos})")
        checked.append(target.name)

    if families:
        @_hypothesis(max_examples, shrink)
        @given(st.data())
        def random_targets(data):
            target = data.draw(tiny_targets(families), label="target")
            vocab = target.cfg.vocab_size
            run(target, data.draw(prompt_batches(vocab, batch), label="prompts"),
                data.draw(eos_sets(vocab), label="eos"), 8, max_new_tokens)

        random_targets()
    if zoo:
        target = zoo_target()
        if build(subject, target, draft_params) is None:
            raise AssertionError(f"{subject!r} cannot run on the zoo target (it lacks what it drafts with)")

        @_hypothesis(zoo_examples, shrink)
        @given(st.data())
        def trained_target(data):
            eos = data.draw(st.sampled_from(((), (ZOO_EOS_ID,))), label="eos")
            run(target, data.draw(prompt_batches(target.cfg.vocab_size, batch, 24, target.texts), label="prompts"),
                eos, 24, zoo_new_tokens)

        trained_target()
    return tuple(dict.fromkeys(checked))


def check_proposals(subject, draft_params=None, *, target: Target | None = None, prompts=None, rounds: int = 4,
                    max_new_tokens: int = 16, sampling: Sampling = Sampling(), key=None) -> list[Tree]:
    """Drive the loop round by round (`initial_state`, `speculative_round`) and check every tree `subject`
    proposes for the active rows on the host: `specjax.tree.check_tree` (parents before children,
    prefix-closed, depth = parent depth + 1, normalised padding, tokens in the vocabulary), its shape
    [B, budget], its depth within the drafter's `max_depth`, and draft probs f32[B, D, V] when the drafter
    verifies by chain rejection. target: default the zoo; prompts: default prefixes of its texts.
    Returns the trees checked (one per round); raises AssertionError naming the round, the row and the rule.
    """
    target = target or zoo_target()
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    if prompts is None:
        prompts = [list(t[: 4 + 3 * i]) for i, t in enumerate(target.texts[:3])] or [[1, 2, 3], [4, 5]]
    tokens, lengths = pad_prompts(prompts)
    slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new_tokens)
    static = dict(max_new_tokens=max_new_tokens, eos_ids=(), sampling=sampling)
    start = jax.jit(functools.partial(initial_state, pad_id=0, num_slots=slots, reserve=reserve, **static),
                    static_argnums=(1, 2))
    step = jax.jit(functools.partial(speculative_round, **static), static_argnums=(1, 2))
    propose = jax.jit(lambda s, k: drafter.propose(s.draft_state, s.root, ~s.done, k, sampling)[:2])
    state = start(target.params, target.cfg, drafter, dparams, tokens, lengths,
                  key if key is not None else jax.random.key(0))
    checked = []
    for r in range(rounds):
        if bool(np.all(np.asarray(state.done))):
            break
        _, k_draft, _ = jax.random.split(state.key, 3)  # the round's draft key, as `speculative_round` splits it
        tree, probs = propose(state, k_draft)
        active = np.flatnonzero(~np.asarray(state.done))
        where = f"{type(drafter).__name__} on {target.name}, round {r}"
        assert tree.tokens.shape == (len(prompts), drafter.budget), (
            f"{where}: tree of shape {tree.tokens.shape}, expected [B, budget] = {(len(prompts), drafter.budget)}")
        rows = Tree(*(np.asarray(x)[active] for x in (tree.tokens, tree.parents, tree.depth, tree.valid)))
        try:
            check_tree(rows, vocab_size=target.cfg.vocab_size)
        except ValueError as e:  # check_tree names the row among the active ones
            raise AssertionError(f"{where} (active rows {active.tolist()}): {e}") from None
        deepest = int(np.max(np.where(rows.valid, rows.depth, 0), initial=0))
        assert deepest <= drafter.max_depth, f"{where}: a node at depth {deepest} > max_depth {drafter.max_depth}"
        if drafter.uses_rejection(sampling):
            want = (len(prompts), drafter.max_depth, target.cfg.vocab_size)
            got = getattr(probs, "shape", None)
            assert got == want, f"{where}: draft probs of shape {got}, want {want}"
        checked.append(tree)
        state = step(target.params, target.cfg, drafter, state)
    return checked


def _exact_law(target: Target, prompt, new_tokens: int, sampling: Sampling) -> np.ndarray:
    """P(x_1..x_n | prompt) under the processed target: float64[V] * n, by one prefill of every prefix."""
    v = target.cfg.vocab_size
    prefixes = np.stack(np.meshgrid(*[np.arange(v)] * (new_tokens - 1), indexing="ij"), -1).reshape(-1, new_tokens - 1)
    rows = np.concatenate([np.tile(np.asarray(prompt, np.int32), (len(prefixes), 1)), prefixes], 1).astype(np.int32)
    lengths = np.full((len(rows),), rows.shape[1], np.int32)
    logits, _, _ = prefill(target.params, target.cfg, jnp.asarray(rows), jnp.asarray(lengths),
                           init_cache(target.cfg, len(rows), rows.shape[1]))
    logp = np.asarray(sampling.log_probs(logits), np.float64)[:, len(prompt) - 1:]  # [V^(n-1), n, V]
    steps = np.arange(new_tokens - 1)
    path = logp[np.arange(len(prefixes))[:, None], steps[None], prefixes].sum(1) if new_tokens > 1 else 0.0
    law = np.exp(np.asarray(path)[:, None] + logp[:, new_tokens - 1])  # [V^(n-1), V]
    return (law / law.sum()).reshape((v,) * new_tokens)


def assert_sampling_law(subject, draft_params=None, *, target: Target | None = None, prompt=(1, 3, 2),
                        new_tokens: int = 3, sampling: Sampling = Sampling(1.0), samples: int = 20_000, seed: int = 0,
                        false_alarm: float = 1e-6) -> tuple[float, float]:
    """The law of the first `new_tokens` tokens `generate` samples with `subject` is the target's.

    The reference is exact: the processed target law of every continuation of `prompt` is enumerated
    (target: default `law_target()`, 4 tokens; at most 2**16 continuations). `samples` rows of `prompt` are
    generated at once (each row its own draws). It fails when a sampled continuation has probability 0, when
    the total variation distance between the empirical and the exact law exceeds its bound
    1/2 sum_x sqrt(p(1-p)/N) + sqrt(ln(2/a)/(2N)) (McDiarmid), or when one continuation's frequency leaves
    its Bernstein interval (a union bound over the continuations), a = `false_alarm`: a lossless drafter
    fails with probability below a. Returns (total variation, its bound).
    """
    target = target or law_target()
    v = target.cfg.vocab_size
    if v ** new_tokens > 2**16:
        raise ValueError(f"{v}^{new_tokens} continuations are too many to enumerate: use a smaller target or fewer "
                         f"tokens")
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    law = _exact_law(target, prompt, new_tokens, sampling).ravel()
    tokens, lengths = pad_prompts([list(prompt)] * samples)
    out = generate(target.params, target.cfg, drafter, dparams, tokens, lengths, new_tokens, sampling=sampling,
                   key=jax.random.key(seed), eos_ids=())
    counts = np.bincount(np.ravel_multi_index(np.asarray(out.tokens).T, (v,) * new_tokens), minlength=law.size)
    impossible = np.flatnonzero((counts > 0) & (law == 0))
    what = f"{type(drafter).__name__} on {target.name} ({sampling})"
    assert not len(impossible), f"{what}: sampled continuations of probability 0: {impossible[:5].tolist()}"
    n, a = float(samples), false_alarm / 2
    freq = counts / n
    tv = 0.5 * float(np.abs(freq - law).sum())
    bound = 0.5 * float(np.sqrt(law * (1 - law) / n).sum()) + math.sqrt(math.log(2 / a) / (2 * n))
    assert tv <= bound, f"{what}: total variation {tv:.4f} from the exact law exceeds its bound {bound:.4f}"
    log_term = math.log(4 * law.size / a)
    width = np.sqrt(2 * law * (1 - law) * log_term / n) + 2 * log_term / (3 * n)
    worst = int(np.argmax(np.abs(freq - law) - width))
    assert abs(freq[worst] - law[worst]) <= width[worst], (
        f"{what}: continuation {np.unravel_index(worst, (v,) * new_tokens)} sampled with frequency {freq[worst]:.4f}, "
        f"exact probability {law[worst]:.4f} (allowed +-{width[worst]:.4f})")
    return tv, bound


# ------------------------------------------------------------------------------------------ conformance


def example_spec(spec) -> str:
    """The method string of a registered `MethodSpec` with its default fields; a positional field without a
    default (a chain's K, a tree's N, D, B) gets 3."""
    values = {f.name: 3 if f.default is None else f.default for f in spec.positional}
    return render_form(spec.forms[0], values, spec.positional)


def registered_methods(target: Target | None = None) -> tuple[str, ...]:
    """`example_spec` of every method in the registry (read when called: a method module added to
    `specjax.drafters` is in it) except "ar", that `target` has the models for (default: the zoo's, read
    from its file listing without loading a weight)."""
    have = _available(target) if target is not None else {"target", *check_source("zoo")}
    specs = (example_spec(s) for s in registry.METHOD_SPECS if s.name != "ar")
    return tuple(s for s in specs if set(registry.needs_of(s)) <= have)


@dataclasses.dataclass(frozen=True)
class Conformance:
    """What `assert_conforms` measured (B prompt rows).

    Fields:
      drafter: the drafter checked.
      tau: float64[B] tokens per target forward after the prefill (num_tokens - 1) / rounds.
      rounds: int32[B] target verification forwards per row.
      max_accepted: the most draft tokens accepted in one round.
    """

    drafter: object
    tau: np.ndarray
    rounds: np.ndarray
    max_accepted: int


def _check_stats(out, drafter, what: str) -> Conformance:
    st_, count = out.stats, np.asarray(out.num_tokens)
    accepted, proposed, depth = (np.asarray(x) for x in (st_.accepted, st_.proposed, st_.depth))
    rounds = np.asarray(st_.num_rounds)
    for b, r in enumerate(rounds):
        acc = accepted[b, :r]
        assert (acc >= 0).all() and (accepted[b, r:] == -1).all(), f"{what}: row {b} records {r} rounds: {accepted[b]}"
        assert acc.sum() + r == count[b] - 1, (
            f"{what}: row {b}: its rounds kept {acc.sum() + r} tokens, the output has {count[b] - 1} after the first")
        assert (acc <= depth[b, :r]).all() and (depth[b, :r] <= drafter.max_depth).all(), (
            f"{what}: row {b}: accepted {acc} vs tree depth {depth[b, :r]} (max_depth {drafter.max_depth})")
        assert (acc <= proposed[b, :r]).all(), f"{what}: row {b}: accepted {acc} > proposed {proposed[b, :r]}"
    tau = (count - 1) / np.maximum(rounds, 1)
    np.testing.assert_allclose(tau, np.where(rounds > 0, st_.mean_accepted_length(), 0), err_msg=what)
    return Conformance(drafter, tau, rounds, int(accepted.max(initial=0)))


def assert_conforms(subject, draft_params=None, *, target: Target | None = None, prompts=None,
                    max_new_tokens: int = 10, keys: int = 3) -> Conformance:
    """The checks every registered method passes (tests/test_conformance.py), on `target` (default the zoo):

    * greedy `generate_core` inside the caller's `jax.jit` equals `generate_ar_core` token for token
      (or parts at a near-tie) on `prompts` (default: three prefixes of natural text, one padded width);
    * round statistics agree: tokens = first + sum over rounds of (accepted + 1), accepted <= the proposed
      tree's depth <= max_depth and <= its size, tau = (tokens - 1) / target forwards = mean tokens per round;
    * at T = 1 the first token is the target's draw: with the same key, the loop's first token
      (`initial_state`, through the drafter's tapped prefill) equals `generate_ar_core`'s, for `keys` keys.

    Returns a `Conformance`; raises AssertionError saying which check failed.
    """
    target = target or zoo_target()
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    what = f"{subject if isinstance(subject, str) else type(drafter).__name__} on {target.name}"
    if prompts is None:
        prompts = [list(t[: 5 + 4 * i]) for i, t in enumerate(target.texts[:3])] or [[1, 2, 3], [4, 5], [6]]
    tokens, lengths = pad_prompts(prompts, max(16, max(map(len, prompts))))
    cfg, m = target.cfg, max_new_tokens

    @jax.jit
    def greedy(params, dparams, tokens, lengths):  # the caller's own jit around the core
        return generate_core(params, cfg, drafter, dparams, tokens, lengths, max_new_tokens=m)

    out = greedy(target.params, dparams, tokens, lengths)
    ar = generate_ar_core(target.params, cfg, tokens, lengths, max_new_tokens=m)
    _assert_rows_match(target, prompts, ar, out, what)
    report = _check_stats(out, drafter, what)

    slots, reserve = cache_sizes(drafter, tokens.shape[1], m)
    t1 = Sampling(1.0)
    first = jax.jit(lambda p, dp, t, n, k: initial_state(p, cfg, drafter, dp, t, n, k, max_new_tokens=m, eos_ids=(),
                                                         sampling=t1, pad_id=0, num_slots=slots,
                                                         reserve=reserve).root)
    for seed in range(keys):
        key = jax.random.key(seed)
        ours = np.asarray(first(target.params, dparams, tokens, lengths, key))
        ref = np.asarray(generate_ar_core(target.params, cfg, tokens, lengths, key, max_new_tokens=1, sampling=t1,
                                          eos_ids=()).tokens[:, 0])
        assert (ours == ref).all(), (
            f"{what}: at T = 1 the first tokens {ours} are not the target's draws {ref} (key {seed})")
    return report
