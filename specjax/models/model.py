"""Pure entry points over any supported architecture: init, forward, prefill.

A model is a frozen config (static under jit) plus a plain params pytree:

    params = {"embed": {"embedding": [V, E]},     # the same outer names for every architecture
              "final_norm": {...},
              "head": {"kernel": [E, V]},         # absent when tied to the embedding
              "layers": {<block params>: ...}}    # every leaf stacked on a leading [L] axis

The architecture's NNX modules are rebuilt from the params inside the traced function
(`nnx.merge`), and the stacked `Block` is scanned over layers with `lax.scan`, so one
layer is compiled once whatever the depth.

The uniform forward appends T pending tokens at explicit positions with an
intra-block mask on top of each row's committed cache prefix; prefill, one-token
decoding and tree verification are all this function with different masks.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.inputs import WrongConfigError, as_prompt_batch, check_positions, pad_prompts, raise_on_mismatch
from specjax.models import gpt_neox, llama
from specjax.models.families import FAMILIES, MODEL_TYPES, load_families
from specjax.models.cache import (KVCache, PendingRows, advance, check_capacity, commit, init_cache,
                                   per_layer_cache, stacked_cache)
from specjax.models.hf_config import UnsupportedConfigError
from specjax.models.layers import LayerKV, cache_attention_mask, visible_slots
from specjax.numerics import DEFAULT_PRECISION, check_precision, matmul_scope

ModelConfig = Union[gpt_neox.GPTNeoXConfig, llama.LlamaConfig]
load_families()  # every architecture and draft network registers itself where it is defined

def family(cfg: ModelConfig):
    """The architecture module (`gpt_neox` or `llama`) implementing `cfg`."""
    try:
        return FAMILIES[type(cfg)].module
    except KeyError:
        raise TypeError(f"not a specjax model config: {type(cfg).__name__}") from None


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """Build a config from a HF `config.json` dict; unknown model types or fields raise. A draft network's
    published layout (z-lab/dflash's Qwen3 config with `dflash_config`, SpecForge's Domino, EAGLE-3's Llama
    config with `draft_vocab_size`) is recognised by the detector its family registered (`Family.reference`)."""
    for fam in sorted((f for f in FAMILIES.values() if f.reference), key=lambda f: f.reference_order):
        is_reference, from_reference = fam.reference
        if is_reference(hf):
            return from_reference(hf)
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedConfigError(
            f"model_type {model_type!r} is not supported; supported: {sorted(MODEL_TYPES)}"
        )
    return MODEL_TYPES[model_type].from_hf(hf)


@functools.lru_cache(maxsize=None)
def _abstract(cfg: ModelConfig, part: str, dtype_name: str):
    """(graphdef, abstract state) of the Outer or Block module for `cfg` — no allocation."""
    cls = getattr(family(cfg), part)  # a module class or a factory function
    module = nnx.eval_shape(lambda: cls(cfg, jnp.dtype(dtype_name), nnx.Rngs(0)))
    return nnx.split(module)


def _merge(cfg: ModelConfig, part: str, pure: dict) -> nnx.Module:
    leaf = jax.tree.leaves(pure)[0]
    graphdef, abstract = _abstract(cfg, part, jnp.dtype(leaf.dtype).name)
    state = jax.tree.map(lambda x: x, abstract)  # fresh copy: replace_by_pure_dict mutates
    nnx.replace_by_pure_dict(state, pure)
    return nnx.merge(graphdef, state)


def merge_module(cfg, part: str, pure: dict) -> nnx.Module:
    """The `part` ("Outer" or "Block") NNX module of `cfg`'s family holding the plain params `pure`
    (for code outside this file that runs one block or the outer layers itself, e.g. DFlash)."""
    return _merge(cfg, part, pure)


@functools.partial(jax.jit, static_argnames=("cfg", "dtype"))
def init_params(cfg: ModelConfig, key: jax.Array, dtype=jnp.float32) -> dict:
    """Random params for `cfg` (normal(0.02) weights, unit norms, zero biases). Jitted: one
    compilation per config instead of one per leaf shape (the threefry sampler's compilations
    dominated a tiny model's set-up on CPU)."""
    fam = family(cfg)
    k_outer, k_layers = jax.random.split(key)
    outer = nnx.to_pure_dict(nnx.state(fam.Outer(cfg, dtype, nnx.Rngs(k_outer))))

    def one_layer(k):
        return nnx.to_pure_dict(nnx.state(fam.Block(cfg, dtype, nnx.Rngs(k))))

    layers = jax.vmap(one_layer)(jax.random.split(k_layers, cfg.num_layers))
    return {**outer, "layers": layers}


def param_shapes(cfg: ModelConfig, dtype=jnp.float32) -> dict:
    """The params pytree of `cfg` as `jax.ShapeDtypeStruct`s (what a checkpoint must fill)."""
    return jax.eval_shape(lambda: init_params(cfg, jax.random.key(0), dtype))


@functools.partial(jax.jit, static_argnames=("cfg", "feature_layers", "with_logits", "write_cache"))
def forward_tapped(
    params: dict,
    cfg: ModelConfig,
    tokens: jax.Array,
    positions: jax.Array,
    block_mask: jax.Array,
    cache: KVCache,
    feature_layers: tuple[int, ...] = (),
    region_offset: int | jax.Array = 0,
    with_logits: bool = True,
    write_cache: bool = True,
):
    """`forward` that also returns the outputs of chosen decoder layers (the features a
    drafter reads from the target): always (logits, cache, features).

    feature_layers: static 0-based decoder layer indices l; feature l is the residual
    stream *after* block l, before the final norm (HF `output_hidden_states[l + 1]`).
    Only those layers are kept: each is written into a [n, B, T, E] carry inside the
    layer scan when its layer runs, never a stack of all L + 1 layers.
    Returns (logits f32[B, T, V], cache, features [B, T, n, E] in the params' dtype);
    with no layers requested features has n = 0; `with_logits=False` skips the LM head (logits None).
    `write_cache=False`: the block's K/V are attended where they would be written but not written; the second
    output is then their `PendingRows` ([L, B, T, K, D]; `cache.write_rows` writes them): a forward inside a
    `lax.switch` branch leaves the cache untouched, so XLA need not copy it (`LayerKV.deferred`).
    """
    check_feature_layers(cfg, feature_layers)
    outer = _merge(cfg, "Outer", outer_params(params))
    mask = cache_attention_mask(cache.lengths, block_mask, cache.num_slots)  # [B, T, S]
    write_at = cache.lengths + region_offset  # [B]
    visible = visible_slots(cache.lengths, block_mask.shape[2])  # attention reads no slot past it
    embeddings = outer.embed_tokens(tokens)  # [B, T, E]
    wanted = jnp.asarray(feature_layers, jnp.int32).reshape(-1)  # [n]
    features = jnp.zeros((len(feature_layers),) + embeddings.shape, embeddings.dtype)  # [n, B, T, E]

    def layer(carry, xs):
        """Decoder layer i on (x, K cache, V cache, features); the cache's own layer axis is read at
        `slot` (i in a stacked cache, 0 in a per-layer one). Outputs the layer's new (K, V) rows when they
        are held apart (`write_cache=False`), else None."""
        x, k_cache, v_cache, feats = carry
        layer_params, i, slot = xs
        block = _merge(cfg, "FusedBlock" if llama.is_fused(layer_params) else "Block", layer_params)
        kv = LayerKV(k=k_cache, v=v_cache, layer=slot, write_at=write_at, visible=visible, deferred=not write_cache)
        x, kv = block(x, positions, mask, kv)
        if feature_layers:  # keep x in the slots that asked for layer i
            feats = jnp.where((wanted == i)[:, None, None, None], x[None].astype(feats.dtype), feats)
        return (x, kv.k, kv.v, feats), (None if write_cache else (kv.new_k, kv.new_v))

    # One traced copy per layer, each reading its own arrays (`unstack_layers`): always for unstacked
    # params, for one-token steps of "dual" ones (`LAYOUTS`); else the layer scan.
    per_layer = params["layers"] if is_unstacked(params) else params.get(LAYER_COPIES) if tokens.shape[1] == 1 else None
    if cache.per_layer and per_layer is None:
        raise ValueError(f"a per-layer KV cache is read by per-layer forwards only (unstacked params, or dual params "
                         f"at one token); these are {layout_of(params)} params with {tokens.shape[1]} tokens: "
                         f"use stacked_cache(cache), or with_layout(params, 'unstacked')")
    rows = []  # per layer: its new (K, V) rows, when held apart
    if cache.per_layer:  # each layer appends to and reads its own cache arrays (`per_layer_cache`)
        x, k, v = embeddings, list(cache.k), list(cache.v)
        for i, layer_params in enumerate(per_layer):
            (x, k[i], v[i], features), new = layer((x, k[i], v[i], features), (layer_params, i, 0))
            rows.append(new)
        k, v = tuple(k), tuple(v)
    else:
        carry = (embeddings, cache.k, cache.v, features)
        if per_layer is not None:
            for i, layer_params in enumerate(per_layer):
                carry, new = layer(carry, (layer_params, i, i))
                rows.append(new)
        else:
            ids = jnp.arange(cfg.num_layers)
            carry, stacked = jax.lax.scan(layer, carry, (params["layers"], ids, ids))
            rows = None if write_cache else stacked  # ([L, B, T, K, D], [L, B, T, K, D])
        x, k, v, features = carry
    logits = outer.logits(x) if with_logits else None
    if write_cache:
        return logits, KVCache(k=k, v=v, lengths=cache.lengths), jnp.moveaxis(features, 0, 2)
    if isinstance(rows, list):
        rows = (jnp.stack([r[0] for r in rows]), jnp.stack([r[1] for r in rows]))
    return logits, PendingRows(k=rows[0], v=rows[1]), jnp.moveaxis(features, 0, 2)


@functools.partial(jax.jit, static_argnames=("cfg", "feature_layers"))
def layer_features(params: dict, cfg: ModelConfig, tokens: jax.Array, feature_layers: tuple[int, ...]) -> jax.Array:
    """The chosen layers' outputs for whole sequences, as `forward_tapped` taps them: a causal
    forward of int32[B, S] from position 0 that runs only the layers up to max(feature_layers)
    and no LM head (what a feature cache stores). Returns [B, S, n, E] in the params' dtype."""
    check_feature_layers(cfg, feature_layers)
    if not feature_layers:
        raise ValueError("layer_features needs at least one feature layer")
    b, s = tokens.shape
    run = max(feature_layers) + 1
    short_cfg = dataclasses.replace(cfg, num_layers=run)
    layers = params["layers"]  # the first `run` layers, in the params' own layout (no restacking)
    short = {**outer_params(params),
             "layers": layers[:run] if is_unstacked(params) else jax.tree.map(lambda x: x[:run], layers)}
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    cache = init_cache(short_cfg, b, s, jax.tree.leaves(params)[0].dtype)
    _, _, feats = forward_tapped(short, short_cfg, tokens, positions, causal_mask(b, s), cache, feature_layers,
                                 with_logits=False)
    return feats


@functools.partial(jax.jit, static_argnames=("cfg",))
def forward(
    params: dict,
    cfg: ModelConfig,
    tokens: jax.Array,
    positions: jax.Array,
    block_mask: jax.Array,
    cache: KVCache,
    region_offset: int | jax.Array = 0,
):
    """Append T pending tokens to every row of the cache and return their logits.

    tokens, positions: int32[B, T]; block_mask: bool[B, T, R] — which slots of the
    *pending region* (the R slots after each row's committed prefix) each token attends
    to: causal [B, T, T] for prefill/decode, the ancestor mask for a tree. Token t is
    written at region slot region_offset + t, so a tree can also be built level by
    level: each level is written after the previous ones and masks in its ancestors.
    The cache needs room for lengths + max(R, region_offset + T) slots in every row.

    Returns (logits f32[B, T, V], cache with the pending K/V written and `lengths`
    unchanged — see `commit`). `forward_tapped` also returns chosen layers' features.
    """
    logits, cache, _ = forward_tapped(params, cfg, tokens, positions, block_mask, cache, (), region_offset)
    return logits, cache


# The layouts of a model's layer params (`with_layout`):
#   stacked    one [L, ...] array per leaf, scanned: one compiled layer; the layout of checkpoints,
#              sharding and training, and of accelerators;
#   unstacked  a tuple of L per-layer dicts (`unstack_layers`): on a CPU the faster one-token decode
#              step and the faster speculative round (inside the decode loop the scan's per-layer
#              weight copies cost a DDTree round on SmolLM2 more than its products, docs/results.md),
#              a longer first compile;
#   dual       both: the stacked arrays plus per-layer copies under LAYER_COPIES, used by one-token
#              steps only (twice the weight memory; the scanned forwards of several tokens keep the
#              stacked layout's compile times; the data engine's scanned refills of 128 rows).
LAYOUTS = ("stacked", "unstacked", "dual")
LAYER_COPIES = "layer_copies"


def unstack_layers(params: dict) -> dict:
    """The same params with "layers" as a tuple of L per-layer dicts (leaves without the [L] axis):
    `forward` then runs the layers as L traced copies, each reading its own weight arrays. With the
    stacked layout the layer scan slices layer i out of every [L, ...] leaf, and XLA:CPU copies that
    slice before its products: at batch 1 a one-token step spends about as long on the copies as on
    the matrix-vector products themselves (SmolLM2-135M on 2 cores: 44.2 ms per decode step stacked,
    30.5 ms unstacked; `python -m specjax bench-device --shapes smollm2-135m`, docs/results.md). Inside
    the decode loop the copies cost forwards of several tokens as much (SmolLM2, DDTree-8 and chain DFlash
    in one process: 1.05x / 0.95x AR dual, 1.10x / 1.24x unstacked). Same outputs (tested against
    transformers in every layout); compiling takes longer (one copy of the layer per layer). Inverse:
    `stack_layers`. Idempotent.

    A Llama-family layer is also fused (`specjax.models.llama.fuse_layer`: q | k | v as one kernel,
    gate | up as one), one matrix-vector product where there were three and two: SmolLM2-135M's
    decode step went from 30.8 to 28.7 ms (random weights, 2 idle cores, docs/results.md); its
    kernels are stored output-major, which XLA:CPU multiplies 5-19% faster."""
    if is_unstacked(params):
        return params
    rest = {k: v for k, v in params.items() if k != LAYER_COPIES}
    if LAYER_COPIES in params:
        return {**rest, "layers": params[LAYER_COPIES]}
    n = jax.tree.leaves(params["layers"])[0].shape[0]
    return {**rest, "layers": tuple(llama.fuse_layer(jax.tree.map(lambda x, i=i: x[i], params["layers"]))
                                    for i in range(n))}


def stack_layers(params: dict) -> dict:
    """The inverse of `unstack_layers`: "layers" as one dict of [L, ...] leaves (the layout that
    checkpoints, sharding rules and training use; "dual" params lose their per-layer copies). Idempotent."""
    if LAYER_COPIES in params:
        return {k: v for k, v in params.items() if k != LAYER_COPIES}
    if not is_unstacked(params):
        return params
    layers = [llama.unfuse_layer(layer) for layer in params["layers"]]
    return {**params, "layers": jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}


def is_unstacked(params: dict) -> bool:
    """Whether params["layers"] is `unstack_layers`' tuple of per-layer dicts (False without layers)."""
    return isinstance(params.get("layers"), (tuple, list))


def outer_params(params: dict) -> dict:
    """Everything but the layers (and their per-layer copies) and a draft LM's draft vocabulary (its int ids,
    read by the draft LM's drafters only: `specjax.drafters.draft_lm.draft_forward`): the embedding, final
    norm and head."""
    return {k: v for k, v in params.items() if k not in ("layers", LAYER_COPIES, "draft_vocab")}


def num_params(params: dict) -> int:
    """Parameter count with each weight counted once, whatever the layout (dual copies excluded)."""
    return int(sum(x.size for x in jax.tree.leaves({k: v for k, v in params.items() if k != LAYER_COPIES})))


def layout_of(params: dict) -> str:
    """The layout (`LAYOUTS`) params are in."""
    return "unstacked" if is_unstacked(params) else "dual" if LAYER_COPIES in params else "stacked"


def with_layout(params: dict, layout: str) -> dict:
    """params in `layout` (one of LAYOUTS; the arrays are shared where the layouts share them);
    raises ValueError naming the choices otherwise."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layer layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    if layout == "dual":
        return {**stack_layers(params), LAYER_COPIES: unstack_layers(params)["layers"]}
    return unstack_layers(params) if layout == "unstacked" else stack_layers(params)


def check_feature_layers(cfg: ModelConfig, layers: tuple[int, ...]) -> None:
    """Feature layer ids must be a tuple of ints in [0, num_layers): raise naming the bad one."""
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise ValueError(f"feature layer ids must be ints, got {layer!r} in {layers}")
        if not 0 <= layer < cfg.num_layers:
            raise ValueError(f"feature layer id {layer} is outside the target's layers [0, {cfg.num_layers}) "
                             f"(feature l = output of decoder layer l)")


def embed_tokens(params: dict, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
    """The token embedding alone: int32[B, T] -> [B, T, E] (what a drafter shares with its target)."""
    return _merge(cfg, "Outer", outer_params(params)).embed_tokens(tokens)


def final_norm(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """The target's final norm alone: [..., E] -> [..., E] (`project_to_vocab` of it is the logits)."""
    return _merge(cfg, "Outer", outer_params(params)).final_norm(hidden)


def project_to_vocab(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """The output projection alone, *without* the final norm: [..., E] -> f32[..., V]
    (the LM head a drafter shares with its target; tied heads use the embedding)."""
    return _merge(cfg, "Outer", outer_params(params)).project(hidden)


@functools.partial(jax.jit, static_argnames=("cfg", "region_offset", "matmul_precision"), donate_argnames=("cache",))
def forward_jit(params, cfg, tokens, positions, block_mask, cache, region_offset: int = 0,
                matmul_precision: str | None = DEFAULT_PRECISION):
    """`forward`, jitted, under specjax's precision policy (`specjax.numerics`)."""
    with matmul_scope(matmul_precision):
        return forward(params, cfg, tokens, positions, block_mask, cache, region_offset)


def causal_mask(batch_size: int, length: int) -> jax.Array:
    """bool[B, T, T] lower-triangular mask for prefill / plain decoding."""
    return jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), (batch_size, length, length))


