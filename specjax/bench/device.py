"""Device benchmark of the raw costs behind speculative decoding, on random weights (no download).

`python -m specjax bench-device [--shapes ...] [--parts ar,verify,select,compile,round] [--json PATH]`
times, for named model shapes (`SHAPES`: the real HF configs' numbers, random params from
`specjax.models.model.init_params`; `tiny` is a toy shape for CPU / CI), batch `batch`
(default 1), greedy, `eos_ids=()` (no row ever stops early). Every timing is the median
of `reps` warm calls after one excluded warm-up (compile) call, each call ended by
`jax.block_until_ready`; host wall clock (`time.perf_counter`). The ar, verify, compile
and round parts are timed for each of `layouts` (the target's layer params stacked and
scanned, unstacked or dual: `specjax.models.model.LAYOUTS`; JSON: shapes.<shape>.layouts.<layout>.<part>).

  bandwidth  measured device memory bandwidth: a jitted elementwise y <- y + x in place (y
             donated) over two `bandwidth_mib` MiB float32 arrays; (bytes read + bytes
             written = 3 x the array) / median seconds, in GB/s (1e9 bytes / s). A
             spec-sheet figure is printed beside it for known GPUs, labelled as such; the
             bound below uses the *measured* one.
  ar         AR decode ms/token: `specjax.decode.generate_ar` with a `prompt_len`-token
             random prompt, timed for `new_tokens` and for 1 new token with one compiled
             program (`reserve_new_tokens`: the same cache of prompt_len + new_tokens slots,
             the 1-token call stopped after its first token), the two in alternation, each the fastest
             of `reps` (a difference of medians can go negative on a busy machine);
             ms/token = (t_N - t_1) / (N - 1), i.e. the N - 1 decode steps alone (prefill
             and first pick cancel).
             bound_ms_per_token = weight_bytes / bandwidth (weight_bytes = every param
             leaf's bytes, the untied input embedding included though a step reads one row
             of it; KV-cache reads excluded) and ratio_to_bound = ms_per_token / bound.
             long_cache: the same ms/token with a `long_cache`-slot cache (the prompt and
             the new tokens use the first slots, as in a server's preallocated cache) and
             its ratio to the short cache's: the cost of the unused slots (attention reads
             only a prefix bucket, `specjax.models.layers.LayerKV.attend`: goal ~1).
             products_floor (once per shape): the weight products of one decode step alone,
             as XLA compiles them on this device: a dependent chain of one-row products
             x [B, in] @ W [in, out] over every weight matrix of the unstacked layout (fused
             q|k|v and gate|up, output-major, where the family fuses them) and the LM head (the tied
             embedding as x @ E^T), each x cut or repeated from the previous product's
             output, nothing else (no attention, norm or cache); the fastest of `reps` calls
             of one jitted chain. ratio_to_products_floor = AR ms/token / its ms: what the
             rest of the step costs. Its own ratio to the bandwidth bound says how near
             this backend's matrix-vector kernels come to the measured bandwidth.
  verify     target forward (`specjax.models.model.forward`, jitted, cache donated) of T
             pending tokens at a `context`-token context (cache lengths = context, zero
             K/V: values do not change the cost), for T in `verify_widths`, causal mask
             (a tree's ancestor mask is the same dense bool[B, T, T]); ms per call and per
             token; with T = 1 among the widths, also extra_ms_per_token = (ms(T) - ms(1)) / (T - 1)
             and ratio_to_T1 = ms(T) / ms(1) (a verify forward in decode steps); products_ms: the
             products_floor chain with B x T rows (the weight products of that forward alone) and
             ratio_to_products = ms / products_ms (what the rest of the forward costs: attention,
             norms, the cache, the logits).
  select     DDTree `specjax.drafters.ddtree.select_tree` jitted on random log-probs
             f32[B, L, V] (log_softmax of N(0, 3^2) logits), V = the shape's vocabulary,
             for every batch in `select_batches`, method "levels" and "pops"; ms per call; and
             topk_ms, the per-depth ranks over the vocabulary alone (`specjax.ops.top_k` of
             k = min(select_budget, V), the first step of every method), per batch, and
             topk_chunked_ms {chunk: ms}: the same ranks in two stages (`top_k(..., chunk=)`, the
             same result: many short sorts instead of one per row) for each of `topk_chunks`.
  compile    first-compile time of a whole generation per method (`parse_method` specs;
             the target is the shape, chain / dynatree draft with a random 2 x 64 GPT-NeoX
             draft LM of the same vocabulary, ddtree with a random DFlash drafter):
             `jax.clear_caches()`, then compile_s = wall(first call) - wall(warm call) of
             `generate` / `generate_ar` with `new_tokens` new tokens (trace + lower +
             compile + one-time transfers); the first call's trace_s, lower_s and
             xla_compile_s as jax's monitoring events report them, and cache_hits (programs
             loaded from a persistent compilation cache, which makes compile_s a load time).
  round      `specjax.bench.round_split.round_split`: a DDTree round of budget
             `round_budget` (prune_mass 0: the whole budget is verified) over a random
             DFlash drafter split into draft / select / mask / verify / walk_commit, the
             whole round and one AR step, ms (its docstring says what each part covers),
             each timed as a call of its own (a call's dispatch included); and
             loop_round_ms, a round inside the generation loop as the AR part times a step:
             (min t(generate, N new) - min t(generate, 1 new)) / (rounds(N) - rounds(1)).
             With `ar` timed too, round_in_ar_steps = loop_round_ms / the AR ms/token (the
             loop's round in the loop's steps: what the speedup divides tau by). With `ar`'s
             bandwidth: draft_bound_ms = draft_bytes (the drafter's weights and the target's
             [V, E] head it projects through) / bandwidth, draft_ratio_to_bound, and
             verify_ratio_to_bound (the verify against one read of the target's weights).

Random weights make acceptance meaningless: only costs are measured. The default dtype
is bfloat16 on GPU/TPU and float32 on CPU (CPU benchmarks run in float32); matmul
precision is specjax's policy (`specjax.numerics`, default "highest").
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from specjax import atomic
from specjax.bench.methods import parse_method
from specjax.bench.round_split import round_split
from specjax.bench.roofline import bandwidth_bound, measure_bandwidth, time_products_floor, weight_bytes
from specjax.bench.timing import compile_totals, fastest_pair_s, format_figure, timed_call, warm_median_s
from specjax.decode import generate, generate_ar
from specjax.drafters.ddtree import DDTreeDrafter, select_tree
from specjax.drafters.dflash import DFlashDrafter
from specjax.models.cache import init_cache
from specjax.models.dflash import DFlashConfig
from specjax.models.gpt_neox import GPTNeoXConfig
from specjax.models.llama import LlamaConfig
from specjax.pipeline import MODELS
from specjax.models.model import LAYOUTS, causal_mask, forward, init_params, with_layout
from specjax.numerics import DEFAULT_PRECISION, matmul_scope
from specjax.ops import top_k

PARTS = ("ar", "verify", "select", "compile", "round")

SHAPES = {
    "tiny": LlamaConfig(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                        intermediate_size=128, qk_norm=True, flavor="qwen3"),
    "smollm2-135m": MODELS["smollm2-135m"].config(),  # the named model's own entry (its GGUF's config)
    "pythia-410m": GPTNeoXConfig(vocab_size=50304, hidden_size=1024, num_layers=24, num_heads=16,
                                 intermediate_size=4096, rotary_dim=16, use_parallel_residual=True,
                                 tie_word_embeddings=False),  # rotary_pct 0.25 of head_dim 64
    "qwen3-8b": LlamaConfig(vocab_size=151936, hidden_size=4096, num_layers=36, num_heads=32, num_kv_heads=8,
                            head_dim=128, intermediate_size=12288, rope_theta=1000000.0, rms_norm_eps=1e-6,
                            qk_norm=True, flavor="qwen3", tie_word_embeddings=False, max_position_embeddings=40960),
}
GPU_SHAPES = ("smollm2-135m", "pythia-410m", "qwen3-8b")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# Spec-sheet peak HBM bandwidth (GB/s), matched by substring of `device_kind`: printed for reference only.
UNITS = {"ms": "milliseconds (median of reps)", "s": "seconds", "GBps": "1e9 bytes per second",
         "bytes": "bytes", "ratio": "dimensionless"}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one run measures. Defaults reproduce issue 16's table at batch 1 (GPU sizes);
    `for_platform` shrinks the sizes that are slow on a CPU. Every size must be >= 1.

    Fields:
      dtype: params / activations dtype by name, a key of `DTYPES` ("bfloat16"; "float32" on CPU).
      batch: B, prompts (rows) per call (ar, verify, compile, round; select uses `select_batches`).
      prompt_len: tokens of each random prompt (ar, compile, round).
      new_tokens: N, tokens generated per timed call (ar, compile; the round's max_new); >= 2, since
        AR ms/token is (t_N - t_1) / (N - 1).
      context: committed cache length before the verify forward (verify).
      long_cache: cache slots of the ar part's second timing (mostly unused slots; 0: skip it).
      verify_widths: T values, pending tokens per verify forward (one timing each).
      select_depth: L, positions of the random log-probs f32[B, L, V] given to `select_tree` (select).
      select_budget: N, tree nodes `select_tree` picks (select).
      select_batches: batch sizes B of the select part (one timing each; not `batch`).
      select_methods: `select_tree` methods timed, a subset of ("levels", "pops").
      topk_chunks: run lengths of the two-stage top-k timed beside one `lax.top_k` (select).
      compile_methods: `parse_method` specs whose first-compile time is measured (compile).
      round_budget: DDTree budget N of the split round (prune_mass 0: all N + 1 slots verified) (round).
      dflash_layers: draft layers of the random DFlash drafter (compile, round); None (or 0): 5 (the
        DFlash-b16 release for Qwen3-8B) on >= 8-layer targets, else 1.
      reps: warm calls per timing (the median is reported), after one excluded warm-up call.
      bandwidth_mib: MiB of each of the two float32 arrays of the bandwidth kernel (256 on CPU).
      matmul_precision: jax matmul precision, one of `specjax.numerics.PRECISIONS` (default "highest").
      layouts: the target's layer layouts timed (`specjax.models.model.LAYOUTS`), each for the ar,
        verify, compile and round parts: "stacked" (scanned) and "unstacked"; on a CPU "dual" as well.
    """

    dtype: str = "bfloat16"
    batch: int = 1
    prompt_len: int = 64
    new_tokens: int = 128
    context: int = 512
    long_cache: int = 16384
    verify_widths: tuple[int, ...] = (1, 64, 128, 256, 512)
    select_depth: int = 16
    select_budget: int = 512
    select_batches: tuple[int, ...] = (1, 8)
    select_methods: tuple[str, ...] = ("levels", "pops")
    topk_chunks: tuple[int, ...] = (1024, 8192)
    compile_methods: tuple[str, ...] = ("ar", "chain4", "dynatree-p3", "ddtree-64")
    round_budget: int = 64
    dflash_layers: int | None = None
    reps: int = 10
    bandwidth_mib: int = 1024
    matmul_precision: str = DEFAULT_PRECISION
    layouts: tuple[str, ...] = ("stacked", "unstacked")

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        for name in ("batch", "prompt_len", "new_tokens", "context", "select_depth", "select_budget", "round_budget",
                     "reps", "bandwidth_mib"):
            if getattr(self, name) < 1:
                raise ValueError(f"setting {name} must be >= 1, got {getattr(self, name)}")
        if self.long_cache < 0:
            raise ValueError(f"long_cache must be >= 0 (0: skip), got {self.long_cache}")
        if self.new_tokens < 2:
            raise ValueError(f"new_tokens must be >= 2 (ms/token is (t_N - t_1) / (N - 1)), got {self.new_tokens}")
        if any(c < 1 for c in self.topk_chunks):
            raise ValueError(f"topk_chunks must be positive run lengths, got {self.topk_chunks}")
        if not self.verify_widths or min(self.verify_widths) < 1:
            raise ValueError(f"verify_widths must be positive token counts, got {self.verify_widths}")
        if not self.layouts or set(self.layouts) - set(LAYOUTS):
            raise ValueError(f"layouts must be some of {', '.join(LAYOUTS)}, got {self.layouts}")
        bad = set(self.select_methods) - {"levels", "pops"}
        if bad:
            raise ValueError(f"unknown select_tree method(s) {sorted(bad)}; use levels, pops")

    @classmethod
    def for_platform(cls, platform: str, **overrides) -> "Settings":
        """GPU/TPU: the issue's sizes in bfloat16, stacked and unstacked (a scanned stack may copy each layer's
        weights out every step; the per-layer form never does). CPU: float32, 256 MiB bandwidth arrays, every
        layer layout."""
        base = {} if platform != "cpu" else dict(dtype="float32", bandwidth_mib=256, layouts=LAYOUTS)
        return cls(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


def check_names(shapes, parts) -> None:
    """Raise ValueError naming an unknown shape or part (before anything runs)."""
    for s in shapes:
        if s not in SHAPES:
            raise ValueError(f"unknown shape {s!r}; choose from {', '.join(SHAPES)}")
    for p in parts:
        if p not in PARTS:
            raise ValueError(f"unknown part {p!r}; choose from {', '.join(PARTS)}")


def default_shapes(platform: str) -> tuple[str, ...]:
    """`tiny` on CPU, the three named shapes elsewhere."""
    return ("tiny",) if platform == "cpu" else GPU_SHAPES


def random_params(cfg, dtype, seed: int = 0):
    """init_params(cfg, key(seed), dtype) (one small jitted program per config)."""
    return init_params(cfg, jax.random.key(seed), dtype)


def random_prompt(cfg, batch: int, length: int, seed: int = 0):
    """Random full-length prompts: (tokens int32[B, T], lengths int32[B])."""
    tokens = np.random.default_rng(seed).integers(1, cfg.vocab_size, (batch, length), dtype=np.int32)
    return jnp.asarray(tokens), jnp.full((batch,), length, jnp.int32)


def time_ar(cfg, params, s: Settings) -> dict:
    """AR decode ms/token (module docstring): (t_N - t_1) / (N - 1) over generate_ar, on a cache
    of prompt_len + new_tokens slots and (`long_cache` > 0) on a `long_cache`-slot one."""
    tokens, lengths = random_prompt(cfg, s.batch, s.prompt_len)

    def per_token(slots):
        def run(n):  # one compiled program for both counts: built for new_tokens, stopped after n
            return lambda: generate_ar(params, cfg, tokens, lengths, n, cache_slots=slots, eos_ids=(),
                                       matmul_precision=s.matmul_precision, reserve_new_tokens=s.new_tokens).tokens

        t_n, t_1 = fastest_pair_s(run(s.new_tokens), run(1), s.reps)
        return (t_n - t_1) / (s.new_tokens - 1) * 1e3, t_n, t_1

    ms, t_n, t_1 = per_token(s.prompt_len + s.new_tokens)
    out = {"ms_per_token": ms, "generate_N_ms": t_n * 1e3, "generate_1_ms": t_1 * 1e3,
           "tokens_per_s": 1e3 / ms if ms > 0 else None,
           "how": "(min t(generate_ar, N new) - min t(generate_ar, 1 new)) / (N - 1), one compiled program "
                  "(built for N new tokens, the 1-token call stopped after its first), the two timed in alternation"}
    if s.long_cache > s.prompt_len + s.new_tokens:
        long_ms, _, _ = per_token(s.long_cache)
        out["long_cache"] = {"slots": s.long_cache, "ms_per_token": long_ms,
                             "ratio_to_short_cache": long_ms / ms if ms > 0 else None}
    return out


def time_verify(cfg, params, s: Settings) -> list[dict]:
    """Target forward of T pending tokens at a `context`-token cache, per T (module docstring)."""
    dtype = jax.tree.leaves(params)[0].dtype
    cache = init_cache(cfg, s.batch, s.context + max(s.verify_widths), dtype)
    state = {"cache": cache.replace(lengths=jnp.full((s.batch,), s.context, jnp.int32))}

    @functools.partial(jax.jit, donate_argnums=(4,))
    def fwd(params, tokens, positions, mask, cache):
        with matmul_scope(s.matmul_precision):
            return forward(params, cfg, tokens, positions, mask, cache)

    rows = []
    for width in s.verify_widths:
        tokens = random_prompt(cfg, s.batch, width, seed=width)[0]
        positions = s.context + jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (s.batch, width))
        mask = causal_mask(s.batch, width)

        def call():
            logits, state["cache"] = fwd(params, tokens, positions, mask, state["cache"])
            return logits

        ms = warm_median_s(call, s.reps) * 1e3
        products = time_products_floor(cfg, params, s.batch, s.reps, tokens=width)["ms"]
        rows.append({"T": width, "context": s.context, "ms": ms, "ms_per_token": ms / width,
                     "products_ms": products, "ratio_to_products": ms / products})
    one = next((r["ms"] for r in rows if r["T"] == 1), None)
    for r in rows:  # what each pending token adds to the one-token forward (a decode step)
        r["extra_ms_per_token"] = (r["ms"] - one) / (r["T"] - 1) if one is not None and r["T"] > 1 else None
        r["ratio_to_T1"] = r["ms"] / one if one else None
    return rows


