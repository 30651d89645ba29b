"""The researcher's kit (issue 52 items 1-2): `specjax.testing` and `generate(..., check_trees=True)`.

* the on-device tree check (`specjax.tree.tree_violations`) agrees with the host's `check_tree` on valid and
  corrupted trees, row by row;
* `check_trees=True` adds nothing to the compiled round when off (the default for the package's own drafters:
  tests/test_check_trees_default.py); on, a drafter whose
  trees are one level too deep is stopped with an error naming the row, the round, the node and the rule,
  through `generate` and `Pipeline.generate`, while a correct drafter's output is unchanged;
* that depth-off-by-one drafter fails `assert_greedy_lossless` (on the trained zoo target: random weights
  accept too little to see it) and `check_proposals`;
* `assert_sampling_law` accepts chain rejection and rejects a chain that lies about its draft probabilities;
* the strategies draw what they promise, and docs/reusing.md's example runs as written.
"""

import dataclasses
import functools
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import checkify

from specjax import testing, zoo
from specjax.decode import cache_sizes, generate, initial_state, speculative_round
from specjax.drafters.chain import ChainDrafter
from specjax.drafters import registry
from specjax.drafters.registry import Method
from specjax.inputs import pad_prompts
from specjax.models import GPTNeoXConfig, LlamaConfig, init_params, load_checkpoint
from specjax.models.families import load_families
from specjax.pipeline import Pipeline, load_pair
from specjax.sampling import Sampling
from specjax.testing.targets import init_kind
from specjax.tree import TREE_RULES, Tree, check_tree, tree_violations
from tests.planted_drafters import DepthOffByOne, planted

ROOT = pathlib.Path(__file__).resolve().parent.parent


broken_chain = planted(DepthOffByOne)  # make(target): the registry's chain3, one level too deep


# ------------------------------------------------------------------------------ the tree check itself

MAX_DEPTH, VOCAB = 3, 5
_violations = jax.jit(tree_violations, static_argnums=(1, 2))


def host_verdicts(tree: Tree) -> list[str | None]:
    """Per row: check_tree's complaint (plus the depth bound), None for a valid row."""
    out = []
    for r in range(tree.tokens.shape[0]):
        row = Tree(*(np.asarray(x)[r:r + 1] for x in (tree.tokens, tree.parents, tree.depth, tree.valid)))
        try:
            check_tree(row, vocab_size=VOCAB)
            deep = np.asarray(row.valid) & (np.asarray(row.depth) > MAX_DEPTH)
            out.append("too deep" if deep.any() else None)
        except ValueError as e:
            out.append(str(e))
    return out


@st.composite
def corrupted_trees(draw):
    """A valid Tree [2, 6], then (most of the time) one field of one node changed."""
    tree = draw(testing.trees(batch=2, budget=6, vocab=VOCAB))
    arrays = {f: np.array(getattr(tree, f)) for f in ("tokens", "parents", "depth", "valid")}
    field = draw(st.sampled_from(("none", "tokens", "parents", "depth", "valid")))
    if field != "none":
        r, i = draw(st.integers(0, 1)), draw(st.integers(0, 5))
        if field == "valid":
            arrays["valid"][r, i] = ~arrays["valid"][r, i]
        else:
            arrays[field][r, i] = draw(st.integers(-2, 7))
    return Tree(**{f: jnp.asarray(a) for f, a in arrays.items()})


@given(corrupted_trees())
def test_the_device_check_agrees_with_check_tree(tree):
    bad = np.asarray(_violations(tree, MAX_DEPTH, VOCAB))  # [B, N, rules]
    assert bad.shape == (2, 6, len(TREE_RULES))
    for r, verdict in enumerate(host_verdicts(tree)):
        assert bad[r].any() == (verdict is not None), f"row {r}: host says {verdict}, device {np.argwhere(bad[r])}"


# ------------------------------------------------------------------------------ check_trees in the loop


@functools.cache
def zoo_batch():
    zoo = testing.zoo_target()
    drafter, dparams = testing.build("chain3", zoo)
    tokens, lengths = pad_prompts([list(t[:6 + 2 * i]) for i, t in enumerate(zoo.texts[:3])], 16)
    return zoo, drafter, dparams, tokens, lengths