@functools.partial(jax.jit, static_argnames=("cfg", "feature_layers", "matmul_precision"), donate_argnames=("cache",))
def prefill_tapped(params, cfg, tokens, prompt_lengths, cache, feature_layers: tuple[int, ...] = (),
                   matmul_precision: str | None = DEFAULT_PRECISION):
    """`prefill` without its host-side checks (so it can run inside another jitted function)
    that also returns the prompt's features [B, T, n, E] (see `forward_tapped`):
    (logits, last, cache, features). `matmul_precision`: `specjax.numerics`
    (None inherits the caller's policy, for use inside another entry point)."""
    b, t = tokens.shape
    positions = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    with matmul_scope(matmul_precision):
        logits, cache, features = forward_tapped(params, cfg, tokens, positions, causal_mask(b, t), cache,
                                                 feature_layers)
    cache = advance(cache, prompt_lengths)  # the prompt sits at region offset 0: in place
    last = jnp.take_along_axis(logits, (prompt_lengths - 1)[:, None, None], axis=1)[:, 0]  # [B, V]
    return logits, last, cache, features


@functools.partial(jax.jit, static_argnames=("cfg", "matmul_precision"), donate_argnames=("cache",))
def prefill_unchecked(params, cfg, tokens, prompt_lengths, cache, matmul_precision: str | None = DEFAULT_PRECISION):
    """`prefill` without the host-side checks, for the package's own jitted loops (`specjax.decode`,
    the draft LM); users call `prefill`, or `prefill_tapped` inside their own jit."""
    logits, last, cache, _ = prefill_tapped(params, cfg, tokens, prompt_lengths, cache,
                                            matmul_precision=matmul_precision)
    return logits, last, cache


