"""More than one device through JAX's own sharding: a 2-D `Mesh` ("data", "model").

Nothing here communicates by hand. Arrays are *placed* with `NamedSharding`s and the
unchanged jitted `generate_ar` / `generate` run on them: jit propagates the input
shardings and XLA's SPMD partitioner inserts the collectives (the all-reduce after the
o-projection and the MLP down-projection, the reductions over a vocab-sharded axis).

    mesh = make_mesh(data=2, model=2)              # devices [data, model]
    params = shard_params(params, cfg, mesh)       # target: tensor parallel on "model"
    tokens, lengths = shard_batch(tokens, lengths, mesh)   # int32[B, T], int32[B]: B on "data"
    draft_params = replicate(draft_params, mesh)   # drafters: a full copy on every device
    out = generate(params, cfg, drafter, draft_params, tokens, lengths, 64)

Target parameters (Megatron-style; every layer weight has the leading [L] axis of the
layer scan, never sharded; M = "model", - = replicated):

    embed.embedding            [V, E]             M -        vocab-parallel embedding
    head.kernel                [E, V]             - M        vocab-parallel LM head
    final_norm.*, *layernorm.* [E] / [L, E]       replicated
    GPT-NeoX  attention.qkv    [L, E, 3, H, D]    - - - M -  heads
              attention.qkv_bias [L, 3, H, D]     - - M -
              attention.dense  [L, H, D, E]       - M - -    (row parallel: all-reduce after)
              mlp.dense_h_to_4h.kernel / bias  [L, E, F] / [L, F]   - - M / - M
              mlp.dense_4h_to_h.kernel [L, F, E]  - M -      (row parallel)
    Llama     self_attn.q/k/v  [L, E, H|K, D]     - - M -    query heads / KV heads
              self_attn.q/k/v_bias [L, H|K, D]    - M -
              self_attn.o      [L, H, D, E]       - M - -
              self_attn.q_norm / k_norm [L, D]    replicated (per head-dim weights)
              mlp.gate_proj / up_proj.kernel [L, E, F]   - - M;  down_proj.kernel [L, F, E]  - M -
    every output-side bias ([L, E]) is replicated: it is added after the all-reduce.

The vocabulary axis is sharded rather than the hidden axis of the embedding: the LM head
then is an ordinary column-parallel matmul whose logits stay sharded on V (a greedy argmax
exchanges one (max, index) pair per shard and row), and a tied embedding needs one layout
for both uses. XLA's partitioner turns the lookup into a masked local gather plus an
all-reduce of [B, T, E], the same as Megatron's vocab-parallel embedding.

KV caches [L, B, K, S, D] hold the batch on "data" and the KV heads on "model"
(`cache_shardings`): `generate_ar` allocates its cache so (`init_cache_on`, the one line
`decode.py` needed); the caches `generate` and the drafters create inside the jit get the
layout of the computation that writes them from XLA's sharding propagation. Every
sharded parameter dimension must be divisible by its mesh axis; `param_specs` raises
naming the config field that is not.

What XLA makes of it (the compiled HLO on 4 CPU devices, tests/sharding_checks.py setup):
per target forward, all-reduces of [B/data, T, E] only: one for the embedding, then one
per layer with GPT-NeoX's parallel residual (attention and MLP partial sums in one tuple
all-reduce) and two with Llama's sequential one; no parameter or cache is ever gathered
(`tests/sharding_checks.py` asserts it). Two small costs remain: the cache write
(a scatter with iota row indices, not recognised as batch-parallel) all-gathers the T new
K/V rows [B, T, K/model, D] over "data" per layer, and a drafter that ranks the
full-vocabulary logits of the target's head (DDTree's top-k) gathers them, [B, L, V]
per round. A batch-dimension scatter (vmap) removes the first but runs 2.5x slower on one
CPU device, so the cache write is left as it is.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax.models.cache import KVCache, init_cache
from specjax.models.families import DATA, FAMILIES, MODEL
from specjax.models.model import stack_layers

_ = None  # a replicated dimension, for the rule table below
# The per-layer rules are registered by each target family where it is defined
# (`specjax.models.families`, e.g. `specjax.models.llama.LAYER_SHARDING`); outside the layer
# stack the rules are shared by every family:
_OUTER_RULES = {
    ("embed", "embedding"): (MODEL, _),  # [V, E]
    ("head", "kernel"): (_, MODEL),  # [E, V]
    **{("final_norm", leaf): (_,) for leaf in ("scale", "bias", "weight")},
}


def make_mesh(data: int = 1, model: int | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, model) mesh over `devices` (default: all of `jax.devices()`).

    model=None takes every device not used by `data`. data * model must equal the number
    of devices (a mesh over a subset is a deliberate choice: pass `devices`). The axes are
    `AxisType.Auto`: the models carry no sharding annotations, so XLA's partitioner
    chooses the intermediate layouts from the placed inputs (Explicit axes would demand an
    out_sharding on every matmul that contracts a sharded axis).
    """
    devices = list(jax.devices() if devices is None else devices)
    if data < 1 or (model is not None and model < 1):
        raise ValueError(f"mesh axes must be >= 1, got data={data}, model={model}")
    if model is None:
        if len(devices) % data:
            raise ValueError(f"data={data} does not divide the {len(devices)} devices")
        model = len(devices) // data
    if data * model != len(devices):
        raise ValueError(f"a (data={data}, model={model}) mesh needs {data * model} devices, there are "
                         f"{len(devices)} ({devices[0].platform}); on CPU emulate more with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts")
    auto = (jax.sharding.AxisType.Auto,) * 2
    if hasattr(jax, "make_mesh"):  # topology-aware device order (NVLink / ICI neighbours on one axis)
        return jax.make_mesh((data, model), (DATA, MODEL), axis_types=auto, devices=devices)
    return Mesh(np.asarray(devices).reshape(data, model), (DATA, MODEL), axis_types=auto)


