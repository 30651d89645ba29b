"""What a reduced draft vocabulary saves: `python -m specjax bench-draft-vocab [--json [PATH]]` (`run(VocabBench(...))`).

Times DFlash's draft call for a SmolLM2-135M-shaped target (`specjax.bench.device.SHAPES`:
hidden 576, vocabulary 49,152, a tied head; random weights, nothing is downloaded) and a
one-layer DFlash drafter of block 16 (15 drafted positions, 3 tapped layers as the zoo's
SmolLM2 drafter), at the full vocabulary and at draft vocabularies of K ids
(`specjax.models.draft_vocab`; default K = 8192 and 16384). Every call is jitted and warm; the
configurations are timed in interleaved rounds (a machine shared with other work drifts),
and each column is the median over all rounds:

  block_ms     `DFlashDrafter.block_logits`: the drafter forward over its block after a context
               of `--context` committed positions, then the LM head over its 15 rows (with a
               draft vocabulary: the K columns the drafter's `init` gathered once)
  head_ms      that LM head alone: `vocab_logits` with the columns gathered beforehand
               (contraction [.., E] x [E, K], scattered into [.., V])
  head_gather_ms  the same, gathering the K columns out of the [V, E] head in the call (what
               the drafter would pay every round without the gathered columns in its state)
  speedup      full-vocabulary block_ms / block_ms

Only the target's embedding / head is materialized (the drafter shares nothing else), so
the 30 target layers are never allocated. Prints a table; `--json` prints the rows and the
device as JSON (`--json PATH` writes them to PATH instead).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

from specjax.bench.device import DTYPES, SHAPES
from specjax.bench.timing import timed_call
from specjax.models.draft_vocab import draft_head, frequent_ids, vocab_logits, with_draft_vocab
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.protocol import PromptContext
from specjax.models.dflash import DFlashConfig
from specjax.models.dflash_net import target_outer
from specjax.models.model import init_params
from specjax.numerics import DEFAULT_PRECISION, matmul_scope

__all__ = ["VocabBench", "calls_for", "run", "setup", "time_interleaved"]

TARGET_SHAPE = "smollm2-135m"
TAPPED = (2, 14, 27)  # the zoo's SmolLM2 DFlash drafter's target layers


def setup(batch: int, context: int, dtype, block_size: int = 16, seed: int = 0):
    """(drafter, drafter params, DFlashState after a prefill of `context` random features, root int32[B],
    target outer params): everything `block_logits` reads, for the SmolLM2-shaped target."""
    tcfg = SHAPES[TARGET_SHAPE]
    k_target, k_draft, k_feat = jax.random.split(jax.random.key(seed), 3)
    touter = target_outer(init_params(dataclasses.replace(tcfg, num_layers=1), k_target, dtype))  # outer: any depth
    dcfg = DFlashConfig.for_target(tcfg, num_layers=1, target_layer_ids=TAPPED, block_size=block_size,
                                   mask_token_id=tcfg.vocab_size - 1)
    dparams = init_params(dcfg, k_draft, dtype)
    drafter = DFlashDrafter(dcfg, tcfg)
    features = jax.random.normal(k_feat, (batch, context, len(TAPPED), tcfg.hidden_size), dtype)
    tokens = jnp.zeros((batch, context), jnp.int32)
    lengths = jnp.full((batch,), context, jnp.int32)
    state = jax.jit(drafter.init, static_argnums=3)(dparams, tokens, lengths, 64,
                                                   PromptContext(features=features, target_params=touter))
    return drafter, dparams, state, jnp.arange(batch, dtype=jnp.int32) + 1, touter


def _scoped(fn):
    """fn jitted under specjax's default matmul precision (as the decode loop runs it)."""
    def run(*args):
        with matmul_scope(DEFAULT_PRECISION):
            return fn(*args)
    return jax.jit(run)


def calls_for(drafter, dparams, state, root, touter, k: int | None) -> dict:
    """{column: (jitted fn, args)} of one configuration: draft vocabulary size k (None: the full
    vocabulary; ids = the k lowest ids, which ones does not matter for the time)."""
    tcfg = drafter.target_cfg
    ids = None if k is None else jnp.asarray(frequent_ids(np.ones(tcfg.vocab_size), k))
    params = dparams if ids is None else with_draft_vocab(dparams, ids, tcfg.vocab_size)
    state = state.replace(params=params, draft_head=draft_head(touter, tcfg, ids))
    hidden = jax.random.normal(jax.random.key(1), (root.shape[0], drafter.block - 1, tcfg.hidden_size),
                               touter["embed"]["embedding"].dtype)
    calls = {"block_ms": (_scoped(lambda s, r: drafter.block_logits(s, r)[0]), (state, root)),
             "head_ms": (_scoped(lambda t, h, i, w: vocab_logits(t, tcfg, h, i, w)), (touter, hidden, ids,
                                                                                      state.draft_head))}
    if ids is not None:
        calls["head_gather_ms"] = (_scoped(lambda t, h, i: vocab_logits(t, tcfg, h, i)), (touter, hidden, ids))
    return calls


