"""Static sampling settings shared by the decode loop, the verifiers and the drafters."""

from __future__ import annotations

import dataclasses

import jax

from specjax.verify import process_logits

__all__ = ["Sampling"]


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How tokens are drawn: temperature, then top-k, then top-p (`process_logits`). Hashable: static under jit.

    One convention for the loop and the verifiers: `log_probs(logits f32[B, ..., V])` gives the
    processed log-probabilities every sampler in specjax draws from.

    Fields:
      temperature: T >= 0 dividing the logits; 0 = greedy (argmax, the first on ties; top_k / top_p
        then change nothing).
      top_k: keep the tokens whose logit is >= the k-th largest (ties at the boundary kept), k >= 1;
        None disables it (k >= V keeps everything).
      top_p: nucleus threshold in (0, 1]: keep the smallest descending prefix whose mass reaches top_p
        (of the distribution left after temperature and top-k); None (or 1) disables it.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def log_probs(self, logits: jax.Array) -> jax.Array:
        """Processed log-probabilities (temperature, top-k, top-p) of f32[..., V] logits."""
        return jax.nn.log_softmax(process_logits(logits, self.temperature, self.top_k, self.top_p), axis=-1)