def check_divisible(cfg, model: int) -> None:
    """Raise naming every config field the "model" axis (size `model`) does not divide."""
    fields = ("num_heads", "num_kv_heads", "intermediate_size", "vocab_size")
    bad = [f"{name}={getattr(cfg, name)}" for name in fields if getattr(cfg, name) % model]
    if bad:
        raise ValueError(f"the model axis ({model} devices) must divide {', '.join(bad)} of "
                         f"{type(cfg).__name__}: heads, KV heads, MLP width and vocab are split across it")


def _path_names(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def param_specs(params: dict, cfg, mesh: Mesh) -> dict:
    """The `PartitionSpec` of every leaf of the target params pytree (same structure).

    params: a GPT-NeoX or Llama-family params pytree (`specjax.models.init_params` layout:
    "embed", "final_norm", optional "head", "layers" stacked on [L]); arrays or
    `jax.ShapeDtypeStruct`s. Raises on a leaf no rule names, on a rank that does not match
    its rule, and on a sharded size the "model" axis does not divide.
    """
    fam = FAMILIES.get(type(cfg))
    if fam is None or fam.layer_sharding is None:
        targets = sorted(c.__name__ for c, f in FAMILIES.items() if f.layer_sharding)
        raise TypeError(f"no sharding rules for {type(cfg).__name__}: tensor parallelism covers the targets "
                        f"{targets}; replicate drafter params with `replicate`")
    model = mesh.shape[MODEL]
    check_divisible(cfg, model)
    layer_rules = fam.layer_sharding

    def spec(path, leaf):
        names = _path_names(path)
        stacked = names[:1] == ("layers",)
        rule = (layer_rules if stacked else _OUTER_RULES).get(names[1:] if stacked else names)
        if rule is None:
            raise ValueError(f"no sharding rule for param {'/'.join(names)} {tuple(leaf.shape)} of "
                             f"{type(cfg).__name__}: add it to the layer rules its family registers (LAYER_SHARDING in "
                             f"{fam.module.__name__}, `specjax.models.families.register`), or to the outer rules "
                             f"of specjax.sharding, rather than replicate it silently")
        full = ((_,) + rule) if stacked else rule
        if len(full) != len(leaf.shape) or (stacked and leaf.shape[0] != cfg.num_layers):
            raise ValueError(f"param {'/'.join(names)} has shape {tuple(leaf.shape)}; the rule expects rank "
                             f"{len(full)}{f' with a leading [L={cfg.num_layers}] axis' if stacked else ''}")
        for size, axis in zip(leaf.shape, full):
            if axis is not None and size % mesh.shape[axis]:
                raise ValueError(f"param {'/'.join(names)} {tuple(leaf.shape)}: size {size} is not divisible "
                                 f"by the {axis!r} axis ({mesh.shape[axis]} devices)")
        return P(*full)

    return jax.tree_util.tree_map_with_path(spec, params)


def shard_params(params: dict, cfg, mesh: Mesh) -> dict:
    """The target params placed tensor-parallel on `mesh` (`param_specs`), replicated over "data"
    (in the stacked layout: unstacked params, `specjax.models.model.unstack_layers`, are stacked first)."""
    params = stack_layers(params)
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(params, cfg, mesh),
                             is_leaf=lambda x: isinstance(x, P))
    return jax.device_put(params, shardings)  # each device receives only its shards


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Every array leaf of `tree` copied to every device of `mesh` (drafter params, Graft's
    table, ...). None leaves stay None."""
    return jax.device_put(tree, NamedSharding(mesh, P()))


def shard_batch(tokens: jax.Array, lengths: jax.Array, mesh: Mesh) -> tuple[jax.Array, jax.Array]:
    """Prompts int32[B, T] and lengths int32[B] with the batch axis B split over "data"."""
    data = mesh.shape[DATA]
    b = np.shape(tokens)[0]
    if np.ndim(tokens) != 2 or np.shape(lengths) != (b,):
        raise ValueError(f"tokens must be int32[B, T] and lengths int32[B], got {np.shape(tokens)}, "
                         f"{np.shape(lengths)}")
    if b % data:
        raise ValueError(f"the batch ({b} rows) must be divisible by the data axis ({data} devices): pad it "
                         f"with dummy prompts")
    return (jax.device_put(tokens, NamedSharding(mesh, P(DATA, _))),
            jax.device_put(lengths, NamedSharding(mesh, P(DATA))))


def cache_shardings(mesh: Mesh, batch: int, kv_heads: int) -> KVCache:
    """The shardings of a KV cache (a `KVCache` of `NamedSharding`s): k / v [L, B, K, S, D]
    with B on "data" and K on "model", lengths [B] on "data"; an axis a size is not
    divisible by stays replicated (a cache is scratch, not worth an error)."""
    on = lambda axis, size: axis if size % mesh.shape[axis] == 0 else None  # noqa: E731
    kv = NamedSharding(mesh, P(_, on(DATA, batch), on(MODEL, kv_heads), _, _))
    return KVCache(k=kv, v=kv, lengths=NamedSharding(mesh, P(on(DATA, batch))))


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _sharded_zeros_cache(cfg, batch: int, num_slots: int, dtype, mesh: Mesh) -> KVCache:
    cache = init_cache(cfg, batch, num_slots, dtype)
    return jax.lax.with_sharding_constraint(cache, cache_shardings(mesh, batch, cfg.num_kv_heads))


def init_cache_on(mesh: Mesh | None, cfg, batch: int, num_slots: int, dtype) -> KVCache:
    """`init_cache`, allocated directly in its shards on `mesh` (`cache_shardings`): a
    cache is never materialised whole on one device. mesh=None: plain `init_cache`."""
    if mesh is None:
        return init_cache(cfg, batch, num_slots, dtype)
    return _sharded_zeros_cache(cfg, batch, num_slots, np.dtype(dtype), mesh)


def mesh_of(*trees: Any) -> Mesh | None:
    """The ("data", "model") mesh the first multi-device `NamedSharding`-placed array leaf
    of `trees` lives on, or None (host arrays, one device): how `generate_ar` tells a
    sharded call from a single-device one."""
    for leaf in jax.tree.leaves(trees):
        sharding = getattr(leaf, "sharding", None)
        if (isinstance(sharding, NamedSharding) and sharding.mesh.size > 1
                and {DATA, MODEL} <= set(sharding.mesh.axis_names)):
            return sharding.mesh
    return None


def is_sharded_over(x: jax.Array, mesh: Mesh) -> bool:
    """True iff `x` lives on every device of `mesh` (what the jitted computation ran on)."""
    return set(x.sharding.device_set) == set(mesh.devices.flat)


__all__ = ["DATA", "MODEL", "make_mesh", "check_divisible", "param_specs", "shard_params", "replicate",
           "shard_batch", "cache_shardings", "init_cache_on", "mesh_of", "is_sharded_over"]
