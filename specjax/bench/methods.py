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
``ddtree-N:ret=U[,width=k,merge=0]``   DDTree + retrieval: DDTree's first N - U prefixes and a
                                       U-node template from the successor table grafted under
                                       the root, N nodes in all (``DDTreeGraftDrafter``)
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
``graft[:f=v,...]``                    Graft (prune-then-graft): EAGLE-3 (base=eagle3, default)
                                       or the draft LM (base=lm) on the EAGLE-2 tree, pruned at
                                       confidence checkpoints, retrieval grafted from the
                                       successor table (``GraftDrafter``); fields topk, depth,
                                       total, width, merge (0/1), thr (t0/t1/t5)
``graft-root`` / ``graft-tail``        Graft(ROOT) = the fixed split without pruning (40 draft
                                       + 20 retrieved at the root every round) / Graft(TAIL)
                                       (the 20-node template under the draft's best deepest leaf)
``graft-prune`` / ``graft-dense``      pruning without retrieval ("w/o retrieval") / neither
                                       (the dense tree through the same code)
``tr[:budget=N,width=k,depth=D]``      Token Recycling: the best-first template of N nodes
                                       filled from the table alone (``TokenRecyclingDrafter``)
``dflash-tail[:thr=t,block=B]``        Graft(TAIL) on chain DFlash: the confident prefix of the
                                       DFlash chain, then the table's rank-0 chain
                                       (``DFlashTailDrafter``; default t = 0.3)
``pld[:ngram=n,num=K]``                prompt lookup: the K tokens after the earliest earlier
                                       occurrence of the last n..1 tokens (``PromptLookupDrafter``)
=====================================  ====================================================

Retrieval tables persist across the benchmark's calls (hot start): the harness passes
each method's table on with the drafter's ``carry_over``.

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
          "dflash[:block=B], ddtree-<N>[:block=B,prune=P,ret=U,width=k,merge=0|1], eagle3[:topk=k,depth=D,total=N], "
          "eagle3-chain<K>, eagle2[:topk=k,depth=D,total=N], domino[:head=0|1,verify=rejection|walk], "
          "graft[-root|-tail|-prune|-dense][:topk=k,depth=D,total=N,width=w,merge=0|1,thr=a/b/c,base=eagle3|lm], "
          "tr[:budget=N,width=k,depth=D], pld[:ngram=n,num=K], dflash-tail[:thr=t,block=B]")


@dataclasses.dataclass(frozen=True)
class Method:
    """A benchmarked method, as `parse_method` builds it.

    Fields:
      name: the canonical spec (aliases resolved, overrides spelled out), e.g. "chain4", "dynatree-p3:d0=4".
      drafter: the drafter object passed to `generate`; None = autoregressive (`generate_ar`, `is_ar`).
      draft_params_override: draft params to use instead of the draft LM's, for drafters that carry their
        own (DFlash / DDTree / Domino params, a `GraftParams`, Token Recycling's table, or a `DynaTreeParams`
        for knob sweeps); None: the draft LM's params. `warm_up` returns a copy with warmed params here.
    """

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

    values = _overrides(overrides, {"block": int, "prune": float, "ret": int, "width": int, "merge": int}, "DDTree")
    block_drafter = _dflash_drafter(spec, dflash, target_cfg, values.get("block"))
    extra = {"prune_mass": values["prune"]} if "prune" in values else {}
    name = f"ddtree-{budget}" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    ddtree = DDTreeDrafter(block_drafter, budget, **extra)
    if not values.get("ret"):
        if "width" in values or "merge" in values:
            raise ValueError(f"DDTree fields 'width' and 'merge' belong to retrieval (ret=U >= 1), got {spec!r}")
        return Method(name, ddtree, draft_params_override=dflash[1])
    from specjax.drafters.ddtree_graft import DDTreeGraftDrafter
    from specjax.drafters.graft import graft_params

    drafter = DDTreeGraftDrafter(ddtree, values["ret"], **{k: (bool(v) if k == "merge" else v)
                                                          for k, v in values.items() if k in ("width", "merge")})
    return Method(name, drafter, draft_params_override=graft_params(dflash[1], target_cfg.vocab_size, drafter.width,
                                                                    ()))


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


_GRAFT_VARIANTS = {"graft": {}, "graft-root": dict(fixed_stage=2), "graft-tail": dict(fixed_stage=2, tail=True),
                   "graft-prune": dict(retrieval=False), "graft-dense": dict(prune=False, retrieval=False)}


