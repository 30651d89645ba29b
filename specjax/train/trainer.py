"""What a trained drafter kind declares about itself: the `Trainer` record.

Each training module of a drafter kind (`specjax.train.dflash`, `eagle3`, `domino`) ends with

    TRAINER = Trainer(kind="dflash", help=..., train_config=DFlashTrainConfig, arch=DFlashArch,
                      build_config=..., make_step=make_step, layers=..., drafter=..., init=...,
                      measured=("ddtree-8",))

and `specjax.train.run.TRAINERS` collects every such record (`specjax.declared`, the mechanism that
collects `METHODS` and every other declaration; a module outside the package joins through
`specjax.load_methods` / ``--methods-from``): the command line (`python -m specjax.train KIND`, its
flags made from the two dataclasses), `run(kind, plan)`, the recipe (what it trains, how it passes
the export on, what it measures) and the benchmarks read the records, so adding a kind touches its
own files and no list.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

__all__ = ["Trainer", "arch_field", "check_values", "choose_mask_token", "for_compute", "int_tuple",
           "optimizer_steps"]


def choose_mask_token(counts: np.ndarray, reserved: tuple[int, ...] = ()) -> int:
    """A token id that (almost) never occurs in the data: the least frequent id outside
    `reserved` (ties -> the highest id). The frozen target embedding of a never-seen token
    is a fixed vector the target never used, which is what DFlash's dedicated mask id is."""
    order = np.lexsort((-np.arange(len(counts)), counts))
    for i in order:
        if int(i) not in reserved:
            return int(i)
    raise ValueError("every token id is reserved")


def for_compute(tree, dtype):
    """`tree` with its floating leaves cast to `dtype` for a step's products (None: unchanged). Inside a loss
    that `jax.grad` differentiates with respect to float32 master weights, the cast's transpose brings the
    gradients back to float32: bfloat16 products, float32 weights and optimizer state."""
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def optimizer_steps(loss_at: Callable, opt):
    """(step, evaluate) with `specjax.train.loop.train`'s contract from a kind's loss
    `loss_at(params, touter, batch, vocab, key) -> (loss, metrics)`: step = one jitted update of `opt` by the
    loss's gradient (the step index is unused), evaluate = the loss, jitted."""
    @jax.jit
    def step(dparams, opt_state, touter, batch, vocab, key, step_index):
        (value, metrics), grads = jax.value_and_grad(loss_at, has_aux=True)(dparams, touter, batch, vocab, key)
        updates, opt_state = opt.update(grads, opt_state, dparams)
        return optax.apply_updates(dparams, updates), opt_state, value, metrics

    return step, jax.jit(loss_at)


def arch_field(default, help: str, parse: Callable[[str], object] | None = None):
    """A field of an architecture dataclass with the help text its command-line flag shows; `parse` reads
    the flag's text (default: the default's type; a bool field is a switch)."""
    return dataclasses.field(default=default, metadata={"help": help, "parse": parse or type(default)})


def int_tuple(text: str) -> tuple[int, ...]:
    """"2,14,27" -> (2, 14, 27)."""
    return tuple(int(x) for x in text.split(",") if x.strip())