def time_select(vocab: int, s: Settings) -> list[dict]:
    """select_tree latency on random log-probs f32[B, L, V] per batch and method (module docstring)."""
    rows = []
    for batch in s.select_batches:
        logits = 3.0 * jax.random.normal(jax.random.key(batch), (batch, s.select_depth, vocab), jnp.float32)
        log_q = jax.nn.log_softmax(logits, axis=-1)
        ranks = jax.jit(functools.partial(top_k, k=min(s.select_budget, vocab), equal_zeros=True))
        topk_ms = warm_median_s(lambda: ranks(log_q)[1], s.reps) * 1e3
        chunked = {}
        for chunk in s.topk_chunks:
            ranks_in_runs = jax.jit(functools.partial(top_k, k=min(s.select_budget, vocab), equal_zeros=True,
                                                      chunk=chunk))
            chunked[str(chunk)] = warm_median_s(lambda: ranks_in_runs(log_q)[1], s.reps) * 1e3  # JSON keys
        for method in s.select_methods:
            fn = jax.jit(functools.partial(select_tree, budget=s.select_budget, method=method))
            ms = warm_median_s(lambda: fn(log_q).tokens, s.reps) * 1e3
            rows.append({"batch": batch, "depth_L": s.select_depth, "vocab_V": vocab, "budget": s.select_budget,
                         "method": method, "ms": ms, "topk_ms": topk_ms,
                         "topk_chunked_ms": chunked})
    return rows


