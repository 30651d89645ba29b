"""Host-side checks of what users pass to the entry points, before anything is traced or compiled.

A bad input fails here at once with a message naming what to fix; an input with one obvious
meaning is accepted in that meaning:

    prompts        int32[B, T] with prompt_lengths int32[B] (unchanged); a list of token lists
                   (right-padded, `pad_prompts`); one prompt, a 1-D array or list (a batch of 1);
                   a 2-D array without lengths (every row is a whole prompt)
    eos_ids        a tuple of token ids, or one int (a set of one)
    sampling, key  a `Sampling` with finite settings (NaN / inf refused); a PRNG key whenever it samples
    integers       Python / numpy ints, never bools or strings (`check_int`)
    stop strings   one str is ONE stop string; each non-empty (`stop_strings`)
    callbacks      callable (`check_callback`)
    positions      prompt + max_new_tokens within the model's `max_position_embeddings`
    configs        a drafter built from the config class it runs (`require_config`)

Under a JAX transformation (`jax.jit`, `jax.vmap`, ...) prompts may be tracers: their values are
unknown until the program runs, so only what static shapes and dtypes say is checked
(`is_traced`, `check_prompt_shapes`); everything static (max_new_tokens, sampling, pad_id, the
precision) is checked as on concrete inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
import numpy as np

from specjax.numerics import check_precision
from specjax.sampling import Sampling

__all__ = ["WrongConfigError", "as_eos_ids", "as_prompt_batch", "check_callback", "check_generate_args",
           "check_finite", "check_int", "check_positions", "check_prompt_shapes", "check_sampling", "check_static_args", "is_traced",
           "pad_prompts", "raise_on_mismatch", "require_config", "stop_strings", "validate_prompts"]


class WrongConfigError(TypeError, ValueError):
    """An object got a config (or params) of another kind than it runs (e.g. an EAGLE-3 config in a
    DFlash drafter). Both a TypeError and a ValueError, so either `except` clause catches it."""


# Which drafter runs each config class (by name: no model imports here), for the hint of `require_config`.
_DRAFTER_FOR = {
    "DFlashConfig": "DFlashDrafter(cfg, target_cfg) (DDTree, Graft: on top of it)",
    "DominoConfig": "DominoDrafter(cfg, target_cfg) (use_head=False drafts from its DFlash backbone alone)",
    "Eagle3Config": "eagle3_drafter(cfg, target_cfg)",
    "GPTNeoXConfig": "a draft-LM drafter (ChainDrafter, FixedTreeDrafter, DynaTreeDrafter, DraftLMStepper)",
    "LlamaConfig": "a draft-LM drafter (ChainDrafter, FixedTreeDrafter, DynaTreeDrafter, DraftLMStepper)",
}


def require_config(owner: str, cfg, *expected: type) -> None:
    """Raise `WrongConfigError` unless `cfg` is exactly one of the `expected` classes (exactly: a
    DominoConfig subclasses DFlashConfig but is not a chain DFlash drafter's), naming what to use."""
    if type(cfg) in expected:
        return
    got = type(cfg).__name__
    hint = f"; {_a(got)} is run by {_DRAFTER_FOR[got]}" if got in _DRAFTER_FOR else ""
    raise WrongConfigError(f"{owner} needs {_a(' or '.join(t.__name__ for t in expected))}, got {_a(got)}{hint}")


def _a(name: str) -> str:
    return ("an " if name[0] in "AEIOU" else "a ") + name


def raise_on_mismatch(error: type[Exception], what: str, missing: list, unexpected: list, bad_shapes: list[str],
                      unexpected_label: str = "unexpected tensors", bad_dtypes: list[str] = ()) -> None:
    """Raise `error` listing every missing, unexpected, wrongly shaped and wrongly typed entry at once."""
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing}")
    if unexpected:
        problems.append(f"{unexpected_label}: {unexpected}")
    if bad_shapes:
        problems.append("wrong shapes: " + "; ".join(bad_shapes))
    if bad_dtypes:
        problems.append("wrong dtypes: " + "; ".join(bad_dtypes))
    if problems:
        raise error(f"{what}: " + " | ".join(problems))


