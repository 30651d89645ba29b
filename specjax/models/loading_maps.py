"""The vocabulary of checkpoint key maps: which HF tensor becomes which param, and how.

Each architecture lists `ParamMap`s (HF key, params path, `Transform`); the loader and
saver in `specjax.models.loading` apply them in both directions and check shapes.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Transform:
    """An invertible layout change HF tensor <-> our param (build it with `identity`, `linear` or
    `reshape_transpose`).

    Fields:
      kind: "identity" | "linear" (transpose a [out, in] matrix to [in, out]) |
        "reshape_transpose" (reshape the HF tensor to `split_shape`, then transpose by `perm`).
      hf_shape_: the HF tensor's shape, for "reshape_transpose" only (`to_hf` reshapes back to it;
        the other kinds derive it from our shape: `hf_shape`); () otherwise.
      split_shape: the shape the HF tensor is reshaped to before the transpose ("reshape_transpose"); ().
      perm: the axis permutation applied after that reshape ("reshape_transpose"); ().
    """

    kind: str
    hf_shape_: tuple[int, ...] = ()
    split_shape: tuple[int, ...] = ()
    perm: tuple[int, ...] = ()

    @classmethod
    def identity(cls) -> "Transform":
        return cls("identity")

    @classmethod
    def linear(cls) -> "Transform":
        return cls("linear")

    @classmethod
    def reshape_transpose(cls, hf_shape, split_shape, perm) -> "Transform":
        return cls("reshape_transpose", tuple(hf_shape), tuple(split_shape), tuple(perm))

    def hf_shape(self, ours: tuple[int, ...]) -> tuple[int, ...]:
        if self.kind == "identity":
            return tuple(ours)
        if self.kind == "linear":
            return tuple(ours[::-1])
        return self.hf_shape_

    def to_ours(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "identity":
            return x
        if self.kind == "linear":
            return x.T
        return x.reshape(self.split_shape).transpose(self.perm)

    def to_hf(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "identity":
            return x
        if self.kind == "linear":
            return x.T
        return x.transpose(np.argsort(self.perm)).reshape(self.hf_shape_)


@dataclasses.dataclass(frozen=True)
class ParamMap:
    """One checkpoint tensor <-> one param leaf.

    Fields:
      hf_key: the HF checkpoint key; may contain "{i}" for the layer index (layer maps).
      path: path of the leaf inside the params pytree (inside params["layers"] for layer maps, whose
        leaves are stacked over layers).
      transform: the `Transform` between the HF tensor's layout and the param's.
    """

    hf_key: str
    path: tuple[str, ...]
    transform: Transform