def _dflash(cfg, s: Settings, dtype, block: int = 16):
    """A random DFlash drafter for `cfg`: (DFlashConfig, params)."""
    layers = s.dflash_layers or (5 if cfg.num_layers >= 8 else 1)
    dcfg = DFlashConfig.for_target(cfg, num_layers=layers, block_size=block, mask_token_id=0)
    return dcfg, random_params(dcfg, dtype, seed=2)


def time_compile(cfg, params, s: Settings) -> list[dict]:
    """First-compile seconds of a whole generation per method: wall(first) - wall(warm) after
    jax.clear_caches(), and the first call's stages as jax reports them: tracing (trace_s),
    lowering to MLIR (lower_s), XLA compilation (xla_compile_s), programs loaded from a
    persistent compilation cache (cache_hits; then compile_s is a load time, not a compile)."""
    dtype = jax.tree.leaves(params)[0].dtype
    draft_cfg = GPTNeoXConfig(vocab_size=cfg.vocab_size, hidden_size=64, num_layers=2, num_heads=4,
                              intermediate_size=256, rotary_dim=4)
    draft_params = random_params(draft_cfg, dtype, seed=1)
    dflash = _dflash(cfg, s, dtype) if any(m.lower().startswith(("ddtree", "dflash")) for m in s.compile_methods) \
        else None
    tokens, lengths = random_prompt(cfg, s.batch, s.prompt_len)
    rows = []
    for spec in s.compile_methods:
        method = parse_method(spec, draft_cfg, dflash=dflash, target_cfg=cfg, draft_params=draft_params)
        if method.is_ar:
            def run():
                return generate_ar(params, cfg, tokens, lengths, s.new_tokens, eos_ids=(),
                                   matmul_precision=s.matmul_precision).tokens
        else:
            dparams = method.params if method.params is not None else draft_params

            def run():
                return generate(params, cfg, method.drafter, dparams, tokens, lengths, s.new_tokens, eos_ids=(),
                                matmul_precision=s.matmul_precision).tokens
        jax.clear_caches()
        before = compile_totals()
        first = timed_call(run)[1]  # `specjax.bench.timing`, as every timed loop
        after = compile_totals()
        stages = {k: after[k] - before[k] for k in ("trace_s", "lower_s", "xla_compile_s", "cache_hits")}
        warm = timed_call(run)[1]
        rows.append({"method": method.name, "first_call_s": first, "warm_call_s": warm, "compile_s": first - warm,
                     **stages})
    return rows


