"""Method specs for the benchmarks and the CLI: a short string -> a drafter.

=====================================  ====================================================
spec                                   method
=====================================  ====================================================
``ar``                                 plain autoregressive decoding (the baseline)
``chain<K>`` / ``linear<K>``           a draft-LM chain of K tokens (``ChainDrafter``)
``fixed<D>x<B>[n<N>]`` / ``tree...``   a fixed tree: top-B children per node down to depth D,
                                       at most N nodes (default 256) (``FixedTreeDrafter``)
``dynatree`` = ``dynatree-p3``,        DynaTree, Phase 1 / 2 / 3 of the paper's ablation
``dynatree-p1``, ``dynatree-p2``       (``DynaTreeDrafter``, paper defaults)
``<dynatree spec>:f=v,f=v``            the same with ``DynaTreeDrafter`` fields overridden,
                                       e.g. ``dynatree-p3:d0=4,tau=0.03,n_max=64``
``dynatree-zoo``                       Phase 3 tuned for the embedded pair (``PRESETS``)
``dflash`` / ``dflash:block=B``        chain DFlash: one drafter forward reading the target's
                                       features, argmax per position, a chain of B - 1 tokens
                                       (``DFlashDrafter``; B defaults to the trained block)
``ddtree-N[:block=B,prune=P]``         DDTree: the same drafter forward, the N most probable
                                       prefixes under its marginals, verified as one tree
                                       (``DDTreeDrafter``; P = prune_mass, 0 = full tree)
``eagle3[:topk=k,depth=D,total=N]``    EAGLE-3 (reads the target's low/mid/high features) on
                                       the EAGLE-2 dynamic tree (``DynamicTreeDrafter``;
                                       defaults top_k 10, depth 8, total 60 as in Graft)
``eagle3-chain<K>``                    EAGLE-3 drafting a greedy chain of K tokens (the
                                       dynamic tree with top_k 1, depth K - 1, total K)
``eagle2[:topk=k,depth=D,total=N]``    the EAGLE-2 dynamic tree over the draft LM
``domino[:head=0,verify=walk]``        Domino: the DFlash backbone forward + the GRU / low-rank
                                       causal correction rolled out draft by draft, a chain of
                                       K tokens (``DominoDrafter``); head=0 drafts from the
                                       backbone alone (same weights); verify = rejection
                                       (default) or walk at T > 0
=====================================  ====================================================

Bare ``chain`` / ``linear``, ``fixed`` / ``tree`` are aliases of ``chain4`` and
``fixed5x2`` (the CLI's historical ``--method`` values). Depths count draft tokens on a
root-to-leaf path (our convention; the DynaTree authors' "D" trees hold D + 1).
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["ALIASES", "PRESETS", "Method", "dynatree_fields", "parse_method"]

ALIASES = {"chain": "chain4", "linear": "chain4", "fixed": "fixed5x2", "tree": "fixed5x2", "dynatree": "dynatree-p3"}

# Named configurations. `dynatree-zoo`: Phase 3 tuned for the embedded pair (specjax.zoo) on
# *validation* wiki prompts (notebooks/dynatree.py): its weak draft is rarely confident, so
# the paper's gates (rho_stop 0.1, tau 0.05) stop paths after one or two tokens, and on a
# CPU every verified node costs target time: narrow (B_max 2, B_mid 1, a second child only
# when c(u) < 0.1), small (N_max 16), loosely gated trees pay best.
PRESETS = {"dynatree-zoo": "dynatree-p3:n_max=16,d_max=6,d0=5,b_mid=1,b_max=2,tau_l=0.1,rho_stop=0.00001,"
                           "rho_deep=0.00005,tau=0.001"}

_CHAIN = re.compile(r"(?:chain|linear)(\d+)")
_FIXED = re.compile(r"(?:fixed|tree)(\d+)x(\d+)(?:n(\d+))?")
_DYNATREE = re.compile(r"dynatree(?:-p([0-9]+))?")
_DDTREE = re.compile(r"ddtree-(\d+)")
_EAGLE3_CHAIN = re.compile(r"eagle3-chain(\d+)")
_DYNAMIC_FIELDS = {"topk": int, "depth": int, "total": int}
_FORMS = ("ar, chain<K> (linear<K>), fixed<D>x<B>[n<N>] (tree<D>x<B>[n<N>]), dynatree[-p1|-p2|-p3][:field=value,...], "
          "dflash[:block=B], ddtree-<N>[:block=B,prune=P], eagle3[:topk=k,depth=D,total=N], eagle3-chain<K>, "
          "eagle2[:topk=k,depth=D,total=N], domino[:head=0|1,verify=rejection|walk]")


@dataclasses.dataclass(frozen=True)
class Method:
    """A benchmarked method: `name` (canonical spec), `drafter` (None = autoregressive) and
    optional draft params to use instead of the draft model's (e.g. a `DynaTreeParams`)."""

    name: str
    drafter: object | None
    draft_params_override: object | None = None

    @property
    def is_ar(self) -> bool:
        return self.drafter is None