def time_interleaved(configs: dict, rounds: int, reps: int) -> dict:
    """{config: {column: median ms}} over `rounds` rounds of `reps` calls of every (fn, args) of
    every config, interleaved; everything is compiled and warmed first."""
    for calls in configs.values():
        for fn, args in calls.values():
            jax.block_until_ready(fn(*args))
            jax.block_until_ready(fn(*args))
    seconds = {(c, col): [] for c, calls in configs.items() for col in calls}
    for _ in range(rounds):
        for c, calls in configs.items():
            for col, (fn, args) in calls.items():
                seconds[c, col] += [timed_call(fn, *args)[1] for _ in range(reps)]
    out = {c: {} for c in configs}
    for (c, col), ts in seconds.items():
        out[c][col] = 1e3 * statistics.median(ts)
    return out


@dataclasses.dataclass(frozen=True)
class VocabBench:
    """What `run` times.

    Fields:
      ks: draft vocabulary sizes (the full vocabulary is always timed too).
      batches: batch sizes.
      context: committed context positions before the block.
      rounds: interleaved rounds over all configurations.
      reps: timed calls per configuration and round.
      dtype: params dtype of `DTYPES` (None: float32 on CPU, bfloat16 elsewhere).
      json: "-": print the rows as JSON; a path: write them there; None: neither.
    """

    ks: tuple[int, ...] = (8192, 16384)
    batches: tuple[int, ...] = (1, 8)
    context: int = 128
    rounds: int = 8
    reps: int = 5
    dtype: str | None = None
    json: str | None = None


def run(args: VocabBench = VocabBench()) -> list[dict]:
    """Time every configuration, log a row each, return the rows."""
    device = jax.devices()[0]
    dtype_name = args.dtype or ("float32" if device.platform == "cpu" else "bfloat16")
    log = sys.stderr if args.json == "-" else sys.stdout
    print(f"# DFlash draft call, {TARGET_SHAPE}-shaped target (V = {SHAPES[TARGET_SHAPE].vocab_size}), 1 draft "
          f"layer, block 16, context {args.context}, {dtype_name} on {device.platform} ({device.device_kind}), "
          f"jax {jax.__version__}", file=log)
    header = f"{'B':>3} {'K':>6} {'block_ms':>9} {'head_ms':>8} {'head_gather_ms':>14} {'speedup':>8}"
    print(header + "\n" + "-" * len(header), file=log)
    rows = []
    for b in args.batches:
        setting = setup(b, args.context, DTYPES[dtype_name])
        ks = [None, *args.ks]
        times = time_interleaved({k: calls_for(*setting, k) for k in ks}, args.rounds, args.reps)
        for k in ks:
            r = {"batch": b, "k": SHAPES[TARGET_SHAPE].vocab_size if k is None else k, "full_vocab": k is None,
                 **times[k], "speedup": times[None]["block_ms"] / times[k]["block_ms"]}
            rows.append(r)
            gather = f"{r['head_gather_ms']:14.3f}" if "head_gather_ms" in r else f"{'-':>14}"
            print(f"{b:>3} {r['k']:>6} {r['block_ms']:9.3f} {r['head_ms']:8.3f} {gather} {r['speedup']:7.2f}x",
                  file=log, flush=True)
    if args.json is not None:
        meta = dict(target=TARGET_SHAPE, vocab=SHAPES[TARGET_SHAPE].vocab_size, hidden=SHAPES[TARGET_SHAPE].hidden_size,
                    draft_layers=1, block_size=16, context=args.context, dtype=dtype_name, rounds=args.rounds,
                    reps=args.reps, platform=device.platform, device_kind=device.device_kind, jax=jax.__version__)
        text = json.dumps(dict(meta=meta, rows=rows), indent=2)
        if args.json == "-":
            print(text)
        else:
            pathlib.Path(args.json).write_text(text)
    return rows