def time_round(cfg, params, s: Settings) -> dict:
    """round_split of a DDTree round (budget `round_budget`, prune_mass 0) over a random DFlash drafter, ms."""
    dtype = jax.tree.leaves(params)[0].dtype
    dcfg, dparams = _dflash(cfg, s, dtype)
    drafter = DDTreeDrafter(DFlashDrafter(dcfg, cfg), s.round_budget, prune_mass=0.0)
    tokens, lengths = random_prompt(cfg, s.batch, s.prompt_len)
    out = round_split((cfg, params), drafter, dparams, tokens, lengths, reps=s.reps, max_new=s.new_tokens,
                      matmul_precision=s.matmul_precision)
    timed = {f"{k}_ms": float(v) for k, v in out.items() if k not in ("width", "nodes")}

    last = {}  # the latest result of each count: its round count, without generating again

    def run(n):  # one compiled program for both counts, as `time_ar`'s
        def call():
            last[n] = generate(params, cfg, drafter, dparams, tokens, lengths, n, eos_ids=(),
                               matmul_precision=s.matmul_precision, reserve_new_tokens=s.new_tokens)
            return last[n].tokens
        return call

    t_n, t_1 = fastest_pair_s(run(s.new_tokens), run(1), s.reps)
    rounds = int(np.asarray(last[s.new_tokens].stats.num_rounds).max()) - int(np.asarray(last[1].stats.num_rounds).max())
    return {**timed, "loop_round_ms": (t_n - t_1) / rounds * 1e3 if rounds > 0 else None,
            "verify_width": int(out["width"]), "tree_nodes": int(out["nodes"]), "budget": s.round_budget,
            "dflash_layers": dcfg.num_layers, "block_size": dcfg.block_size,
            "draft_bytes": draft_read_bytes(cfg, dparams, dtype)}


