"""Which drafters' trees the loop checks on device, and the check (`generate(..., check_trees=...)`).

`check_proposed_tree` is the on-device check a round runs when `check_trees` is on: one `checkify.check`
per rule of `specjax.tree.TREE_RULES`. `checks_trees_by_default` is the policy of `check_trees=None` (the
default of `generate`, `Pipeline.generate` and the bench harness): on exactly for a drafter `from_outside`
specjax, whose trees nobody has checked, so the package's own drafters run the unchecked program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from specjax.drafters.protocol import Wrapper
from specjax.drafters.registry import parse as parse_method
from specjax.tree import TREE_RULES, tree_violations

__all__ = ["check_proposed_tree", "checks_trees_by_default", "from_outside"]


def check_proposed_tree(tree, active: jax.Array, rounds: jax.Array, drafter, vocab_size: int) -> None:
    """The on-device check of `generate(..., check_trees=True)`: one `checkify.check` per rule of
    `specjax.tree.TREE_RULES` over the active rows' trees (`tree_violations`), whose error names the
    drafter, the first offending row, its round (0-based) and node, and the rule. tree: Tree [B, N];
    active bool[B]; rounds int32[B] rounds each row ran before this one. The tree's shape is checked
    when tracing (ValueError): [B, drafter.budget]."""
    b = active.shape[0]
    if tree.tokens.shape != (b, drafter.budget):
        raise ValueError(f"check_trees: {type(drafter).__name__} proposed a tree of shape {tree.tokens.shape}, "
                         f"expected [B, budget] = {(b, drafter.budget)}")
    bad = tree_violations(tree, drafter.max_depth, vocab_size) & active[:, None, None]
    for k, rule in enumerate(TREE_RULES):
        rows = bad[..., k].any(-1)
        row = jnp.argmax(rows)
        checkify.check(~rows.any(), f"check_trees: {type(drafter).__name__} proposed an invalid tree: row {{row}}, "
                       f"round {{round}}, node {{node}}: {rule} (fix the drafter's tree; the check is on by default "
                       f"for a drafter from outside specjax, check_trees=False turns it off)", row=row,
                       round=rounds[row], node=jnp.argmax(bad[row, :, k]))


def _in_package(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "specjax"


def from_outside(drafter, method: str | None = None) -> bool:
    """Whether `drafter` is a researcher's rather than specjax's own: its class, or that of a drafter it wraps
    (`Wrapper.inner`) or a dataclass it holds, recursively, is defined outside the `specjax` package; or
    `method` (`Method.name`) names a method registered from outside (`specjax.register`, an entry point,
    ``--methods-from``: its `MethodSpec.build` lives outside `specjax`; a name no method reads: the classes decide)."""
    todo, seen = [drafter], set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        if not _in_package(type(obj)):
            return True
        held = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
        todo += [x for x in held if dataclasses.is_dataclass(x)] + ([obj.inner] if isinstance(obj, Wrapper) else [])
    try:
        return method is not None and not _in_package(parse_method(method).spec.build)
    except ValueError:
        return False


def checks_trees_by_default(check_trees: bool | None, drafter, method: str | None = None) -> bool:
    """`check_trees` of `generate`, `Pipeline.generate`, the bench harness: True / False as given; None (their
    default): on exactly for a drafter `from_outside` specjax (built by `method`), so the package's own run
    the unchecked program, as fast as before."""
    if check_trees is not None and not isinstance(check_trees, bool):
        raise TypeError(f"check_trees must be True, False or None (on for drafters from outside specjax), got "
                        f"{type(check_trees).__name__} {check_trees!r}")
    return from_outside(drafter, method) if check_trees is None else check_trees