def pad_prompts(prompts: list[list[int]], length: int | None = None, pad_id: int = 0):
    """Right-pad token lists to int32[B, T]; returns (tokens, prompt_lengths int32[B])."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    rows = [np.asarray(p) for p in prompts]
    bad = [b for b, p in enumerate(rows) if p.ndim != 1 or not np.issubdtype(p.dtype, np.integer)]
    if bad:
        raise ValueError(f"every prompt must be a flat list of integer token ids; row {bad[0]} is "
                         f"{rows[bad[0]].dtype}{list(rows[bad[0]].shape)}")
    longest = max(len(p) for p in rows)
    length = longest if length is None else length
    if longest > length:
        raise ValueError(f"prompt of {longest} tokens is longer than the padded length {length}")
    tokens = np.full((len(rows), length), pad_id, np.int32)
    for b, p in enumerate(rows):
        tokens[b, : len(p)] = p
    return jnp.asarray(tokens), jnp.asarray([len(p) for p in rows], jnp.int32)


def as_prompt_batch(tokens, prompt_lengths=None, pad_id: int = 0):
    """(tokens [B, T], prompt_lengths [B]) from any accepted prompt form (module docstring).

    A 2-D array with lengths is returned as it is (no copy, no transfer: sharded prompts stay
    sharded). Raises ValueError naming the problem for anything else (3-D arrays, float ids,
    lengths that disagree with a list of prompts)."""
    if isinstance(tokens, (list, tuple)):
        if tokens and all(isinstance(p, (list, tuple, np.ndarray, jax.Array)) for p in tokens):
            padded, lengths = pad_prompts(list(tokens), pad_id=pad_id)
            if prompt_lengths is not None and np.asarray(prompt_lengths).tolist() != np.asarray(lengths).tolist():
                raise ValueError(f"prompt_lengths {np.asarray(prompt_lengths).tolist()} disagree with the prompts' "
                                 f"lengths {np.asarray(lengths).tolist()}: pass None with a list of prompts")
            return padded, lengths
        tokens = np.asarray(tokens, dtype=object if any(np.ndim(p) for p in tokens) else None)  # one prompt
    elif not (hasattr(tokens, "dtype") and hasattr(tokens, "shape")):
        tokens = np.asarray(tokens, dtype=object)  # None, a number, ...: refused below
    ndim = np.ndim(tokens)
    if ndim not in (1, 2) or not np.issubdtype(tokens.dtype, np.integer) or 0 in np.shape(tokens):
        raise ValueError(f"prompts must be integer token ids: int32[B, T] (with prompt_lengths int32[B]), a list "
                         f"of token lists, or one prompt int32[T]; got {tokens.dtype}{list(np.shape(tokens))}")
    if ndim == 1:  # one prompt: a batch of 1
        tokens = tokens[None].astype(np.int32) if isinstance(tokens, np.ndarray) else tokens[None]
        prompt_lengths = None if prompt_lengths is None else jnp.asarray(prompt_lengths, jnp.int32).reshape(1)
    if prompt_lengths is None:  # every row is a whole prompt
        prompt_lengths = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
    return tokens, prompt_lengths


def as_eos_ids(eos_ids) -> tuple[int, ...] | None:
    """None (the config's EOS ids), or the EOS set as a tuple: one int means a set of one."""
    if eos_ids is None:
        return None
    if isinstance(eos_ids, (int, np.integer)) and not isinstance(eos_ids, bool):
        return (int(eos_ids),)
    return tuple(eos_ids)


def check_int(name: str, value, minimum: int | None = None) -> int:
    """`value` as an int: a Python or numpy integer (not a bool, a float or a string), >= `minimum`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_callback(name: str, callback) -> None:
    """None or a callable: a non-callable would only fail when the compiled loop calls it (an XLA error)."""
    if callback is not None and not callable(callback):
        raise TypeError(f"{name} must be callable (or None), got {type(callback).__name__} {callback!r}")


def stop_strings(stop) -> tuple[str, ...]:
    """Stop strings as a tuple: one str is ONE stop string (not its characters); each must be a non-empty str."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)):
        raise TypeError(f"stop must be a string or a list of strings, got {type(stop).__name__} {stop!r}")
    bad = [s for s in stop if not isinstance(s, str) or not s]
    if bad:
        raise ValueError(f"every stop string must be a non-empty string (an empty one would stop at once), got "
                         f"{bad[0]!r} in {list(stop)!r}")
    return tuple(stop)


def check_finite(name: str, value) -> None:
    """A sampling setting (scalar or per-row) must be real and finite: NaN compares false with every bound,
    so temperature NaN passed `>= 0` and decoded an empty completion."""
    if value is None or is_traced(value):
        return
    if isinstance(value, (bool, np.bool_, str)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    arr = np.asarray(value)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {value!r}")


def check_sampling(sampling, key) -> None:
    """`sampling` must be a `Sampling` with finite numeric settings (an integer top_k), and a sampling run
    (temperature > 0) needs a PRNG key: without one every "sample" would be the same draw."""
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a specjax.sampling.Sampling, e.g. Sampling(temperature={sampling!r}), "
                        f"got {type(sampling).__name__} {sampling!r}")
    check_finite("temperature", sampling.temperature)
    check_finite("top_p", sampling.top_p)
    if sampling.top_k is not None and not is_traced(sampling.top_k) and np.ndim(sampling.top_k) == 0:
        check_int("top_k", sampling.top_k, 1)
    if key is None and not sampling.greedy:
        raise ValueError(f"a PRNG key is required when sampling (temperature {sampling.temperature} > 0): pass "
                         f"key=jax.random.key(seed); without one every call would draw the same tokens")


def check_positions(max_positions: int | None, longest_prompt: int, max_new_tokens: int = 0) -> None:
    """Prompt + max_new_tokens must fit the model's positions (`cfg.max_position_embeddings`; None: no
    limit): rotary models run past it silently, on positions they were never trained for."""
    if max_positions is not None and longest_prompt + max_new_tokens > max_positions:
        raise ValueError(f"prompt of {longest_prompt} tokens + max_new_tokens {max_new_tokens} = "
                         f"{longest_prompt + max_new_tokens} positions exceed the model's {max_positions} "
                         f"(cfg.max_position_embeddings): shorten the prompt or lower max_new_tokens")


def is_traced(*values) -> bool:
    """True when an array leaf of `values` is a tracer (inside `jax.jit`, `jax.vmap`, ...): its
    shape and dtype are known, its values are not."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(values))


def check_prompt_shapes(tokens, prompt_lengths) -> None:
    """tokens int[B, T] (B, T >= 1) and prompt_lengths int[B]: shapes and dtypes only, so it
    works on tracers too."""
    shape, lengths_shape = tuple(np.shape(tokens)), tuple(np.shape(prompt_lengths))
    if len(shape) != 2 or 0 in shape or lengths_shape != shape[:1]:
        raise ValueError(f"tokens must be int32[B, T] and prompt_lengths int32[B], got {shape}, {lengths_shape}")
    for name, x in (("tokens", tokens), ("prompt_lengths", prompt_lengths)):
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        if not np.issubdtype(dtype, np.integer):
            raise ValueError(f"{name} must be integer token ids / lengths, got dtype {dtype}")


def _on_host(x) -> np.ndarray:
    """x as a host array: rows held by other processes (a batch split over a multi-process mesh) are gathered
    from them (a collective: every process validates the same prompts, as every process runs the loop)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def validate_prompts(tokens, prompt_lengths, vocab_size: int, *, max_positions: int | None = None,
                     max_new_tokens: int = 0) -> None:
    """Every row needs 1..T prompt tokens, each a valid id (an out-of-range id would embed as
    NaN), and prompt + `max_new_tokens` must fit `max_positions` (the model's
    `max_position_embeddings`; None: no limit). Reads the prompts with an explicit `device_get`
    (allowed under `jax.transfer_guard("disallow")`), once, before anything runs. Traced prompts
    (under `jax.jit` / `jax.vmap`) have no values to read: only their shapes and dtypes are
    checked, and the caller answers for the values."""
    check_prompt_shapes(tokens, prompt_lengths)
    if is_traced(tokens, prompt_lengths):
        return
    tokens, lengths = (_on_host(x) for x in (tokens, prompt_lengths))
    width = tokens.shape[1]
    if lengths.min() < 1 or lengths.max() > width:
        raise ValueError(f"prompt_lengths must lie in [1, {width}] (the padded prompt width), got {lengths.tolist()}")
    used = np.arange(width)[None] < lengths[:, None]
    bad = tokens[used][(tokens[used] < 0) | (tokens[used] >= vocab_size)]
    if bad.size:
        raise ValueError(f"prompt token ids {sorted(set(bad.tolist()))[:8]} are outside the vocabulary "
                         f"[0, {vocab_size})")
    check_positions(max_positions, int(lengths.max()), max_new_tokens)


def check_static_args(name: str, max_new_tokens, sampling, key, pad_id, matmul_precision) -> None:
    """The arguments that shape the compiled program must be concrete Python values (static under
    `jax.jit`): max_new_tokens an int >= 1, pad_id an int, sampling a `Sampling` (with a key when it
    samples), a known precision policy."""
    check_precision(matmul_precision)
    if max_new_tokens is None:
        raise TypeError(f"{name}() needs max_new_tokens (the tokens to generate per row)")
    for what, value in (("max_new_tokens", max_new_tokens), ("pad_id", pad_id)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}(): {what} must be a Python int (it shapes the compiled program: under jax.jit "
                            f"close over it or name it in static_argnames), got {type(value).__name__} {value!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    check_sampling(sampling, key)


def check_generate_args(name: str, cfg, tokens, prompt_lengths, max_new_tokens, eos_ids, sampling, key, pad_id: int,
                        matmul_precision):
    """The host-side checks `generate` and `generate_ar` share, before compiling: (tokens [B, T],
    prompt_lengths [B], eos_ids tuple or None) in their canonical forms (`specjax.inputs`). On
    traced prompts (under `jax.jit` / `jax.vmap`) the prompt values go unchecked (`validate_prompts`)."""
    check_static_args(name, max_new_tokens, sampling, key, pad_id, matmul_precision)
    tokens, prompt_lengths = as_prompt_batch(tokens, prompt_lengths, pad_id)
    validate_prompts(tokens, prompt_lengths, cfg.vocab_size, max_new_tokens=max_new_tokens,
                     max_positions=getattr(cfg, "max_position_embeddings", None))
    return tokens, prompt_lengths, as_eos_ids(eos_ids)