def draft_read_bytes(cfg, dparams, dtype) -> int:
    """The bytes one DFlash draft call must read: the drafter's own weights and the target's LM head it projects
    the block through ([V, E]; the block's embedding is a gather of B x block rows, not counted)."""
    return weight_bytes(dparams) + cfg.vocab_size * cfg.hidden_size * jnp.dtype(dtype).itemsize


def run(shapes=None, parts=PARTS, settings: Settings | None = None, log=print, save=None) -> dict:
    """Run `parts` for each shape; returns the JSON-ready report (settings, environment, units, results).
    save: called with the report so far after every part (a run stopped from outside keeps what it timed)."""
    save = save or (lambda report: None)
    platform = jax.devices()[0].platform
    shapes = tuple(shapes) if shapes else default_shapes(platform)
    check_names(shapes, parts)
    s = settings or Settings.for_platform(platform)
    dtype = DTYPES[s.dtype]
    report = {"settings": {**dataclasses.asdict(s), "shapes": list(shapes), "parts": list(parts),
                           "sampling": "greedy", "eos_ids": [], "weights": "random (init_params)"},
              "environment": _environment(), "units": UNITS, "shapes": {}}
    if "ar" in parts:
        report["bandwidth"] = measure_bandwidth(s.bandwidth_mib, s.reps)
        save(report)
        log(f"bandwidth: {report['bandwidth']['measured_GBps']:.1f} GB/s measured"
            + (f" (spec sheet {report['bandwidth']['spec_sheet_GBps']:.0f} GB/s)"
               if report["bandwidth"]["spec_sheet_GBps"] else ""))
    for name in shapes:
        cfg = SHAPES[name]
        params = random_params(cfg, dtype)
        fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        entry = {"config": {"family": cfg.model_type, **fields},
                 "weight_bytes": weight_bytes(params),
                 "num_params": int(sum(x.size for x in jax.tree.leaves(params)))}
        report["shapes"][name] = entry
        log(f"\n== {name} ({cfg.model_type}, {entry['num_params'] / 1e6:.1f}M params, {s.dtype}, "
            f"{entry['weight_bytes'] / 1e6:.1f} MB weights, batch {s.batch})")
        if "ar" in parts:
            floor = time_products_floor(cfg, params, s.batch, s.reps)
            entry["products_floor"] = {**floor, **bandwidth_bound(floor["bytes"],
                                                                  report["bandwidth"]["measured_GBps"], floor["ms"])}
            log(f"the step's {floor['products']} weight products alone: {floor['ms']:.3f} ms "
                f"({floor['bytes'] / 1e6:.1f} MB, {floor['bytes'] / floor['ms'] / 1e6:.1f} GB/s; "
                f"{format_figure(entry['products_floor']['ratio_to_bound'], '.2f')}x their bandwidth bound)")
            save(report)
        if "select" in parts:
            entry["select"] = time_select(cfg.vocab_size, s)
            log(f"select_tree L={s.select_depth} V={cfg.vocab_size} budget {s.select_budget}: " + ", ".join(
                f"B={r['batch']} {r['method']}: {r['ms']:.2f} ms (top-k alone {r['topk_ms']:.2f}; in runs of "
                + ", ".join(f"{c}: {ms:.2f}" for c, ms in r["topk_chunked_ms"].items()) + ")"
                for r in entry["select"]))
            save(report)
        layered = [p for p in parts if p != "select"]
        if layered:
            entry["layouts"] = {}
            for layout in s.layouts:  # in the order given: the first is kept if a later one is cut short
                entry["layouts"][layout] = {}
                _time_layout(cfg, with_layout(params, layout), layout, layered, s, entry["weight_bytes"],
                             report.get("bandwidth"), log, entry.get("products_floor"),
                             out=entry["layouts"][layout], saved=lambda: save(report))
        del params
    save(report)
    return report


