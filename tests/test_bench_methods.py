"""Method specs (`specjax.bench.methods.parse_method`, the benchmarks' names read through
`specjax.drafters.registry`): every method family's spec read into the drafter it names, its canonical
name a spec too, the method lists' overrides, and the named error for each bad spec."""

import re

import numpy as np
import pytest

from specjax.bench import harness
from specjax.bench.methods import Method, parse_method
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.ddtree import DDTreeDrafter
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.dynatree import DynaTreeDrafter
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.models import GPTNeoXConfig
from specjax.models.dflash import DFlashConfig

DRAFT = GPTNeoXConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, rotary_dim=8)


@pytest.mark.parametrize("spec, name, drafter", [
    ("ar", "ar", None),
    ("chain4", "chain4", ChainDrafter(DRAFT, 4)),
    ("linear3", "chain3", ChainDrafter(DRAFT, 3)),
    ("chain", "chain4", ChainDrafter(DRAFT, 4)),
    ("fixed5x2", "fixed5x2", FixedTreeDrafter(DRAFT, 5, 2, 256)),
    ("tree4x3n64", "fixed4x3n64", FixedTreeDrafter(DRAFT, 4, 3, 64)),
    ("fixed", "fixed5x2", FixedTreeDrafter(DRAFT, 5, 2, 256)),
    ("dynatree", "dynatree-p3", DynaTreeDrafter(DRAFT, phase=3)),
    ("dynatree-p1", "dynatree-p1", DynaTreeDrafter(DRAFT, phase=1)),
    ("dynatree-p2", "dynatree-p2", DynaTreeDrafter(DRAFT, phase=2)),
    ("dynatree-p3:d0=2,d_max=3,n_max=8", "dynatree-p3:d0=2,d_max=3,n_max=8",
     DynaTreeDrafter(DRAFT, phase=3, d0=2, d_max=3, n_max=8)),
    ("dynatree:tau=0.03, b_max=2", "dynatree-p3:tau=0.03,b_max=2", DynaTreeDrafter(DRAFT, tau=0.03, b_max=2)),
])
def test_parse_method_accepts(spec, name, drafter):
    m = parse_method(spec, DRAFT)
    assert m == Method(name, drafter) and parse_method(m.name, DRAFT) == m  # the name is a spec too
    if isinstance(drafter, DynaTreeDrafter):
        assert isinstance(m.drafter.tau, float) and isinstance(m.drafter.n_max, int)


