"""The drafter protocol: what the one decode loop (`specjax.decode`) asks of a proposal policy.

A drafter is a frozen dataclass (hashable: static under `jax.jit`); its state is a pytree
that goes in and comes out of every call. Shapes: B batch, T padded prompt width, N tree
budget, D = `max_depth`, n = len(`target_layers`), E the target's hidden size, k =
`target_topk`.

Per generation the loop does, all inside one jitted `lax.while_loop`:

    prefill the target (features of `target_layers` for the prompt, if any are asked)
    state = init(draft_params, tokens, prompt_lengths, max_new_tokens, PromptContext)
    each round:
        tree, draft_probs, state = propose(state, root, active, key, sampling)
        one target forward over [root, tree] (ancestor mask) -> walk -> commit
        state = observe(state, Verified)      # what the target saw this round

Drafters that read the target (DFlash and those built on it) declare static
`target_layers` / `target_topk`; the verify forward then taps only those layers (inside the
layer scan) and the loop gathers the root + accepted-path features with the same slots it
commits into the target cache, so the drafter's context follows the committed sequence
without any re-forward or host round trip.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import jax
from flax import struct

from specjax.tree import Tree
from specjax.verify import WalkResult

__all__ = ["BlockDrafter", "CarriesOver", "Drafter", "PromptContext", "Verified", "Wrapper"]


@struct.dataclass
class PromptContext:
    """What the target saw in prefill, handed to `init` (B rows, T prompt width).

    Fields:
      features: [B, T, n, E] outputs of the drafter's `target_layers` at every prompt position
        (positions >= prompt_lengths[b] are padding), or None when the drafter asks for no layers.
      target_params: the target's params outside the layer stack (embedding, final norm, head): a
        drafter may share them (DFlash embeds with the target's embedding and projects with its LM
        head); the same buffers, not a copy.
      top_ids: int32[B, T, k] the target's top-k next tokens after every prompt position (descending;
        padding positions are don't-care), or None when the drafter's `target_topk` is 0 (retrieval
        drafters fill their table from it).
    """

    features: jax.Array | None
    target_params: dict
    top_ids: jax.Array | None = None


@struct.dataclass
class Verified:
    """One round as the target saw it, handed to `observe` (N = the budget, D = max_depth).

    Fields:
      tree: Tree [B, N] the proposed tree.
      result: `WalkResult`, its walk; `num_accepted` counts only the nodes the output kept
        (max_new_tokens and EOS can cut a round short).
      num_kept: int32[B] tokens committed this round: the root + result.num_accepted (0 for rows
        that were not active).
      active: bool[B] rows that ran this round.
      start: int32[B] position of the root (the target's committed length before the round).
      features: [B, D+1, n, E] target features of the root and the accepted path, in
        `result.path_slots` order (entries >= num_kept are padding), or None when the drafter asks
        for no layers.
      top_ids: int32[B, N+1, k] the target's top-k tokens at every slot (0 = root, i + 1 = node i),
        descending; slots the target did not verify (past a verify width) hold -1; None when
        `target_topk` is 0.
      top_logits: f32[B, N+1, k] the matching logits; -inf past the verified width; None likewise.
    """

    tree: Tree
    result: WalkResult
    num_kept: jax.Array
    active: jax.Array
    start: jax.Array
    features: jax.Array | None = None
    top_ids: jax.Array | None = None
    top_logits: jax.Array | None = None


@runtime_checkable
class Drafter(Protocol):
    """The methods and static attributes `specjax.decode.generate` uses.

    budget         int: tree slots N (static)
    max_depth      int: largest tree depth D (static); the walk accepts at most D nodes
    target_layers  tuple[int, ...]: target decoder layers whose outputs `observe` / `init`
                   receive (0-based; () for none)
    target_topk    int: k of the per-slot target top-k in `Verified` (0 for none)
    verify_widths  optional tuple[int, ...] ascending, ending at `budget`: the target then
                   verifies the smallest prefix of the tree holding every valid node (default:
                   the whole budget)

    Optional contracts, checked with isinstance: `BlockDrafter` (block marginals in one pass, what
    DDTree needs of the drafter it wraps) and `CarriesOver` (params that learn across generations);
    drafters built around another one inherit `Wrapper`.

    Shapes: `propose(state, root int32[B], active bool[B], key, sampling)` returns a Tree [B, N]
    (N = budget), draft probs f32[B, D, V] or None, and the new state; `observe` gets a `Verified`.
    """

    budget: int
    max_depth: int
    target_layers: tuple[int, ...]
    target_topk: int

    def validate(self, target_cfg) -> None:
        """Raise ValueError (on the host, before compiling) if this drafter cannot serve `target_cfg`."""

    def uses_rejection(self, sampling) -> bool:
        """True if T > 0 verification is chain rejection (needs draft probs), else the sampling walk."""

    def init(self, params, tokens: jax.Array, prompt_lengths: jax.Array, max_new_tokens: int,
             context: PromptContext | None = None):
        """-> state. tokens int32[B, T] right-padded prompts, prompt_lengths int32[B]."""

    def propose(self, state, root: jax.Array, active: jax.Array, key: jax.Array, sampling):
        """-> (Tree [B, N], draft probs f32[B, D, V] or None, state). root int32[B] is the
        last committed token (not yet seen by the target); inactive rows should draft nothing."""

    def observe(self, state, verified: Verified):
        """-> state, after the round described by `verified` was committed."""


@runtime_checkable
class BlockDrafter(Protocol):
    """A drafter that drafts a whole block of positions in one pass (DFlash, and Domino's backbone):
    what DDTree builds its tree from (`specjax.drafters.ddtree.DDTreeDrafter`).

    max_depth      int: L, the positions of a block after the root
    block_logits   (state, root int32[B], active bool[B] or None) -> (logits f32[B, L, V], state): the
                   drafter's marginal at each block position, given the committed context and `root`
    """

    max_depth: int

    def block_logits(self, state, root: jax.Array, active: jax.Array | None = None):
        """-> (logits f32[B, L, V], state)."""


@runtime_checkable
class CarriesOver(Protocol):
    """A drafter whose params learn during a generation (Graft's successor table): the next
    `generate` call should start from `carry_over(params, final state)` (the benchmark harness and
    `Pipeline` do; the state is `SpeculativeOutput.draft_state`)."""

    def carry_over(self, params, state):
        """-> the params the next generation starts from."""


class Wrapper:
    """Mixin for a drafter built around another one, `inner` (DDTree around a block drafter, retrieval
    around DDTree, Graft(TAIL) around chain DFlash): the tree depth, the target layers it reads and the
    host check are the inner drafter's unless the wrapper overrides them. A wrapper defines `inner`
    (the field holding the wrapped drafter) and whatever else it changes."""

    @property
    def inner(self):  # pragma: no cover - each wrapper names its field
        raise NotImplementedError

    @property
    def max_depth(self) -> int:
        return self.inner.max_depth

    @property
    def target_layers(self) -> tuple[int, ...]:
        return tuple(getattr(self.inner, "target_layers", ()))

    def validate(self, target_cfg) -> None:
        self.inner.validate(target_cfg)