def _time_layout(cfg, params, layout: str, parts, s: Settings, weights: int, bandwidth: dict | None, log,
                 floor: dict | None = None, out: dict | None = None, saved=lambda: None) -> dict:
    """The layout-dependent parts (ar, verify, compile, round) of one shape with its params in `layout`, filled
    into `out` (returned); `saved()` after each part."""
    out = {} if out is None else out
    if "ar" in parts:
        ar = time_ar(cfg, params, s)
        out["ar"] = {**ar, **bandwidth_bound(weights, bandwidth["measured_GBps"], ar["ms_per_token"]),
                     "ratio_to_products_floor": ar["ms_per_token"] / floor["ms"] if floor else None}
        log(f"[{layout}] AR decode: {ar['ms_per_token']:.3f} ms/token (prompt {s.prompt_len}, {s.new_tokens} new); "
            f"bound {out['ar']['bound_ms_per_token']:.3f} ms (weights / measured bandwidth), ratio "
            f"{format_figure(out['ar']['ratio_to_bound'], '.2f')}; "
            f"{format_figure(out['ar']['ratio_to_products_floor'], '.2f')}x the weight products alone")
        if "long_cache" in ar:
            lc = ar["long_cache"]
            log(f"[{layout}] AR decode on a {lc['slots']}-slot cache: {lc['ms_per_token']:.3f} ms/token, "
                f"{format_figure(lc['ratio_to_short_cache'], '.2f')}x the short cache's")
        saved()
    if "verify" in parts:
        out["verify"] = time_verify(cfg, params, s)
        log(f"[{layout}] verify forward at context {s.context}: " + ", ".join(
            f"T={r['T']}: {r['ms']:.2f} ms ({r['ratio_to_products']:.2f}x its products)" for r in out["verify"]))
        saved()
    if "compile" in parts:
        out["compile"] = time_compile(cfg, params, s)
        log(f"[{layout}] first compile (first call - warm call; of it XLA): " + ", ".join(
            f"{r['method']}: {r['compile_s']:.1f} s ({r['xla_compile_s']:.1f} s)" for r in out["compile"]))
        saved()
    if "round" in parts:
        out["round"] = time_round(cfg, params, s)
        r = out["round"]
        ar_ms = (out.get("ar") or {}).get("ms_per_token")
        if ar_ms and r["loop_round_ms"]:
            r["round_in_ar_steps"] = r["loop_round_ms"] / ar_ms
        if bandwidth:  # the draft and the verify against the bytes each must read (the draft goal, 1 ms)
            gbps = bandwidth["measured_GBps"]
            r["draft_bound_ms"] = r["draft_bytes"] / (gbps * 1e9) * 1e3
            r["draft_ratio_to_bound"] = r["draft_ms"] / r["draft_bound_ms"]
            r["verify_ratio_to_bound"] = r["verify_ms"] / (weights / (gbps * 1e9) * 1e3)
        log(f"[{layout}] DDTree-{s.round_budget} round (verify width {r['verify_width']}): " + ", ".join(
            f"{k[:-3]} {v:.2f}" for k, v in r.items() if k.endswith("_ms") and v is not None) + " ms"
            + (f"; in the loop {r['round_in_ar_steps']:.2f} AR steps" if r.get("round_in_ar_steps") else ""))
        saved()
    return out


def _environment() -> dict:

    dev = jax.devices()[0]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # CPU timings drift with the host's load
    return {"platform": dev.platform, "device_kind": dev.device_kind, "device_count": jax.device_count(),
            "cpu_count": os.cpu_count(), "load_average_1min": load, "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "flax": flax.__version__}


def write_json(path: str, report: dict) -> None:
    """Write the report as indented JSON (tuples as lists), atomically: a run stopped mid-write leaves the
    previous file."""
    atomic.write_bytes(path, json.dumps(report, indent=2, default=str).encode())
