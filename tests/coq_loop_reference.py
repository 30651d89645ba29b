"""The toy target and drafter of proofs/coq/LoopLink.v as a specjax model family and a specjax
drafter (issue 61, item 1; not a test module: tests/test_coq_loop_link.py uses it).

The toy target, V tokens, L layers, exact in float32 (every value is a small integer):

* a layer input is (t, p, a): token, position, accumulator; the embedding of t is (t, 0, 0);
* at layer l a token at position p with input (t, _, a) writes the value
  ((p + 1) * ((l + 1) * t + a)) mod 7 into the KV cache (the layer's weight holds l + 1);
* layer l's output for a query at position p is (t, p, (sum of the values it sees) mod 7),
  the sum taken over the visible slots of the real cache with the real mask: every committed
  slot and the query's row of the verify block's mask. So a mask that hides an ancestor or a
  cache that holds one entry too many changes the token;
* the head is a one-hot table: logits(t, p, a) = onehot(tbl[t, p mod 3, a]).

`TOY_FAMILY` registers it with `specjax.models.families` while a test runs (`registered_toy`:
the family registry is process-wide, so it is removed again afterwards).

`ToyMemoryDrafter` is LoopLink.v's `toy_drafter` (see that file's header): a chain that follows
the toy target's greedy rollout except at one depth chosen by a round counter, a duplicate
sibling from a bigram memory, an invalid node and a branch from the memory, the memory learnt
from the committed text. Its draft params are the table (int32[V, 3, 7]); `toy_greedy` is its
own rollout of the toy target (a second implementation of the model, used only for proposing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from specjax.models.families import FAMILIES, register
from specjax.tree import Tree

MODA = 7  # the accumulator's modulus (LoopLink.MODA)
MODP = 3  # positions enter the head modulo this (LoopLink.MODP)


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """The toy target's static config: V = vocab_size tokens, L = num_layers layers."""

    vocab_size: int
    num_layers: int
    num_kv_heads: int = 1
    head_dim: int = 1
    hidden_size: int = 3
    max_position_embeddings: int | None = None
    eos_token_ids: tuple[int, ...] = ()


class Outer(nnx.Module):
    """Embedding (t -> (t, 0, 0)) and the one-hot head table [V, 3, 7, V]."""

    def __init__(self, cfg: ToyConfig, dtype, rngs: nnx.Rngs):
        self.table = nnx.Param(jnp.zeros((cfg.vocab_size, MODP, MODA, cfg.vocab_size), dtype))

    def embed_tokens(self, tokens):  # int32[B, T] -> f32[B, T, 3]
        t = tokens.astype(self.table.dtype)
        return jnp.stack([t, jnp.zeros_like(t), jnp.zeros_like(t)], axis=-1)

    def logits(self, x):  # [B, T, 3] -> f32[B, T, V]
        t, p, a = (x[..., i].astype(jnp.int32) for i in range(3))
        return self.table[...][t, p % MODP, a].astype(jnp.float32)


class Block(nnx.Module):
    """One toy layer (module docstring); its only param is the layer's weight l + 1."""

    def __init__(self, cfg: ToyConfig, dtype, rngs: nnx.Rngs):
        self.weight = nnx.Param(jnp.ones((1,), dtype))

    def __call__(self, x, positions, mask, kv):
        t, a = x[..., 0].astype(jnp.int32), x[..., 2].astype(jnp.int32)
        w = self.weight[...][0].astype(jnp.int32)
        value = ((positions + 1) * (w * t + a)) % MODA  # [B, T]
        new = value.astype(x.dtype)[:, :, None, None]  # [B, T, K=1, D=1]
        kv = kv.append(jnp.zeros_like(new), new)
        layer_v = jax.lax.dynamic_index_in_dim(kv.v, kv.layer, 0, keepdims=False)[:, 0, :, 0]  # [B, S]
        seen = jnp.sum(jnp.where(mask, layer_v[:, None, :], 0), axis=-1)  # [B, T] exact small integers
        out = jnp.round(seen).astype(jnp.int32) % MODA
        return jnp.stack([x[..., 0], positions.astype(x.dtype), out.astype(x.dtype)], axis=-1), kv


@contextlib.contextmanager
def registered_toy():
    """`ToyConfig` registered as a model family while the block runs (then removed: other tests
    check that the registry holds exactly the package's families)."""
    register(sys.modules[__name__], ToyConfig)
    try:
        yield
    finally:
        FAMILIES.pop(ToyConfig, None)


def toy_params(tbl: np.ndarray, num_layers: int) -> dict:
    """The toy target's params for the table int[V, 3, 7] (values in [0, V)): the one-hot head
    and the layer weights 1..L."""
    v = tbl.shape[0]
    table = np.eye(v, dtype=np.float32)[tbl]  # [V, 3, 7, V]
    return {"table": jnp.asarray(table),
            "layers": {"weight": jnp.arange(1, num_layers + 1, dtype=jnp.float32)[:, None]}}


