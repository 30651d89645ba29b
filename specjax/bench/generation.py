"""Data-generation speed of the continuous engine: `python -m specjax bench-generation` (`pool_speed`).

    python -m specjax bench-generation --target smollm2-135m --start 3072 --warmup 90 --seconds 240

Runs `specjax.train.continuous.stream` (the data command's default engine, its recipe's settings:
pool 128, 256 new tokens, 192 prompt tokens, every 4th prompt sampled) over the training prompts
from index `--start` and counts the response tokens the pool picks between `--warmup` seconds
(after the refill shapes have compiled) and `--warmup + --seconds`; prints them as JSON. Nothing
is written. Run it with the machine otherwise idle.
"""

from __future__ import annotations

import time

from specjax.data.train_sources import DEFAULT_WEIGHTS, training_prompts
from specjax.train.continuous import lookahead_for, stream
from specjax.train.data import DataRecipe, encode_prompt, load_target, sampled_every

__all__ = ["pool_speed"]


def pool_speed(target: str, start: int, warmup: float, seconds: float, batch_size: int = 128,
               max_new_tokens: int = 256, max_prompt_tokens: int = 192, chunk: int = 16,
               lookahead: int | None = None) -> dict:
    """{"tokens", "seconds", "tokens_per_s"} of the pool over a window of at least `seconds`: from the
    first chunk that ends after `warmup` to the first that ends `seconds` later (two different chunks,
    so the window is never empty, however long one chunk takes: a cold compile can span both marks)."""
    cfg, params, enc, _ = load_target(target)
    order = training_prompts(dict(DEFAULT_WEIGHTS), 0)
    every = sampled_every(DataRecipe(target=target))  # the data command's sampled prompts

    def prompts():
        for i in range(start, len(order)):
            ids = encode_prompt(enc, order[i].text, max_prompt_tokens)
            if ids:
                yield i, ids, bool(every) and i % every == every - 1

    t0 = time.time()
    marks: list[tuple[float, int]] = []  # (seconds since t0, tokens picked) at the window's start and end
    picked = [0]

    def on_tokens(n: int) -> None:
        picked[0] += n
        now = time.time() - t0
        if not marks and now >= warmup or len(marks) == 1 and now >= marks[0][0] + seconds:
            marks.append((now, picked[0]))

    for _ in stream(params, cfg, prompts(), batch_size=batch_size, max_new_tokens=max_new_tokens,
                    max_prompt_tokens=max_prompt_tokens, eos_ids=tuple(cfg.eos_token_ids), chunk=chunk,
                    on_tokens=on_tokens, lookahead=lookahead):
        if len(marks) == 2:
            break
    if len(marks) < 2:
        raise ValueError("the prompts ran out before the measurement window ended: lower --start or --seconds")
    (ta, ca), (tb, cb) = marks
    return {"tokens": cb - ca, "seconds": round(tb - ta, 1), "tokens_per_s": round((cb - ca) / (tb - ta), 1),
            "batch_size": batch_size, "chunk": chunk, "lookahead": lookahead_for(batch_size, lookahead)}


