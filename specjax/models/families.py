"""The model families: each architecture module registers itself where it is defined (`register`):
its config class, the Hugging Face `model_type`s it reads, and, for a target that can be sharded,
the sharding rules of its layer params. `specjax.models.model` dispatches on the registry (params,
`forward`, `config_from_hf`) and `specjax.sharding` reads the rules from it, as the drafter modules'
`METHODS` feed the method registry.

A sharding rule maps a leaf path inside params["layers"] to the partition of ONE layer's array
(the stacked [L] axis is prepended, replicated): a tuple with a mesh axis name (`DATA`, `MODEL`)
or None (replicated) per dimension.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
import types
from collections.abc import Iterator

from specjax.declared import declaring

__all__ = ["DATA", "MODEL", "NORM_RULES", "Family", "FAMILIES", "MODEL_TYPES", "family_modules", "load_families",
           "register", "restoring"]

DATA, MODEL = "data", "model"  # the mesh axes of `specjax.sharding.make_mesh`
# Every family's layer norms are replicated, whatever their leaf names.
NORM_RULES = {(norm, leaf): (None,) for norm in ("input_layernorm", "post_attention_layernorm")
              for leaf in ("scale", "bias", "weight")}


@dataclasses.dataclass(frozen=True)
class Family:
    """One registered architecture.

    Fields:
      module: the architecture module (its `Outer` / `Block` classes, `param_maps`, `IGNORED_KEYS`).
      config: its config class (a frozen dataclass; `type(cfg)` selects the family).
      model_types: the HF `config.json` model_type values read into `config` (none for draft networks,
        which are recognised by their layout: `config_from_hf`).
      layer_sharding: the sharding rules of one layer's params (module docstring), or None: not
        shardable as a target (drafter params are replicated).
      reference: (is_reference_config(hf dict) -> bool, from_reference(hf dict) -> config) for a draft
        network whose published config.json is recognised by its layout rather than a model_type, or None.
      reference_order: the order `config_from_hf` tries the layouts in (lower first: a layout that
        extends another, as Domino's extends DFlash's, goes before it).
    """

    module: types.ModuleType
    config: type
    model_types: tuple[str, ...] = ()
    layer_sharding: dict | None = None
    reference: tuple | None = None
    reference_order: int = 0


FAMILIES: dict[type, Family] = {}  # config class -> family
MODEL_TYPES: dict[str, type] = {}  # HF model_type -> config class


def register(module: types.ModuleType, config: type, model_types: tuple[str, ...] = (),
             layer_sharding: dict | None = None, reference: tuple | None = None, reference_order: int = 0) -> Family:
    """Register an architecture (call it at the bottom of its module); returns its `Family`.
    Raises ValueError when the config class or a model_type is registered twice."""
    if config in FAMILIES and FAMILIES[config].module is not module:
        raise ValueError(f"{config.__name__} is already registered by {FAMILIES[config].module.__name__}")
    taken = [t for t in model_types if MODEL_TYPES.get(t, config) is not config]
    if taken:
        raise ValueError(f"model_type(s) {taken} are already registered")
    fam = Family(module, config, tuple(model_types), layer_sharding, reference, reference_order)
    FAMILIES[config] = fam
    MODEL_TYPES.update({t: config for t in model_types})
    return fam


@contextlib.contextmanager
def restoring() -> Iterator[None]:
    """``with restoring():`` the families registered inside the block (a module imported from outside the package
    by ``--methods-from``, say) are forgotten when it ends, with their model types."""
    families, model_types = dict(FAMILIES), dict(MODEL_TYPES)
    try:
        yield
    finally:
        FAMILIES.clear()
        FAMILIES.update(families)
        MODEL_TYPES.clear()
        MODEL_TYPES.update(model_types)


def family_modules() -> tuple[str, ...]:
    """The modules of `specjax.models` that declare a ``FAMILY`` (`specjax.declared.declaring`: read from their
    syntax trees, nothing imported), so a new architecture or draft network needs no entry in any list."""
    return declaring(sys.modules[__package__], "FAMILY")


def load_families() -> dict[type, Family]:
    """Import every family module (`family_modules`): each registers itself; returns `FAMILIES`."""
    for name in family_modules():
        importlib.import_module(name)
    return FAMILIES