def prefill(params, cfg: ModelConfig, tokens: jax.Array, prompt_lengths: jax.Array | None = None,
            cache: KVCache | None = None, *, matmul_precision: str = DEFAULT_PRECISION):
    """Process right-padded prompts and commit each row's first prompt_lengths[b] tokens.

    tokens: int32[B, T]; prompt_lengths: int32[B] in [1, T]. Padding is handled by
    `lengths` alone: pad positions are written to scratch slots and never committed.
    Also accepted (`specjax.inputs.as_prompt_batch`): a list of token lists (right-padded,
    prompt_lengths None) or one prompt (1-D: a batch of 1). `cache`: `init_cache(cfg, B, slots)`.
    Returns (logits f32[B, T, V], logits of each row's last prompt token f32[B, V], cache).
    The input cache is donated (consumed): use the returned one. Raises ValueError
    (before compiling) if the prompts do not fit in the cache or the model's positions.
    """
    if cache is None:
        raise TypeError("prefill needs a cache: init_cache(cfg, batch, slots) with slots >= the padded prompt width")
    tokens, prompt_lengths = as_prompt_batch(tokens, prompt_lengths)
    check_capacity(cache.lengths, tokens.shape[1], cache.num_slots, what="the prompt")
    lengths = np.asarray(prompt_lengths)
    if lengths.min() < 1 or lengths.max() > tokens.shape[1]:
        raise ValueError(f"prompt_lengths must lie in [1, {tokens.shape[1]}], got {lengths.tolist()}")
    check_positions(getattr(cfg, "max_position_embeddings", None), int(np.max(np.asarray(cache.lengths) + lengths)))
    check_precision(matmul_precision)
    return prefill_unchecked(params, cfg, jnp.asarray(tokens, jnp.int32), jnp.asarray(prompt_lengths, jnp.int32),
                              cache, matmul_precision=matmul_precision)


