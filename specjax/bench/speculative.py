"""Same-run timing of AR and speculative methods: `python -m specjax.bench.speculative`.

Every method runs on the same prompts in one process; each is compiled and warmed up
first, then timed `--repeats` times (median reported, compile excluded). Reported per
method: generated tokens/s, speedup vs AR measured in the same run, mean accepted
length tau (tokens per target forward, bonus included) and acceptance rate.

Without checkpoints it uses random tiny models (acceptance is then meaningless: it
only shows the machinery's overhead); `--target DIR --draft DIR` takes HF checkpoints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.models import GPTNeoXConfig, init_params, load_checkpoint, pad_prompts


def random_pair(vocab: int = 512):
    target = GPTNeoXConfig(vocab_size=vocab, hidden_size=256, num_layers=6, num_heads=8, intermediate_size=1024,
                           rotary_dim=8)
    draft = GPTNeoXConfig(vocab_size=vocab, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256,
                          rotary_dim=4)
    return (target, init_params(target, jax.random.key(0))), (draft, init_params(draft, jax.random.key(1)))


def parse_method(name: str, draft_cfg):
    """'ar' | 'chain<K>' | 'tree<D>x<B>[n<N>]' | 'dynatree' (paper defaults, phase 3)."""
    if name == "ar":
        return None
    if name == "dynatree":
        from specjax.drafters.dynatree import DynaTreeDrafter

        return DynaTreeDrafter(draft_cfg)
    if name.startswith("chain"):
        return ChainDrafter(draft_cfg, int(name[5:]))
    if name.startswith("tree"):
        spec, _, budget = name[4:].partition("n")
        depth, branching = (int(x) for x in spec.split("x"))
        return FixedTreeDrafter(draft_cfg, depth, branching, int(budget) if budget else 256)
    raise ValueError(f"unknown method {name!r}: use ar, chain<K>, tree<D>x<B>[n<N>] or dynatree")


def time_method(run, repeats: int):
    out = run()  # compile + warm-up, discarded
    jax.block_until_ready(out.tokens)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        jax.block_until_ready(out.tokens)
        seconds.append(time.perf_counter() - start)
    return out, statistics.median(seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="ar,chain4,tree4x2")
    parser.add_argument("--target"), parser.add_argument("--draft")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--self-draft", action="store_true",
                        help="draft = target: every draft token is accepted (upper bound of tau, no speedup)")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)

    if args.target:
        (tcfg, tparams), (dcfg, dparams) = load_checkpoint(args.target), load_checkpoint(args.draft)
    else:
        (tcfg, tparams), (dcfg, dparams) = random_pair()
    if args.self_draft:
        dcfg, dparams = tcfg, tparams
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, tcfg.vocab_size, args.prompt_len).tolist() for _ in range(args.batch)]
    tokens, lengths = pad_prompts(prompts)
    records, ar_speed = [], None
    for name in args.methods.split(","):
        drafter = parse_method(name, dcfg)
        if drafter is None:
            run = lambda: generate_ar(tparams, tcfg, tokens, lengths, args.max_new_tokens, eos_ids=())
        else:
            run = lambda d=drafter: generate(tparams, tcfg, d, dparams, tokens, lengths, args.max_new_tokens, eos_ids=())
        out, seconds = time_method(run, args.repeats)
        speed = float(jnp.sum(out.num_tokens)) / seconds
        ar_speed = speed if name == "ar" else ar_speed
        rec = {"method": name, "tokens_per_s": speed, "seconds": seconds,
               "speedup_vs_ar": speed / ar_speed if ar_speed else None}
        if drafter is not None:
            rec.update(mean_accepted_length=float(np.mean(out.stats.mean_accepted_length())),
                       acceptance_rate=float(np.mean(out.stats.acceptance_rate())), budget=drafter.budget)
        records.append(rec)
        print(f"{name:>10}  {speed:9.1f} tok/s  speedup {rec['speedup_vs_ar'] or float('nan'):5.2f}x  "
              f"tau {rec.get('mean_accepted_length', 1.0):5.2f}  accept {rec.get('acceptance_rate', float('nan')):.3f}")
    env = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "dtype": str(jax.tree.leaves(tparams)[0].dtype),
           "target": args.target or "random", "draft": "target" if args.self_draft else args.draft or "random", "batch": args.batch,
           "prompt_len": args.prompt_len, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