def test_check_trees_is_off_by_default_and_free_when_off():
    """The round lowered with check_trees=False is the default round, op for op; on, it carries the checks."""
    zoo, drafter, dparams, tokens, lengths = zoo_batch()
    static = dict(max_new_tokens=8, eos_ids=(), sampling=Sampling())
    slots, reserve = cache_sizes(drafter, tokens.shape[1], 8)
    state = jax.eval_shape(functools.partial(initial_state, zoo.params, zoo.cfg, drafter, pad_id=0, num_slots=slots,
                                             reserve=reserve, **static), dparams, tokens, lengths, None)

    def lowered(**flag):
        round_ = functools.partial(speculative_round, zoo.params, zoo.cfg, drafter, **static, **flag)
        if flag.get("check_trees"):
            round_ = checkify.checkify(round_, errors=checkify.user_checks)
        return jax.jit(round_).lower(state).as_text()

    default, off, on = lowered(), lowered(check_trees=False), lowered(check_trees=True)
    ops = lambda text: len(re.findall(r"= stablehlo\.\w+", text))  # noqa: E731
    assert off == default
    assert ops(on) > ops(off) + len(TREE_RULES), (ops(on), ops(off))


def test_check_trees_stops_a_tree_one_level_too_deep_and_passes_a_correct_one():
    zoo, drafter, dparams, tokens, lengths = zoo_batch()
    plain = generate(zoo.params, zoo.cfg, drafter, dparams, tokens, lengths, 10)
    checked = generate(zoo.params, zoo.cfg, drafter, dparams, tokens, lengths, 10, check_trees=True)
    np.testing.assert_array_equal(np.asarray(checked.tokens), np.asarray(plain.tokens))
    rule = re.escape(TREE_RULES[2])  # depth = parent depth + 1
    with pytest.raises(checkify.JaxRuntimeError, match=rf"DepthOffByOne .*row 0, round 0, node 0: {rule}"):
        generate(zoo.params, zoo.cfg, DepthOffByOne(drafter), dparams, tokens, lengths, 10, check_trees=True)
    pair = load_pair("zoo", ("draft",))
    pipe = Pipeline(pair, Method("chain3, off by one", DepthOffByOne(drafter), dparams))
    assert pipe.generate("The river flows", 6, check_trees=False)[0].num_tokens == 6  # off: it runs silently
    with pytest.raises(checkify.JaxRuntimeError, match=rf"row 0, round 0, node 0: {rule}"):
        pipe.generate("The river flows", 6, check_trees=True)


def test_a_tree_one_level_too_deep_fails_the_kit():
    """On random weights it may pass (few draft tokens accepted); the trained zoo target catches it alone."""
    with pytest.raises(AssertionError, match="differs from autoregressive greedy decoding"):
        testing.assert_greedy_lossless(broken_chain, families=("gpt-neox",), max_examples=2, shrink=False)
    with pytest.raises(AssertionError, match="on target zoo: row"):  # the trained target alone catches it
        testing.assert_greedy_lossless(broken_chain, families=(), shrink=False)
    with pytest.raises(AssertionError, match=r"round 0 .*depth 2 != parent depth \+ 1 = 1"):
        testing.check_proposals(broken_chain)
    trees = testing.check_proposals("chain3", rounds=3)
    assert len(trees) == 3 and all(np.asarray(t.valid).any() for t in trees)


# ------------------------------------------------------------------------------ the sampling law


@dataclasses.dataclass(frozen=True)
class LyingChainDrafter(ChainDrafter):
    """Broken on purpose: samples its chain from the draft LM but tells the rejection step q = uniform."""

    def choose(self, parent_logits, k, level, key, sampling):
        token, probs = super().choose(parent_logits, k, level, key, sampling)
        return token, None if probs is None else jnp.full_like(probs, 1.0 / probs.shape[-1])


def test_the_sampling_law_accepts_chain_rejection_and_rejects_a_lying_chain():
    law = testing.law_target()
    draft_cfg, draft_params = law.draft
    tv, bound = testing.assert_sampling_law(ChainDrafter(draft_cfg, 2), draft_params)
    assert tv < bound
    with pytest.raises(AssertionError, match="total variation .* exceeds its bound"):
        testing.assert_sampling_law(LyingChainDrafter(draft_cfg, 2), draft_params)
    with pytest.raises(ValueError, match="too many to enumerate"):
        testing.assert_sampling_law(ChainDrafter(draft_cfg, 2), draft_params, new_tokens=9)