def dynatree_fields() -> dict[str, type]:
    """The overridable `DynaTreeDrafter` fields (those with an int / float / bool default) and their types."""
    from specjax.drafters.dynatree import DynaTreeDrafter

    out = {}
    for f in dataclasses.fields(DynaTreeDrafter):
        default = f.default
        if f.name != "phase" and isinstance(default, (bool, int, float)):
            out[f.name] = type(default)
    return out


def _parse_value(field: str, kind: type, text: str):
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind is int:
            return int(text)
        return float(text)
    except ValueError:
        what = {bool: "true or false", int: "an integer", float: "a number"}[kind]
        raise ValueError(f"DynaTree field {field!r} needs {what}, got {text!r}") from None


def _dynatree(phase: int, overrides: str, draft_cfg):
    from specjax.drafters.dynatree import DynaTreeDrafter

    fields, values = dynatree_fields(), {}
    for item in filter(None, (s.strip() for s in overrides.split(","))):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not text.strip():
            raise ValueError(f"DynaTree override {item!r} is not of the form field=value")
        if key not in fields:
            raise ValueError(f"unknown DynaTree field {key!r}; valid fields: {', '.join(sorted(fields))}")
        if key in values:
            raise ValueError(f"DynaTree field {key!r} is set twice")
        values[key] = _parse_value(key, fields[key], text.strip())
    drafter = DynaTreeDrafter(draft_cfg, phase=phase, **values)
    name = f"dynatree-p{phase}" + (":" + ",".join(f"{k}={values[k]}" for k in values) if values else "")
    return Method(name, drafter)


def _overrides(text: str, kinds: dict[str, type], what: str) -> dict:
    """'k=v,k=v' -> {k: kind(v)} for the fields in `kinds`, with errors naming the method and field."""
    values = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        if key not in kinds or not eq:
            raise ValueError(f"{what} override {item!r}: the fields are " + ", ".join(f"{k}=<{t.__name__}>" for k, t in
                                                                                      kinds.items()))
        if key in values:
            raise ValueError(f"{what} field {key!r} is set twice")
        try:
            values[key] = kinds[key](value)
        except ValueError:
            raise ValueError(f"{what} field {key!r} needs {'an integer' if kinds[key] is int else 'a number'}, "
                             f"got {value!r}") from None
    return values


def _dflash_drafter(spec: str, dflash, target_cfg, block):
    from specjax.drafters.dflash import DFlashDrafter

    if dflash is None or target_cfg is None:
        raise ValueError(f"method {spec!r} needs a DFlash drafter trained for this target (and the target config)")
    return DFlashDrafter(dflash[0], target_cfg, block_size=block)


def _dflash(overrides: str, spec: str, dflash, target_cfg):
    block = _overrides(overrides, {"block": int}, "DFlash").get("block")
    name = "dflash" + (f":block={block}" if block is not None else "")
    return Method(name, _dflash_drafter(spec, dflash, target_cfg, block), draft_params_override=dflash[1])


def _ddtree(budget: int, overrides: str, spec: str, dflash, target_cfg):
    from specjax.drafters.ddtree import DDTreeDrafter

    values = _overrides(overrides, {"block": int, "prune": float}, "DDTree")
    block_drafter = _dflash_drafter(spec, dflash, target_cfg, values.get("block"))
    extra = {"prune_mass": values["prune"]} if "prune" in values else {}
    name = f"ddtree-{budget}" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    return Method(name, DDTreeDrafter(block_drafter, budget, **extra), draft_params_override=dflash[1])