@dataclasses.dataclass(frozen=True)
class Trainer:
    """One trained drafter kind.

    Fields:
      kind: its name (`python -m specjax.train KIND`, the reader kind of `specjax.drafters.registry`).
      help: one line for the command's help.
      train_config: its training config class (`specjax.train.loop.DrafterTrainConfig` and the loss's fields).
      arch: a frozen dataclass of the drafter's architecture choices (fields made with `arch_field`).
      build_config: (arch, target cfg, mask token id, draft vocabulary size or 0) -> the drafter's config.
      make_step: (dcfg, tcfg, opt, tc, compute_dtype=None) -> (step, evaluate), `specjax.train.loop.train`'s
        contract; compute_dtype (bfloat16 on an accelerator) is the dtype of the loss's products (`for_compute`),
        its log-softmax in float32.
      layers: (dcfg, tcfg) -> the target feature layers a batch carries, in the step's order.
      drafter: (dcfg, tcfg) -> a Drafter that decodes with it (the τ measured at export).
      init: (target outer params, tcfg, draft vocabulary tables or None) -> init(dparams) -> dparams for
        a fresh drafter (e.g. its final norm or head from the target's).
      measured: the methods (`specjax.drafters.registry` strings) the recipe measures a trained one with
        (`specjax.recipe`), e.g. ("ddtree-8",); at least one.
      uses_mask_token: whether the drafter has a mask token (chosen from the data unless given).
      loads_as: the name methods need it by (`MethodSpec.needs`), which is also its `--<name> DIR` flag and
        the suffix of its zoo directory (`<model prefix>-<name>`): None for the kind itself (a drafter
        that reads the target, its `READER`'s kind), "draft" for a draft LM.
      packs: its step takes packed rows (`specjax.train.trainset.TrainSet.pack`: "positions" and "segments" in
        the batch), so a run may pack several sequences into each row (`TrainPlan.pack`).
      teacher_layers: (train config, tcfg) -> target layers the batch carries after `layers` for the loss
        itself (e.g. the last, whose logits are a soft-label term), or None: none.
    """

    kind: str
    help: str
    train_config: type
    arch: type
    build_config: Callable
    make_step: Callable
    layers: Callable
    drafter: Callable
    init: Callable
    measured: tuple[str, ...]
    uses_mask_token: bool = True
    loads_as: str | None = None
    packs: bool = False
    teacher_layers: Callable | None = None

    def __post_init__(self):
        if isinstance(self.measured, str) or not self.measured:
            raise ValueError(f"trainer {self.kind!r}: measured must name the methods the recipe measures it with, "
                             f"e.g. measured=({self.kind!r},), got {self.measured!r}")

    @property
    def need(self) -> str:
        """The name methods need a trained one by: `loads_as`, else the kind."""
        return self.loads_as or self.kind


# Ranges of the training fields, checked before anything loads; a field not named here must be a finite
# number of its declared type (strings and booleans are never read as numbers).
_POSITIVE = {"steps", "batch_size", "log_every", "ckpt_every", "anchors", "ttt_steps", "lr", "clip", "gamma",
             "anneal_frac", "layers", "block_size", "gru_hidden", "head_rank", "step_decay", "hidden_size", "num_layers",
             "num_heads", "num_kv_heads", "intermediate_size"}
_NONNEGATIVE = {"seed", "patience", "weight_decay", "warmup_frac", "warmup_steps", "decay_frac", "min_lr_ratio",
                "pure_prefix_len", "lambda0", "soft_labels"}
_AT_MOST_ONE = {"warmup_frac", "decay_frac", "min_lr_ratio", "lambda0", "step_decay", "soft_labels"}


def check_values(obj, flag: Callable[[str], str] = lambda name: name) -> None:
    """Raise ValueError naming the first field of dataclass `obj` of the wrong type or out of range
    (`flag(name)` says how the message names it, e.g. as a command-line flag)."""
    for f in dataclasses.fields(obj):
        value, want = getattr(obj, f.name), type(f.default) if f.default is not dataclasses.MISSING else None
        if value is None or want is None or want is type(None):
            continue
        if f.metadata.get("choices") and value not in f.metadata["choices"]:
            raise ValueError(f"{flag(f.name)} must be one of {', '.join(map(str, f.metadata['choices']))}, got {value!r}")
        if want is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{flag(f.name)} must be true or false, got {value!r}")
            continue
        if want in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (want is int and not isinstance(value, int)):
                raise ValueError(f"{flag(f.name)} must be {'an integer' if want is int else 'a number'}, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{flag(f.name)} must be finite, got {value!r}")
            if f.name in _POSITIVE and not value > 0:
                raise ValueError(f"{flag(f.name)} must be > 0, got {value!r}")
            if f.name in _NONNEGATIVE and value < 0:
                raise ValueError(f"{flag(f.name)} must be >= 0, got {value!r}")
            at_most = f.metadata.get("at_most", 1 if f.name in _AT_MOST_ONE else None)  # declared, or by name
            if at_most is not None and value > at_most:
                raise ValueError(f"{flag(f.name)} must be <= {at_most}, got {value!r}")