@pytest.mark.parametrize("spec, message", [
    ("beam4", "unknown method 'beam4'; use one of: ar, chain<K>"),
    ("chainx", "unknown method"),
    ("fixed5", "unknown method"),
    ("fixed5x2n", "unknown method"),
    ("chain0", "num_tokens"),
    ("fixed0x2", "depth must be >= 1"),
    ("dynatree-p4", "dynatree-p1, dynatree-p2 or dynatree-p3"),
    ("dynatree:foo=1", "unknown DynaTree field 'foo'; the fields are d0=<int>, d_max=<int>, b_min=<int>"),
    ("dynatree:d0", "not of the form field=value"),
    ("dynatree:d0=2.5", "'d0' needs an integer, got '2.5'"),
    ("dynatree:tau=abc", "'tau' needs a number, got 'abc'"),
    ("dynatree:d0=3,d0=4", "set twice"),
    ("dynatree:tau_l=0.95", "tau_l < tau_h"),
    ("chain4:k=2", "chain<K> takes no overrides"),
])
def test_parse_method_rejects(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_method(spec, DRAFT)


@pytest.mark.parametrize("text, methods", [
    ("ar,ddtree-8:ret=4,prune=0,dflash", ["ar", "ddtree-8:ret=4,prune=0", "dflash"]),
    ("dynatree-p3:d0=4,tau_h=0.8, chain4 ,", ["dynatree-p3:d0=4,tau_h=0.8", "chain4"]),
    ("ddtree-8", ["ddtree-8"]),
])
def test_a_method_list_keeps_each_methods_own_overrides(text, methods):
    from specjax.drafters.registry import parse, split_methods

    assert split_methods(text) == methods
    for m in methods:
        parse(m)  # each piece is a whole method string


def test_a_method_list_refuses_an_override_without_its_method():
    from specjax.drafters.registry import split_methods

    with pytest.raises(ValueError, match="follows no method with overrides"):
        split_methods("ar,prune=0")


def test_parse_method_needs_a_draft_config_except_for_ar():
    assert parse_method("ar", None).is_ar
    with pytest.raises(ValueError, match="needs a draft model"):
        parse_method("chain4", None)


def _dflash_setup():
    """A random 64-token target, a one-layer block-16 DFlash config for it, and stand-in params (parsing only
    stores them)."""
    target = harness.random_pair(vocab=64)[0][0]
    dcfg = DFlashConfig.for_target(target, num_layers=1, target_layer_ids=(1, 4), block_size=16, mask_token_id=63)
    return target, dcfg, object()


def test_parse_method_dflash():
    target, dcfg, params = _dflash_setup()
    m = parse_method("dflash", None, dflash=(dcfg, params), target_cfg=target)
    assert m.name == "dflash" and m.drafter == DFlashDrafter(dcfg, target) and m.params is params
    assert m.drafter.max_depth == 15 and m.drafter.target_layers == (1, 4)
    m8 = parse_method("dflash:block=8", None, dflash=(dcfg, params), target_cfg=target)
    assert m8.name == "dflash:block=8" and m8.drafter.budget == 7
    assert parse_method(m8.name, None, dflash=(dcfg, params), target_cfg=target) == m8
    for spec, message in (("dflash:block=1", "block size must be >= 2"), ("dflash:depth=3", "the fields are block=<int>"),
                          ("dflash:block=x", "'block' needs an integer")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_method(spec, None, dflash=(dcfg, params), target_cfg=target)
    with pytest.raises(ValueError, match="needs a DFlash drafter trained for this target"):
        parse_method("dflash", DRAFT)


def test_parse_method_ddtree():
    target, dcfg, params = _dflash_setup()
    m = parse_method("ddtree-64", None, dflash=(dcfg, params), target_cfg=target)
    assert m.name == "ddtree-64" and m.drafter == DDTreeDrafter(DFlashDrafter(dcfg, target), 64)
    assert m.params is params and m.drafter.max_depth == 15 and m.drafter.budget == 64
    assert m.drafter.verify_widths == (16, 32, 64) and m.drafter.target_layers == (1, 4)
    m2 = parse_method("DDTree-8:block=4,prune=0", None, dflash=(dcfg, params), target_cfg=target)
    assert m2.name == "ddtree-8:block=4,prune=0.0" and m2.drafter.max_depth == 3 and m2.drafter.verify_widths == (8,)
    assert parse_method(m2.name, None, dflash=(dcfg, params), target_cfg=target) == m2
    for spec, message in (("ddtree-0", "budget (tree nodes per round) must be an int >= 1"),
                          ("ddtree-8:block=1", "block size must be >= 2"), ("ddtree-8:prune=1.5", "prune_mass"),
                          ("ddtree-8:depth=3", "the fields are block=<int>, prune=<float>"),
                          ("ddtree-8:width=3", "'width' and 'merge' belong to retrieval"),
                          ("ddtree-8:ret=8", "retrieval nodes U must be in [1, N)"),
                          ("ddtree-8:prune=x", "'prune' needs a number"), ("ddtree", "ddtree-<N>")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_method(spec, None, dflash=(dcfg, params), target_cfg=target)
    with pytest.raises(ValueError, match="needs a DFlash drafter trained for this target"):
        parse_method("ddtree-16", DRAFT)
    # DDTree + retrieval: the first N - U prefixes and Graft's 20-node (d5) template, a fresh table
    from specjax.drafters.ddtree_graft import DDTreeGraftDrafter
    from specjax.drafters.retrieval import PAPER_TEMPLATES

    g = parse_method("ddtree-60:ret=20", None, dflash=(dcfg, params), target_cfg=target)
    assert g.name == "ddtree-60:ret=20"
    assert g.drafter == DDTreeGraftDrafter(DDTreeDrafter(DFlashDrafter(dcfg, target), 60), 20)
    assert g.drafter.template.counts() == PAPER_TEMPLATES["d5"] and g.drafter.budget == 60
    assert g.params.base is params and g.params.table.shape == (64, 8)
    assert np.all(np.asarray(g.params.table) == -1)
    g2 = parse_method("ddtree-16:ret=5,width=4,merge=0", None, dflash=(dcfg, params), target_cfg=target)
    assert (g2.drafter.width, g2.drafter.merge, g2.drafter.template.size) == (4, False, 5)


def test_parse_method_eagle3_and_dynamic_trees():
    from specjax.drafters.eagle2_tree import DraftLMStepper, Eagle2TreeDrafter
    from specjax.drafters.eagle3 import Eagle3Stepper
    from specjax.models.eagle3 import Eagle3Config

    target = harness.random_pair(vocab=64)[0][0]
    ecfg = Eagle3Config.for_target(target)
    params = object()
    m = parse_method("eagle3", None, eagle3=(ecfg, params), target_cfg=target)
    assert m.name == "eagle3" and m.params is params
    assert m.drafter == Eagle2TreeDrafter(Eagle3Stepper(ecfg, target), top_k=10, depth=8, total=60)
    assert (m.drafter.budget, m.drafter.max_depth, m.drafter.target_layers) == (60, 9, ecfg.target_layer_ids)
    m2 = parse_method("EAGLE3:topk=4,depth=5,total=16", None, eagle3=(ecfg, params), target_cfg=target)
    assert m2.name == "eagle3:topk=4,depth=5,total=16" and (m2.drafter.top_k, m2.drafter.depth) == (4, 5)
    assert parse_method(m2.name, None, eagle3=(ecfg, params), target_cfg=target) == m2
    c = parse_method("eagle3-chain6", None, eagle3=(ecfg, params), target_cfg=target)
    assert c.name == "eagle3-chain6" and (c.drafter.top_k, c.drafter.depth, c.drafter.total) == (1, 5, 6)
    lm = parse_method("eagle2:topk=3", DRAFT)
    assert lm.drafter == Eagle2TreeDrafter(DraftLMStepper(DRAFT), top_k=3) and lm.params is None
    for spec, message in (("eagle3:width=3", "the fields are topk=<int>, depth=<int>, total=<int>"),
                          ("eagle3:total=0", "total must lie in [1, 810]"), ("eagle3:topk=0", "top_k must be >= 1"),
                          ("eagle3-chain0", "K >= 1"), ("eagle3-chain4:topk=2", "takes no overrides")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_method(spec, None, eagle3=(ecfg, params), target_cfg=target)
    with pytest.raises(ValueError, match="needs an EAGLE-3 drafter trained for this target"):
        parse_method("eagle3", DRAFT, dflash=(ecfg, params))
    with pytest.raises(ValueError, match="needs a draft model"):
        parse_method("eagle2", None, eagle3=(ecfg, params), target_cfg=target)


def test_parse_method_domino():
    from specjax.drafters.domino import DominoDrafter
    from specjax.models.domino import DominoConfig

    target = harness.random_pair(vocab=64)[0][0]
    dcfg = DominoConfig.for_target(target, num_layers=1, target_layer_ids=(1,), mask_token_id=63)
    params = object()
    m = parse_method("domino", None, domino=(dcfg, params), target_cfg=target)
    assert m.name == "domino" and m.params is params
    assert m.drafter == DominoDrafter(dcfg, target) and (m.drafter.budget, m.drafter.max_depth) == (15, 15)
    off = parse_method("Domino:head=0,verify=walk", None, domino=(dcfg, params), target_cfg=target)
    assert off.name == "domino:head=0,verify=walk" and not off.drafter.use_head and off.drafter.verify == "walk"
    assert parse_method(off.name, None, domino=(dcfg, params), target_cfg=target) == off
    for spec, message in (("domino:head=2", "'head' is 0 (backbone only) or 1"), ("domino:verify=greedy", "'verify'"),
                          ("domino:block=4", "the fields are head=<int>, verify=<str>")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_method(spec, None, domino=(dcfg, params), target_cfg=target)
    with pytest.raises(ValueError, match="needs a Domino drafter trained for this target"):
        parse_method("domino", DRAFT, dflash=(dcfg, params), target_cfg=target)
