"""What a device's memory bandwidth and matrix products allow a decode step: the bandwidth-bound roofline.

An AR decode step reads every weight once, so weight bytes / memory bandwidth is its floor
(`bandwidth_bound`); `measure_bandwidth` measures the bandwidth with a streaming kernel (a spec-sheet
figure is kept beside it for known GPUs, for reference only); `time_products_floor` times the step's weight
products alone, as XLA compiles them on this device, so a step's time splits into products and the rest.
`specjax.bench.device` reports all three per shape and layout (its module docstring says how each is read).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.bench.timing import warm_median_s, warm_times_s
from specjax.models import llama
from specjax.models.model import with_layout

__all__ = ["SPEC_SHEET_GBPS", "bandwidth_bound", "measure_bandwidth", "step_products", "time_products_floor",
           "weight_bytes"]

# Vendor peak memory bandwidth, GB/s, by a substring of `jax.Device.device_kind` (first match).
SPEC_SHEET_GBPS = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100 NVL": 3900.0, "H100": 3350.0, "A100-SXM4-80GB": 2039.0,
                   "A100-SXM4-40GB": 1555.0, "A100-PCIE": 1555.0, "L4": 300.0, "A10G": 600.0}


def weight_bytes(params) -> int:
    """Total bytes of every leaf of a params pytree."""
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params)))


def bandwidth_bound(weight_bytes_: int, bandwidth_gbps: float, ms_per_token: float) -> dict:
    """The AR bound: bound_ms = weight bytes / (bandwidth GB/s * 1e9) * 1e3; ratio = measured / bound (>= ~1)."""
    if weight_bytes_ <= 0 or bandwidth_gbps <= 0:
        raise ValueError(f"need positive weight bytes and bandwidth, got {weight_bytes_}, {bandwidth_gbps}")
    bound_ms = weight_bytes_ / (bandwidth_gbps * 1e9) * 1e3
    return {"bound_ms_per_token": bound_ms, "ratio_to_bound": ms_per_token / bound_ms}


def measure_bandwidth(mib: int, reps: int) -> dict:
    """Device memory bandwidth from a streaming elementwise kernel over two `mib` MiB float32
    arrays: y <- y + x in place (y donated), (2 reads + 1 write) x bytes / median seconds.

    In place, because an out-of-place op (`x * 2` into a fresh buffer) measures page faults
    on XLA:CPU (about 3 GB/s on a 2-core dev CPU against 17-24 GB/s for read-heavy or in-place kernels).
    Also returns the spec-sheet figure for known GPUs (reference only)."""
    n = mib * (1 << 20) // 4
    x, state = jnp.ones((n,), jnp.float32), {"y": jnp.zeros((n,), jnp.float32)}
    add = jax.jit(lambda a, b: b + a, donate_argnums=1)

    def call():
        state["y"] = add(x, state["y"])
        return state["y"]

    seconds = warm_median_s(call, reps)
    moved = 3 * 4 * n
    kind = jax.devices()[0].device_kind
    spec = next((v for k, v in SPEC_SHEET_GBPS.items() if k in kind), None)
    return {"measured_GBps": moved / seconds / 1e9, "bytes_moved": moved, "median_s": seconds,
            "method": f"jit(y + x), y donated (in place), x, y float32[{n}] ({mib} MiB each): "
                      "(2 reads + 1 write = read + written bytes) / median s",
            "spec_sheet_GBps": spec, "spec_sheet_note": "vendor peak figure, for reference; not used in the bound"}


def step_products(cfg, params) -> list[tuple[jax.Array, bool]]:
    """The weight matrices one decode step multiplies a row by, as (W, transposed): every
    per-layer kernel of the unstacked layout as 2-D, and the LM head (the head kernel [E, V], or
    the tied embedding [V, E], transposed). A fused Llama-family layer's kernels are output-major
    (`specjax.models.llama.fuse_layer`): [out, in], transposed. Any other kernel is viewed as
    [in, out], in = its leading axes whose product is the hidden, attention or MLP width (biases
    and norms match none and are left out)."""
    widths = {cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.intermediate_size}
    out = []
    for layer in with_layout(params, "unstacked")["layers"]:
        if llama.is_fused(layer):
            attn, mlp, e = layer["self_attn"], layer["mlp"], cfg.hidden_size
            out += [(attn["qkv"].reshape(-1, e), True), (attn["out"].reshape(e, -1), True),
                    (mlp["gate_up"], True), (mlp["down"], True)]
            continue
        for w in jax.tree.leaves(layer):
            k = next((k for k in range(1, w.ndim) if int(np.prod(w.shape[:k])) in widths), None)
            if k is not None:
                out.append((w.reshape(int(np.prod(w.shape[:k])), -1), False))
    head = params.get("head", {}).get("kernel")
    out.append((params["embed"]["embedding"], True) if head is None else (head, False))
    return out


def time_products_floor(cfg, params, batch: int, reps: int, tokens: int = 1) -> dict:
    """The weight products of one decode step alone (`specjax.bench.device`'s products_floor): the fastest of
    `reps` calls (after a warm-up) of one jitted dependent chain of products x [batch * tokens, in] @ W over
    `step_products`, ms, and the bytes it reads. tokens > 1: the products a T-token verify forward makes."""
    mats = step_products(cfg, params)
    transposed = tuple(t for _, t in mats)

    @jax.jit
    def chain(weights, x):
        for w, t in zip(weights, transposed):
            width = w.shape[1] if t else w.shape[0]
            x = jnp.resize(x, (x.shape[0], width)) if x.shape[1] != width else x  # the next input from this output
            x = x @ w.T if t else x @ w
        return x

    weights = [w for w, _ in mats]
    first, first_t = mats[0]
    x = jnp.ones((batch * tokens, first.shape[1] if first_t else first.shape[0]), first.dtype)
    seconds = min(warm_times_s(lambda: chain(weights, x), reps))
    return {"ms": seconds * 1e3, "products": len(mats), "bytes": weight_bytes(weights),
            "how": "fastest call of one jitted chain x @ W over the step's weight matrices (unstacked layout) "
                   "and the LM head, each x cut or repeated from the previous output; nothing else"}