def _graft(head: str, overrides: str, spec: str, draft, eagle3, target_cfg):
    from specjax.drafters.dynamic_tree import DraftLMStepper
    from specjax.drafters.graft import PAPER_THRESHOLDS, GraftDrafter, graft_params

    values = _overrides(overrides, {"topk": int, "depth": int, "total": int, "width": int, "merge": int, "thr": str,
                                    "base": str}, "Graft")
    base = values.get("base", "eagle3")
    if base not in ("eagle3", "lm"):
        raise ValueError(f"Graft field 'base' is eagle3 or lm, got {base!r}")
    try:
        thr = tuple(float(x) for x in values["thr"].split("/")) if "thr" in values else PAPER_THRESHOLDS
    except ValueError:
        raise ValueError(f"Graft field 'thr' is three confidences a/b/c, got {values['thr']!r}") from None
    if target_cfg is None:
        raise ValueError(f"method {spec!r} needs the target config (its table has one row per target token)")
    if base == "eagle3":
        if eagle3 is None:
            raise ValueError(f"method {spec!r} needs an EAGLE-3 drafter trained for this target (or base=lm)")
        from specjax.drafters.eagle3 import Eagle3Stepper

        stepper, base_params = Eagle3Stepper(eagle3[0], target_cfg), eagle3[1]
    else:
        if draft is None:
            raise ValueError(f"method {spec!r} needs a draft model (base=lm drafts with it)")
        stepper, base_params = DraftLMStepper(draft[0]), draft[1]
    shape = {{"topk": "top_k"}.get(k, k): v for k, v in values.items() if k in ("topk", "depth", "total", "width")}
    if "merge" in values:
        shape["merge"] = bool(values["merge"])
    drafter = GraftDrafter(stepper, **shape, **_GRAFT_VARIANTS[head])
    name = head + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    return Method(name, drafter, draft_params_override=graft_params(base_params, target_cfg.vocab_size, drafter.width,
                                                                    thr))


def _token_recycling(overrides: str, target_cfg):
    from specjax.drafters.retrieval import empty_table
    from specjax.drafters.token_recycling import TokenRecyclingDrafter

    values = _overrides(overrides, {"budget": int, "width": int, "depth": int}, "Token Recycling")
    if target_cfg is None:
        raise ValueError("method 'tr' needs the target config (its table has one row per target token)")
    drafter = TokenRecyclingDrafter(**values)
    name = "tr" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
    return Method(name, drafter, draft_params_override=empty_table(target_cfg.vocab_size, drafter.width))


def parse_method(spec: str, draft_cfg, *, dflash=None, eagle3=None, domino=None, target_cfg=None,
                 draft_params=None) -> Method:
    """Parse a method spec (see the module docstring) into a `Method` with a canonical name.

    `draft_cfg` is the draft model's config (unused for ``ar``, ``dflash``, ``ddtree``,
    ``eagle3``, ``domino``); `dflash` / `eagle3` / `domino` the drafters that read the target as
    (config, params) and `target_cfg` the target's config (needed by all of those);
    `draft_params` the draft model's params (Graft with base=lm wraps them with its table). Raises
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
    if head in _GRAFT_VARIANTS:
        draft = (draft_cfg, draft_params) if draft_cfg is not None and draft_params is not None else None
        return _graft(head, overrides, spec, draft, eagle3, target_cfg)
    if head == "tr":
        return _token_recycling(overrides, target_cfg)
    if head == "dflash-tail":
        from specjax.drafters.graft import graft_params
        from specjax.drafters.graft_dflash import DFlashTailDrafter

        values = _overrides(overrides, {"thr": float, "block": int}, "Graft(TAIL)-DFlash")
        drafter = DFlashTailDrafter(_dflash_drafter(spec, dflash, target_cfg, values.get("block")))
        name = "dflash-tail" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else "")
        return Method(name, drafter, draft_params_override=graft_params(dflash[1], target_cfg.vocab_size,
                                                                        drafter.width, (values.get("thr", 0.3),)))
    if head == "pld":
        from specjax.drafters.prompt_lookup import PromptLookupDrafter

        values = _overrides(overrides, {"ngram": int, "num": int}, "prompt lookup")
        drafter = PromptLookupDrafter(**{{"ngram": "max_ngram", "num": "num_tokens"}[k]: v for k, v in values.items()})
        return Method("pld" + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values else ""), drafter,
                      draft_params_override={})
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