def _dynamic_tree(head: str, overrides: str, spec: str, draft_cfg, eagle3, target_cfg):
    """eagle3[:...], eagle3-chain<K> (EAGLE-3 stepper) or eagle2[:...] (draft-LM stepper) on the dynamic tree."""
    from specjax.drafters.dynamic_tree import DraftLMStepper, DynamicTreeDrafter

    chain = _EAGLE3_CHAIN.fullmatch(head)
    if chain and overrides:
        raise ValueError(f"eagle3-chain<K> takes no overrides (it is top_k 1, depth K - 1, total K), got {spec!r}")
    values = _overrides(overrides, _DYNAMIC_FIELDS, "dynamic tree")
    shape = dict(top_k=1, depth=int(chain.group(1)) - 1, total=int(chain.group(1))) if chain else {
        ("top_k" if k == "topk" else k): v for k, v in values.items()}
    if chain and shape["total"] < 1:
        raise ValueError(f"eagle3-chain<K> needs K >= 1, got {spec!r}")
    name = head + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    if head == "eagle2":
        if draft_cfg is None:
            raise ValueError(f"method {spec!r} needs a draft model (the dynamic tree drafts with it)")
        return Method(name, DynamicTreeDrafter(DraftLMStepper(draft_cfg), **shape))
    if eagle3 is None or target_cfg is None:
        raise ValueError(f"method {spec!r} needs an EAGLE-3 drafter trained for this target (and the target config)")
    from specjax.drafters.eagle3 import Eagle3Stepper

    return Method(name, DynamicTreeDrafter(Eagle3Stepper(eagle3[0], target_cfg), **shape),
                  draft_params_override=eagle3[1])


def _domino(overrides: str, spec: str, domino, target_cfg):
    from specjax.drafters.domino import VERIFY_RULES, DominoDrafter

    if domino is None or target_cfg is None:
        raise ValueError(f"method {spec!r} needs a Domino drafter trained for this target (and the target config)")
    values = _overrides(overrides, {"head": int, "verify": str}, "Domino")
    if values.get("head", 1) not in (0, 1):
        raise ValueError(f"Domino field 'head' is 0 (backbone only) or 1, got {values['head']}")
    if values.get("verify", "rejection") not in VERIFY_RULES:
        raise ValueError(f"Domino field 'verify' is one of {', '.join(VERIFY_RULES)}, got {values['verify']!r}")
    name = "domino" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    drafter = DominoDrafter(domino[0], target_cfg, use_head=bool(values.get("head", 1)),
                            verify=values.get("verify", "rejection"))
    return Method(name, drafter, draft_params_override=domino[1])


def parse_method(spec: str, draft_cfg, *, dflash=None, eagle3=None, domino=None, target_cfg=None) -> Method:
    """Parse a method spec (see the module docstring) into a `Method` with a canonical name.

    `draft_cfg` is the draft model's config (unused for ``ar``, ``dflash``, ``ddtree``,
    ``eagle3``, ``domino``); `dflash` / `eagle3` / `domino` the drafters that read the target as
    (config, params) and `target_cfg` the target's config (needed by all of those). Raises
    ValueError naming the accepted forms for an unknown spec, the valid
    fields for an unknown override, and the drafter's own message for an invalid parameter.
    """
    from specjax.drafters.chain import ChainDrafter
    from specjax.drafters.fixed_tree import FixedTreeDrafter

    text = spec.strip()
    text = PRESETS.get(text.lower(), text)
    head, colon, overrides = text.partition(":")
    head = ALIASES.get(head.lower(), head.lower())
    if head == "ar" and not colon:
        return Method("ar", None)
    if head == "dflash":
        return _dflash(overrides, spec, dflash, target_cfg)
    if head == "domino":
        return _domino(overrides, spec, domino, target_cfg)
    if m := _DDTREE.fullmatch(head):
        return _ddtree(int(m.group(1)), overrides, spec, dflash, target_cfg)
    if head in ("eagle3", "eagle2") or _EAGLE3_CHAIN.fullmatch(head):
        return _dynamic_tree(head, overrides, spec, draft_cfg, eagle3, target_cfg)
    if head.startswith("ddtree"):
        raise ValueError(f"DDTree needs its node budget in the spec, ddtree-<N> (e.g. ddtree-64), got {spec!r}")
    if draft_cfg is None:
        raise ValueError(f"method {spec!r} needs a draft model (only 'ar' runs without one)")
    if m := _DYNATREE.fullmatch(head):
        if m.group(1) not in ("1", "2", "3"):
            raise ValueError(f"unknown DynaTree phase in {spec!r}: use dynatree-p1, dynatree-p2 or dynatree-p3")
        return _dynatree(int(m.group(1)), overrides, draft_cfg)
    if colon:
        raise ValueError(f"only DynaTree methods take ':field=value' overrides, got {spec!r}")
    if m := _CHAIN.fullmatch(head):
        return Method(f"chain{int(m.group(1))}", ChainDrafter(draft_cfg, int(m.group(1))))
    if m := _FIXED.fullmatch(head):
        depth, branching = int(m.group(1)), int(m.group(2))
        nodes = int(m.group(3)) if m.group(3) else 256
        name = f"fixed{depth}x{branching}" + (f"n{nodes}" if nodes != 256 else "")
        return Method(name, FixedTreeDrafter(draft_cfg, depth, branching, nodes))
    raise ValueError(f"unknown method {spec!r}; use one of: {_FORMS}")