# ------------------------------------------------------------------------------ strategies and the docs


@given(st.data())
def test_the_strategies_draw_what_they_promise(data):
    prompts = data.draw(testing.prompt_batches(10, batch=3, max_len=5))
    assert len(prompts) == 3 and all(1 <= len(p) <= 5 and all(0 <= t < 10 for t in p) for p in prompts)
    texts = ((4, 5, 6, 7, 8, 9),)
    for row in data.draw(testing.prompt_batches(10, batch=4, max_len=5, texts=texts)):
        assert 1 <= len(row) <= 5 and all(0 <= t < 10 for t in row)
    eos = data.draw(testing.eos_sets(10))
    assert eos == tuple(sorted(set(eos))) and len(eos) <= 2 and all(0 <= t < 10 for t in eos)
    sampling = data.draw(testing.samplings(greedy=False))
    assert isinstance(sampling, Sampling) and not sampling.greedy
    check_tree(data.draw(testing.trees(batch=2, budget=5, vocab=7, unique_siblings=True)), vocab_size=7,
               unique_siblings=True)


def test_every_family_has_a_tiny_target_with_a_draft_lm_of_its_vocabulary():
    kinds = {name: (type(cfg), getattr(cfg, "flavor", None)) for name, cfg in testing.FAMILIES.items()}
    assert kinds == {"gpt-neox": (GPTNeoXConfig, None), "llama": (LlamaConfig, "llama"),
                     "qwen2": (LlamaConfig, "qwen2"), "qwen3": (LlamaConfig, "qwen3")}
    target = testing.tiny_target("qwen2", 5)
    assert target.draft[0].vocab_size == target.cfg.vocab_size and target.name == "qwen2 seed 5"
    assert testing.example_spec(registry.parse("fixed3x3").spec) == "fixed3x3"


def reusing_example() -> str:
    text = (ROOT / "docs" / "reusing.md").read_text()
    section = text[text.index("## Property-testing your own drafter"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_docs_example_runs_as_written():
    """docs/reusing.md's example (< 30 lines): a drafter of one's own, property-tested with the kit."""
    code = reusing_example()
    assert len(code.strip().splitlines()) < 30
    exec(compile(code, "docs/reusing.md", "exec"), {"__name__": "reusing_example"})


def test_random_params_fill_each_leaf_as_init_params_does_for_every_family():
    """`testing.random_params` draws on the host and names what `init_params` puts in a leaf by its name
    (`testing.targets.init_kind`: norm scales one, biases zero, the rest normal). That naming holds for a
    config of every registered family (targets and draft networks), and the draws have the stated spread."""
    configs = list(testing.FAMILIES.values()) + [load_checkpoint(zoo.path(f"tiny-neox-{kind}"))[0]
                                                  for kind in ("draft", "dflash", "eagle3", "domino")]
    assert {type(c) for c in configs} >= set(load_families()), "a family with no config here: add one"
    for cfg in configs:
        made = jax.tree_util.tree_flatten_with_path(init_params(cfg, jax.random.key(0)))[0]
        drawn = jax.tree_util.tree_flatten_with_path(testing.random_params(cfg, 5, sigma=0.3))[0]
        for (path, x), (path2, y) in zip(made, drawn, strict=True):
            name, x, y = str(path[-1].key), np.asarray(x), np.asarray(y)
            assert path == path2 and x.shape == y.shape and x.dtype == y.dtype, path
            kind = "ones" if np.all(x == 1) else "zeros" if np.all(x == 0) else "normal"
            assert init_kind(name) == kind, f"{type(cfg).__name__} {jax.tree_util.keystr(path)}: {kind}"
            if y.size >= 256:  # the spread: base + N(0, 0.3) (+ N(0, 0.02) for normal leaves), within 5 sigma
                base = {"ones": 1.0, "zeros": 0.0, "normal": 0.0}[kind]
                assert abs(y.mean() - base) < 5 * 0.3 / np.sqrt(y.size) and 0.25 < y.std() < 0.35, path
