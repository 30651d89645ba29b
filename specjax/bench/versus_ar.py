"""One prompt, AR against a speculative method: both timed in one run, the greedy output classified
against AR's (what `specjax generate` prints).

    from specjax.bench.versus_ar import versus_ar
    from specjax.drafters.registry import method
    from specjax.pipeline import load_pair

    pair = load_pair("zoo")
    m = method("ddtree-8", pair.cfg, draft=pair.draft, target_params=pair.params, **pair.readers)
    result = versus_ar(pair, m, pair.encode("The guitar is"), max_new_tokens=64)
    result.agreement.kind, result.summary()["speculative"]["speedup"]    # "identical", 1.9

The comparison is of one batch row, prompt `ids`. AR (`generate_ar`) and the method (`generate`) are
each compiled and warmed, then called `timed_runs` times alternately (`specjax.bench.timing.
interleaved_medians`: CPU timings drift 30-50 % run to run, so both see the same drift), and each
reports its median seconds. Greedy speculative decoding must emit AR's tokens up to a float near-tie:
`specjax.equality.compare_with_ar` finds the first token where they part and recomputes AR's logits
there, so `agreement.kind` is "identical", "near-tie" (lossless up to rounding) or "MISMATCH" (a
losslessness bug: `specjax generate` exits 1). Sampled runs draw differently by design and are not
classified (`agreement` None), nor is a run whose method is AR itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import numpy as np

from specjax.bench.timing import interleaved_medians
from specjax.decode import checks_trees_by_default, generate, generate_ar
from specjax.equality import Agreement, compare_with_ar
from specjax.models import pad_prompts
from specjax.pipeline import Pair, cut_at_stop
from specjax.sampling import Sampling

__all__ = ["TIMED_RUNS", "VersusAR", "versus_ar"]

TIMED_RUNS = 9  # CPU timings vary 30-50 % run to run: interleave the two, report medians


@dataclasses.dataclass(frozen=True)
class VersusAR:
    """AR and a speculative method on one prompt, timed in one run (`versus_ar`).

    Fields:
      method: the method's canonical name (`Method.name`; "ar" when it is AR itself).
      sampling: "greedy", or "T=<temperature>" when sampling.
      ar: AR's `GenerateOutput` (tokens int32[1, max_new_tokens], num_tokens int32[1]).
      ar_seconds: median seconds of one AR call.
      ar_text: AR's text (cut at EOS and at the first stop string).
      speculative: the method's `SpeculativeOutput` (tokens int32[1, N], stats per round), or None for AR.
      speculative_seconds: median seconds of one call of the method, or None.
      speculative_text: its text, or None.
      agreement: greedy only: the method's tokens against AR's (`specjax.equality.Agreement`), else None.
    """

    method: str
    sampling: str
    ar: Any
    ar_seconds: float
    ar_text: str
    speculative: Any = None
    speculative_seconds: float | None = None
    speculative_text: str | None = None
    agreement: Agreement | None = None

    @property
    def lossless(self) -> bool:
        """False only for a greedy MISMATCH (a losslessness bug); identical, near-tie, sampled, AR: True."""
        return self.agreement is None or self.agreement.kind != "MISMATCH"

    def summary(self) -> dict:
        """Plain numbers and texts (JSON-ready): {"method", "sampling", "ar": {text, tokens, seconds,
        tokens_per_s}, "speculative": {... + speedup (AR seconds / its seconds), tau (mean accepted length
        per round), rounds, vs_ar (the agreement as text; None when sampling)}} ("speculative" absent for AR)."""
        n = int(self.ar.num_tokens[0])
        out = {"method": self.method, "sampling": self.sampling,
               "ar": {"text": self.ar_text, "tokens": n, "seconds": self.ar_seconds,
                      "tokens_per_s": n / self.ar_seconds}}
        sp = self.speculative
        if sp is not None:
            k = int(sp.num_tokens[0])
            out["speculative"] = {"text": self.speculative_text, "tokens": k, "seconds": self.speculative_seconds,
                                  "tokens_per_s": k / self.speculative_seconds,
                                  "speedup": self.ar_seconds / self.speculative_seconds,
                                  "tau": float(sp.stats.mean_accepted_length()[0]),
                                  "rounds": int(sp.stats.num_rounds[0]),
                                  "vs_ar": None if self.agreement is None else str(self.agreement)}
        return out


def versus_ar(pair: Pair, method, ids: Sequence[int], *, max_new_tokens: int, sampling: Sampling = Sampling(),
              key: jax.Array | None = None, stop: Sequence[str] = (), check_trees: bool | None = None,
              timed_runs: int = TIMED_RUNS) -> VersusAR:
    """Time AR and `method` (a `specjax.drafters.registry.Method` built for `pair`) on the prompt `ids`
    (token ids, the pair's encoding) and compare them (module docstring).

    max_new_tokens: tokens each generates; sampling / key: as `generate` takes them (key default:
    `jax.random.key(0)`); stop: strings the texts are cut before; check_trees: validate every tree the
    method proposes inside its loop (the timings include the checks); None: on for a method from outside
    specjax, by its drafter or its registration (`specjax.decode.checks_trees_by_default`). Raises ValueError from the loops'
    own input checks (positions, sizes) before anything compiles."""
    if isinstance(timed_runs, bool) or not isinstance(timed_runs, int) or timed_runs < 1:
        raise ValueError(f"timed_runs must be an integer >= 1, got {timed_runs!r}")
    key = jax.random.key(0) if key is None else key
    tokens, lengths = pad_prompts([list(ids)])

    def run_ar():
        return generate_ar(pair.params, pair.cfg, tokens, lengths, max_new_tokens, sampling=sampling, key=key)

    check_trees = checks_trees_by_default(check_trees, method.drafter, method.name)

    def run_method():
        return generate(pair.params, pair.cfg, method.drafter, method.params, tokens, lengths, max_new_tokens,
                        sampling=sampling, key=key, check_trees=check_trees)

    eos = set(pair.cfg.eos_token_ids)

    def text_of(out) -> str:
        return cut_at_stop(pair, np.asarray(out.tokens[0, : int(out.num_tokens[0])]).tolist(), tuple(stop), eos)[0]

    mode = "greedy" if sampling.greedy else f"T={sampling.temperature}"
    if method.is_ar:
        ((ar, ar_s),) = interleaved_medians([run_ar], timed_runs)
        return VersusAR(method.name, mode, ar, ar_s, text_of(ar))
    (ar, ar_s), (sp, sp_s) = interleaved_medians([run_ar, run_method], timed_runs)
    agreement = None
    if sampling.greedy:
        n, k = int(ar.num_tokens[0]), int(sp.num_tokens[0])
        agreement = compare_with_ar(pair.params, pair.cfg, list(ids), np.asarray(ar.tokens[0, :n]),
                                    np.asarray(sp.tokens[0, :k]))
    return VersusAR(method.name, mode, ar, ar_s, text_of(ar), sp, sp_s, text_of(sp), agreement)
