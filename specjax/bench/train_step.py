"""Drafter training step time against the draft vocabulary size, on real data: `python -m specjax bench-train-step`.

    python -m specjax bench-train-step --target smollm2-135m --data specjax/zoo/data/smollm2-135m-instruct \\
        --kind dflash --vocab 0,8192,16384 --steps 6 --json /tmp/train_step.json

For each K (0 = the full vocabulary) the jitted step of `specjax.train.loop` (cached features,
the kind's loss) is compiled, warmed up once, then timed over `--steps` steps with fresh batches
(median seconds per step; the sizes interleaved per repetition so a drifting machine hits each
alike). The features come from the data's feature cache (built if missing, as training does).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from specjax.data.assets import cache_root
from specjax.bench.timing import timed_call
from specjax.models import init_params
from specjax.models.dflash_net import target_outer
from specjax.train.data import load_shards, load_target, params_sha256
from specjax.train.features import build_feature_cache, data_sha256
from specjax.train.loop import TrainSet, make_optimizer
from specjax.train.run import TRAINERS
from specjax.train.vocab import vocab_tables

__all__ = ["time_steps"]


def time_steps(kind_name: str, target: str, data_dir: str, sizes: tuple[int, ...], steps: int, batch_size: int,
               seq_len: int, anchors: int, cache: str | None = None) -> dict:
    """{"K": {"median_s", "steps_s"}} per draft vocabulary size, and the setting."""
    kind = TRAINERS[kind_name]
    tcfg, tparams, _, reserved = load_target(target)
    shards = load_shards(data_dir)
    dcfg = kind.build_config(kind.arch(), tcfg, int(tcfg.vocab_size - 1))  # the kind's default architecture
    layers = kind.layers(dcfg, tcfg)
    tsha, dsha = params_sha256(tparams), data_sha256(shards)
    cache = cache or str(cache_root() / "features" / f"{target.replace('/', '_')}-{tsha[:12]}-{dsha[:12]}")
    build_feature_cache((tcfg, tparams), target, shards, data_dir, layers, cache)
    ts = TrainSet.from_directories(data_dir, cache, layers, seq_len=seq_len, target_sha=tsha)
    fields = {"steps": 1000, "batch_size": batch_size}
    if "anchors" in {f for f in kind.train_config.__dataclass_fields__}:
        fields["anchors"] = anchors
    tc = kind.train_config(**fields)
    opt, _ = make_optimizer(tc)
    touter = target_outer(tparams)
    counts = ts.response_token_counts(tcfg.vocab_size)
    runs = {}
    for k in sizes:
        vocab = vocab_tables(counts, k, tuple(tcfg.eos_token_ids)) if k else None
        step, _ = kind.make_step(dcfg, tcfg, opt, tc)
        dparams = init_params(dcfg, jax.random.key(0), jnp.float32)
        runs[k] = [step, dparams, opt.init(dparams), vocab, []]
    batches = [jax.tree.map(jnp.asarray, ts.batch(ts.rows_at(s, batch_size, 0))) for s in range(steps + 1)]
    for s in range(steps + 1):  # step 0 compiles and warms up each size
        for k in sizes:
            step, dparams, opt_state, vocab, times = runs[k]
            (dparams, opt_state, loss, _), seconds = timed_call(step, dparams, opt_state, touter, batches[s], vocab,
                                                                jax.random.key(s), jnp.int32(s))
            if s:
                times.append(seconds)
            runs[k][1:3] = [dparams, opt_state]
    return {"kind": kind_name, "target": target, "batch_size": batch_size, "seq_len": seq_len, "anchors": anchors,
            "drafter": dcfg.to_hf(), "device": jax.devices()[0].device_kind,
            "sizes": {str(k or tcfg.vocab_size): {"median_s": round(float(np.median(runs[k][4])), 4),
                                                  "steps_s": [round(t, 4) for t in runs[k][4]]} for k in sizes}}
