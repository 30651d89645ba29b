"""What every command of the command line shares: the one-line user error, the model-source flags,
``--methods-from`` (methods from outside the package), the checks of sampling flags and method strings
made before a model loads."""

from __future__ import annotations

import argparse

from specjax.data.assets import AssetError
from specjax.drafters.registry import READERS, load_methods, needs_of
from specjax.drafters.spec import Parsed
from specjax.models import CheckpointError, load_config
from specjax.models.model import LAYOUTS
from specjax.pipeline import EARLY_EXIT, MODELS

__all__ = ["LOAD_ERRORS", "UsageError", "check_draft_flag", "check_method", "check_sampling", "load_methods_from",
           "methods_from_flag",
           "methods_from_sources", "model_name", "reader_dirs", "source_flags"]

LOAD_ERRORS = (CheckpointError, AssetError, OSError, ValueError, KeyError)


class UsageError(Exception):
    """A user error: the command prints ``<prog> <command>: error: <message>`` and returns 2."""


def model_name(args) -> str:
    """The target of --checkpoint / --model, "zoo" by default."""
    return args.checkpoint or args.model or "zoo"


def reader_dirs(args) -> dict:
    """{reader kind: --<kind> DIR or None}."""
    return {kind: getattr(args, kind, None) for kind in READERS}


def methods_from_flag(p: argparse.ArgumentParser) -> None:
    """--methods-from MODULE_OR_PATH (repeatable, or comma-separated): methods from outside the package."""
    p.add_argument("--methods-from", action="append", metavar="MODULE_OR_PATH",
                   help="import this module or .py file first and register the methods it declares (METHODS) or "
                        "registers (specjax.register), so that they run by name (repeatable, or comma-separated)")


def methods_from_sources(values) -> list[str]:
    """The sources of --methods-from values (each may be comma-separated), in order, without repeats."""
    return list(dict.fromkeys(s.strip() for v in values or () for s in v.split(",") if s.strip()))


def load_methods_from(args) -> None:
    """Import and register every --methods-from source (`specjax.drafters.registry.load_methods`; a second
    call is a no-op) before any method name is read; UsageError naming the source and what went wrong."""
    for source in methods_from_sources(getattr(args, "methods_from", None)):
        try:
            load_methods(source)
        except (ImportError, OSError, SyntaxError, TypeError, ValueError) as e:
            raise UsageError(f"--methods-from {source}: {type(e).__name__}: {e}") from None


def check_sampling(args) -> None:
    """--max-new-tokens, --temperature, --top-k, --top-p and --draft, before anything loads."""
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.temperature >= 0 or args.temperature == float("inf"):  # NaN fails the first test
        raise UsageError(f"--temperature must be a finite number >= 0 (0 = greedy), got {args.temperature}")
    if getattr(args, "top_k", None) is not None and args.top_k < 1:
        raise UsageError(f"--top-k must be >= 1, got {args.top_k}")
    if getattr(args, "top_p", None) is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must lie in (0, 1], got {args.top_p}")
    if (getattr(args, "top_k", None) is not None or getattr(args, "top_p", None) is not None) and args.temperature == 0:
        raise UsageError("--top-k / --top-p shape sampled output only: add --temperature > 0")
    check_draft_flag(args)


def check_draft_flag(args) -> None:
    """--draft DIR belongs to --checkpoint's target (or is the target's own first layers)."""
    if args.draft and not args.checkpoint and not args.draft.startswith(EARLY_EXIT):
        raise UsageError(f"--draft needs --checkpoint (the draft LM of that target), or is {EARLY_EXIT}K (the target's "
                         f"own first K layers, for any target)")