def toy_greedy(tbl: jax.Array, seq: jax.Array, n: jax.Array, num_layers: int, steps: int):
    """The toy target's greedy rollout of `steps` tokens after seq[b, :n[b]] (int32[B, W], W
    > n + steps), computed from the definition (prefix sums of the values, layer by layer).
    Returns int32[B, steps]."""
    b, w = seq.shape
    pos = jnp.arange(w)[None]
    rows = jnp.arange(b)
    out = []
    for _ in range(steps):
        live = pos < n[:, None]
        a = jnp.zeros_like(seq)
        for layer in range(num_layers):
            value = jnp.where(live, ((pos + 1) * ((layer + 1) * seq + a)) % MODA, 0)
            a = jnp.cumsum(value, axis=1) % MODA
        last = n - 1
        nxt = tbl[seq[rows, last], last % MODP, a[rows, last]]
        out.append(nxt)
        seq = seq.at[rows, n].set(nxt)
        n = n + 1
    return jnp.stack(out, axis=1).astype(jnp.int32)


@struct.dataclass
class ToyState:
    """ToyMemoryDrafter's state (B rows, H text slots, V tokens).

    Fields:
      tbl: int32[V, 3, 7] the toy target's table (the draft params).
      text: int32[B, H] the committed text without the root (the root written at `length` once proposed).
      length: int32[B] committed tokens in `text`.
      mem: int32[B, V] the bigram memory: the token that last followed each token.
      counter: int32[B] rounds so far plus the prompt length (LoopLink.toy_init).
      root: int32[B] this round's root (set by propose, read by observe).
    """

    tbl: jax.Array
    text: jax.Array
    length: jax.Array
    mem: jax.Array
    counter: jax.Array
    root: jax.Array


@dataclasses.dataclass(frozen=True)
class ToyMemoryDrafter:
    """LoopLink.v's toy_drafter (module docstring): Tree [B, D + 3], no draft probs.

    Fields:
      vocab_size: V, the toy target's vocabulary.
      depth: D >= 1, the chain's depth (= max_depth).
      num_layers: L, the toy target's layers (its greedy rollout).
      tag: a label only (a distinct tag is a distinct static drafter, hence a fresh trace of the loop:
        how the mutation tests keep their mutant programs apart from the real one).
    """

    vocab_size: int
    depth: int
    num_layers: int
    tag: str = ""

    target_layers = ()
    target_topk = 0

    @property
    def budget(self) -> int:
        return self.depth + 3

    @property
    def max_depth(self) -> int:
        return self.depth

    def validate(self, target_cfg) -> None:
        if target_cfg.vocab_size != self.vocab_size:
            raise ValueError(f"toy drafter of vocabulary {self.vocab_size} on a target of {target_cfg.vocab_size}")

    def uses_rejection(self, sampling) -> bool:
        return False

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None) -> ToyState:
        b, t = tokens.shape
        v = self.vocab_size
        width = t + max_new_tokens + self.depth + 2
        text = jnp.zeros((b, width), jnp.int32).at[:, :t].set(tokens.astype(jnp.int32))
        lengths = prompt_lengths.astype(jnp.int32)
        mem = jnp.broadcast_to((jnp.arange(v, dtype=jnp.int32) + 1) % v, (b, v))
        rows = jnp.arange(b)
        for j in range(t - 1):  # the prompt's pairs, in order (a later pair wins)
            prev, nxt = text[:, j], text[:, j + 1]
            mem = mem.at[rows, prev].set(jnp.where(j + 1 < lengths, nxt, mem[rows, prev]))
        return ToyState(tbl=jnp.asarray(params, jnp.int32), text=text, length=lengths, mem=mem, counter=lengths,
                        root=jnp.zeros((b,), jnp.int32))

    def propose(self, state: ToyState, root, active, key, sampling):
        b = root.shape[0]
        d, v = self.depth, self.vocab_size
        rows = jnp.arange(b)
        text = state.text.at[rows, state.length].set(root)
        y = toy_greedy(state.tbl, text, state.length + 1, self.num_layers, d)  # [B, D]
        k = state.counter % (d + 2) + 1  # the corrupted depth (none when k > D)
        depths = jnp.arange(1, d + 1)[None]
        chain = jnp.where(depths == k[:, None], (y + 1) % v, y)
        tokens = jnp.concatenate([chain, state.mem[rows, root][:, None], jnp.zeros((b, 1), jnp.int32),
                                  state.mem[rows, chain[:, 0]][:, None]], axis=1)
        parents = jnp.array(list(range(-1, d - 1)) + [-1, -1, 0], jnp.int32)
        depth = jnp.array(list(range(1, d + 1)) + [1, 0, 2], jnp.int32)
        valid = jnp.array([True] * (d + 1) + [False, True])[None] & active[:, None]
        tree = Tree(tokens=jnp.where(valid, tokens, 0), parents=jnp.where(valid, parents[None], -1),
                    depth=jnp.where(valid, depth[None], 0), valid=valid)
        return tree, None, state.replace(text=text, root=root)

    def observe(self, state: ToyState, verified) -> ToyState:
        b, h = state.text.shape
        rows = jnp.arange(b)
        keep = jnp.where(verified.active, verified.num_kept, 0)
        seq = jnp.concatenate([state.root[:, None], verified.result.emitted], axis=1)  # root, e_1, ..., e_{D+1}
        mem, text = state.mem, state.text
        for j in range(seq.shape[1] - 1):  # pairs (seq_j, seq_{j+1}) of the kept tokens, in order
            on = j < keep
            mem = mem.at[rows, seq[:, j]].set(jnp.where(on, seq[:, j + 1], mem[rows, seq[:, j]]))
            text = text.at[rows, jnp.where(on, state.length + j, h)].set(seq[:, j], mode="drop")
        return state.replace(text=text, length=state.length + keep, mem=mem,
                             counter=state.counter + verified.active.astype(jnp.int32))