@functools.lru_cache(maxsize=64)
def _leaf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(param_shapes(cfg))
    return {jax.tree_util.keystr(path): tuple(leaf.shape) for path, leaf in flat}


def check_params(cfg: ModelConfig, params, owner: str) -> None:
    """Raise `WrongConfigError` unless `params` (any layer layout) hold exactly the arrays of `cfg`'s params
    pytree (names and shapes; a draft vocabulary aside), naming every difference: catches another
    model's params (e.g. a Domino checkpoint's in a DFlash drafter) while tracing, before compiling."""
    if not isinstance(params, dict):
        raise WrongConfigError(f"{owner} needs the params of its {type(cfg).__name__} (load_checkpoint(dir) returns "
                               f"(cfg, params)), got {type(params).__name__}")
    want = _leaf_shapes(cfg)
    # in any layout (`LAYOUTS`): compared in the stacked one, by shape only (nothing is computed)
    stacked = jax.eval_shape(stack_layers, {k: v for k, v in params.items() if k != "draft_vocab"})
    flat, _ = jax.tree_util.tree_flatten_with_path(stacked)
    got = {jax.tree_util.keystr(path): tuple(jnp.shape(leaf)) for path, leaf in flat}
    bad = [f"{k}: {got[k]} vs expected {want[k]}" for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    hint = (" (a GRU 'head' is a Domino drafter's: use DominoDrafter with its DominoConfig)"
            if any(k.startswith("['head']['w_ih']") for k in set(got) - set(want)) else "")
    raise_on_mismatch(WrongConfigError, f"{owner} got params that do not fit its {type(cfg).__name__}: build the "
                      f"drafter from the config load_checkpoint returned with them{hint}",
                      sorted(set(want) - set(got)), sorted(set(got) - set(want)), bad, "unexpected params")


def early_exit(cfg: ModelConfig, params: dict, layers: int) -> tuple[ModelConfig, dict]:
    """A draft LM made of the target itself: its first `layers` layers, then its own final norm and LM head
    (an early exit, as self-speculative decoding drafts; no training, the target's tokenizer and vocabulary).
    Returns (cfg with num_layers = layers, params sharing the target's arrays; stacked layout). A draft step
    reads layers/L of the layer weights plus the whole head."""
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < cfg.num_layers:
        raise ValueError(f"an early-exit draft keeps 1 to {cfg.num_layers - 1} of the target's {cfg.num_layers} "
                         f"layers, got {layers!r}")
    stacked = stack_layers(params) if is_unstacked(params) else params
    return (dataclasses.replace(cfg, num_layers=layers),
            {**outer_params(params), "layers": jax.tree.map(lambda x: x[:layers], stacked["layers"])})


__all__ = [
    "early_exit", "ModelConfig", "KVCache", "init_cache", "commit", "config_from_hf", "init_params", "param_shapes",
    "forward", "forward_tapped", "forward_jit", "prefill", "prefill_tapped", "causal_mask",
    "pad_prompts", "family", "embed_tokens", "final_norm", "project_to_vocab", "layer_features",
    "check_feature_layers", "check_params", "prefill_unchecked", "unstack_layers", "stack_layers", "is_unstacked",
    "layout_of", "num_params", "outer_params", "LAYOUTS", "LAYER_COPIES", "with_layout", "per_layer_cache",
    "stacked_cache",
]