def check_method(spec: str, available, parsed: Parsed | None = None) -> tuple[str, ...]:
    """What method `spec` needs, after checking it reads (`parsed`: as already read) and that the model has it."""
    try:
        needs = needs_of(spec) if parsed is None else parsed.spec.required(parsed.values)
    except ValueError as e:
        raise UsageError(str(e)) from None
    flags = {"draft": "a draft LM (--draft DIR with --checkpoint)",
             **{k: f"{r.what} (--{k} DIR)" for k, r in READERS.items()}}
    missing = [flags[k] for k in needs if k != "target" and k not in available]
    if missing:
        raise UsageError(f"method {spec!r} needs {' and '.join(missing)}; this model has none. Pass it, or pick a "
                         f"method it can run (`specjax methods`)")
    return needs


def check_unused_drafters(spec_needs: tuple[str, ...], args, specs: str = "the method") -> None:
    """A drafter directory (--dflash / --eagle3 / --domino / --draft) that no chosen method reads is an error:
    it would be ignored without a word."""
    given = [k for k, v in {"draft": getattr(args, "draft", None), **reader_dirs(args)}.items() if v]
    unused = [k for k in given if k not in spec_needs]
    if unused:
        raise UsageError(f"{', '.join('--' + k for k in unused)} given but {specs} does not draft with it: "
                         f"drop the flag or pick a method that reads it (`specjax methods`)")


def check_drafter_kinds(args) -> None:
    """A drafter directory of the wrong kind (--dflash holding an EAGLE-3 checkpoint, --draft a DFlash one) is an
    error naming the flag, the kind its config.json holds and the kind the flag takes, before any weight loads
    (the loader's own error names neither flag nor kind). A config.json that does not parse is left to the
    loader, whose error names the file."""
    words = {"draft": "draft LM", **{k: f"{r.label} drafter" for k, r in READERS.items()}}
    an = lambda w: ("an " if w[:1].upper() in "AEIOU" else "a ") + w  # noqa: E731
    for flag, directory in {"draft": getattr(args, "draft", None), **reader_dirs(args)}.items():
        if not directory:
            continue
        try:
            cfg = load_config(directory)
        except LOAD_ERRORS:
            continue
        found = cfg.model_type if cfg.model_type in READERS else "draft"
        if found != flag:
            holds = an(f"{cfg.model_type} language model" if found == "draft" else words[found])
            fix = f"pass it as --{found}" if found != "draft" else f"give {an(words[flag])} directory"
            raise UsageError(f"--{flag} {directory} holds {holds}, not the {words[flag]} --{flag} takes: {fix}")


def source_flags(p: argparse.ArgumentParser, group) -> None:
    """--checkpoint / --model (in `group`), --draft and one --<kind> DIR per reader kind of the registry."""
    group.add_argument("--checkpoint", help="HF-layout target directory: config.json, model.safetensors, "
                       "tokenizer.json (default: the embedded zoo pair)")
    group.add_argument("--model", metavar="NAME",
                       help="a named model (`specjax.pipeline.MODELS`: " + ", ".join(m for m in MODELS if m != "zoo")
                       + ", or one a --methods-from module registers with specjax.pipeline.register_model); its "
                       "zoo drafters and its measured serving method and layout")
    p.add_argument("--draft", help="HF-layout draft LM directory (with --checkpoint; default: the zoo's draft LM "
                   f"for the zoo pair, none otherwise), or {EARLY_EXIT}K: the target's first K layers with its own "
                   "norm and head, for any target")
    for kind, reader in READERS.items():
        p.add_argument(f"--{kind}", metavar="DIR", help=f"{reader.label} drafter directory (default: the zoo's for "
                       f"this model, where one exists)")
    p.add_argument("--layout", choices=LAYOUTS, default=None,
                   help="the target's layer params: stacked (scanned, one compiled layer), unstacked (one copy "
                        "per layer: no per-step weight slices, a longer first compile) or dual (both, twice the "
                        "weight memory: AR steps unstacked, verify forwards stacked) (default: the model's measured "
                        "serving layout on this backend, specjax.pipeline.default_layout: unstacked on a GPU)")
