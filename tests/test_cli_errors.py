"""The CLI refuses politely (issue 37 item 4): every misuse is one line, ``specjax <command>: error:
<what to fix>``, exit status 2, no traceback, and (except for a checkpoint that fails to load)
before any model loads.

`MISUSE` is the table: (the arguments, the text the error must contain). ``{tmp}`` is a scratch
directory holding ``bare/`` (config.json only), ``ckpt/`` (config.json + tokenizer.json, no
weights), ``junk/`` (a config.json that is not JSON) and ``dflash/`` / ``eagle3/`` (a zoo drafter's
config.json only). The CLI runs in process through `specjax.cli.main`, so the module takes seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from specjax import __version__, zoo
from specjax.bench import harness
from specjax.bench import versus_ar as versus_ar_module
from specjax.cli import generate as cli_generate
from specjax.cli import main
from specjax.cli.common import UsageError, check_drafter_kinds
from specjax.drafters.registry import READERS, forms
from specjax.train.__main__ import parser as train_parser

MISUSE = [
    (["generate", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["generate", "--temperature", "-1"], "--temperature must be a finite number >= 0 (0 = greedy), got -1.0"),
    (["generate", "--temperature", "nan"], "--temperature must be a finite number >= 0 (0 = greedy), got nan"),
    (["generate", "--method", "chain4", "--dflash", "{tmp}/ckpt", "--prompt", "The"],
     "--dflash given but method 'chain4' does not draft with it"),
    (["generate", "--method", "ddtree-8", "--dflash", "{tmp}/eagle3", "--prompt", "The"],
     "--dflash {tmp}/eagle3 holds an EAGLE-3 drafter, not the DFlash drafter --dflash takes: pass it as --eagle3"),
    (["generate", "--method", "eagle3", "--eagle3", "{tmp}/ckpt", "--prompt", "The"],
     "--eagle3 {tmp}/ckpt holds a gpt_neox language model, not the EAGLE-3 drafter --eagle3 takes"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--draft", "{tmp}/dflash", "--method", "chain4"],
     "--draft {tmp}/dflash holds a DFlash drafter, not the draft LM --draft takes: pass it as --dflash"),
    (["generate", "--method", "ar", "--check-trees"], "--check-trees checks the trees a speculative method proposes"),
    (["generate", "--checkpoint", "smollm2"], "unknown model 'smollm2'"),
    (["generate", "--prompt", ""], "--prompt is empty: give the text to continue"),
    (["generate", "--prompt", "   "], "--prompt is empty"),
    (["generate", "--temperature", "1", "--top-k", "0"], "--top-k must be >= 1, got 0"),
    (["generate", "--temperature", "1", "--top-p", "1.5"], "--top-p must lie in (0, 1], got 1.5"),
    (["generate", "--top-k", "5"], "--top-k / --top-p shape sampled output only: add --temperature > 0"),
    (["generate", "--stop", ""], "--stop needs a non-empty string"),
    (["generate", "--method", "beam4"], "unknown method 'beam4'; use one of: ar, chain<K>"),
    (["generate", "--method", "ddtree"], "unknown method 'ddtree'"),
    (["generate", "--method", "ddtree-8:depth=3"], "unknown DDTree field 'depth'; the fields are block=<int>"),
    (["generate", "--method", "dflash:block=x"], "DFlash field 'block' needs an integer, got 'x'"),
    (["generate", "--method", "chain4:k=2"], "chain<K> takes no overrides"),
    (["generate", "--draft", "{tmp}/ckpt"], "--draft needs --checkpoint"),
    (["generate", "--checkpoint", "{tmp}/nowhere"], "--checkpoint {tmp}/nowhere: no such directory"),
    (["generate", "--checkpoint", "{tmp}/bare"], "--checkpoint {tmp}/bare has no tokenizer.json"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--method", "ddtree-8"],
     "method 'ddtree-8' needs a DFlash drafter trained for this target (--dflash DIR); this model has none"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--method", "chain4"], "method 'chain4' needs a draft LM"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--draft", "{tmp}/nowhere", "--method", "chain4"],
     "--draft {tmp}/nowhere: no such directory"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--dflash", "{tmp}/dflash", "--method", "ddtree-8"],
     "cannot run 'ddtree-8' on {tmp}/ckpt: no model.safetensors"),  # a bad checkpoint: after loading began
    (["generate", "--checkpoint", "{tmp}/ckpt", "--method", "ar"],
     "cannot run 'ar' on {tmp}/ckpt: no model.safetensors"),
    (["generate", "--checkpoint", "{tmp}/junk", "--method", "ar"], "config.json is not valid JSON"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--method", "domino"],
     "method 'domino' needs a Domino drafter trained for this target (--domino DIR)"),
    (["generate", "--checkpoint", "{tmp}/ckpt", "--method", "eagle2"], "method 'eagle2' needs a draft LM"),
    (["generate", "--dflash", "{tmp}/nowhere"], "--dflash {tmp}/nowhere: no such directory"),
    (["generate", "--max-new-tokens", "abc"], "argument --max-new-tokens: invalid int value: 'abc'"),
    (["generate", "--model", "gpt5"], "unknown model 'gpt5': give one of zoo, smollm2-135m or a checkpoint directory"),
    (["bench", "--model", "smollm2-135"], "did you mean 'smollm2-135m'"),
    (["generate", "--bogus"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: COMMAND"),
    (["bench", "--prompt", "The", "--prompts", "2", "--warmup", "2"], "0 <= --warmup < --prompts, got 2, 2"),
    (["bench", "--random", "--methods", "ar,beam4"], "unknown method 'beam4'"),
    (["bench", "--random", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["bench", "--random", "--prompt-len", "0"], "--prompt-len must be >= 1, got 0"),
    (["bench", "--random", "--prompts", "6", "--warmup", "2", "--batch", "4"], "multiple of the batch"),
    (["bench", "--prompt", ""], "--prompt is empty"),
    (["bench", "--random", "--methods", "ar,prune=0"], "override 'prune=0' in 'ar,prune=0' follows no method"),
    (["bench", "--random", "--dataset", "gsm8k,nope"], "--dataset 'gsm8k,nope': unknown nope; choose from wiki"),
    (["bench", "--dataset", "gsm8k,gsm8k"], "--dataset 'gsm8k,gsm8k': gsm8k twice"),
    (["bench", "--dataset", "gsm8k,mbpp", "--prompt", "The"], "--prompt replaces --dataset"),
    (["bench", "--checkpoint", "{tmp}/ckpt", "--methods", "ar,ddtree-8"], "method 'ddtree-8' needs a DFlash drafter"),
    (["bench", "--checkpoint", "{tmp}/ckpt", "--methods", "ar,chain4"], "method 'chain4' needs a draft LM"),
    (["bench", "--checkpoint", "{tmp}/bare"], "has no tokenizer.json"),
    (["bench", "--methods", "ar,chain4", "--dflash", "{tmp}/dflash"],
     "--dflash given but --methods 'ar,chain4' does not draft with it"),
    (["bench", "--random", "--eagle3", "{tmp}/eagle3"], "--eagle3 given but --random"),
    (["bench", "--methods", "ar,ddtree-8", "--dflash", "{tmp}/eagle3"],
     "--dflash {tmp}/eagle3 holds an EAGLE-3 drafter, not the DFlash drafter --dflash takes"),
    (["bench", "--random", "--methods", "ar", "--check-trees"], "--check-trees checks the trees speculative methods"),
    (["bench-device", "--shapes", "nope"], "unknown shape 'nope'"),
    (["bench-device", "--verify-widths", "1,x"], "--verify-widths takes comma-separated whole numbers, got 1,x"),
    (["bench-device", "--verify-widths", "0,64"], "verify_widths must be positive token counts"),
    (["launch", "--processes", "0", "--", "python", "-c", "pass"], "--processes must be an integer >= 1, got 0"),
    (["launch", "--processes", "2"], "no command: put it after --"),
    (["launch", "--processes", "2", "--cpu-devices", "0", "--", "true"], "--cpu-devices must be an integer >= 1"),
    (["launch", "--processes", "2", "--port", "0", "--", "true"], "--port must be a TCP port in [1, 65535], got 0"),
]


# A numeric flag too large for the model (its positions, a 64-bit seed): one line naming the flag, exit 2, checked
# before anything compiles (the loop's own check names no flag; a seed past 64 bits was an OverflowError traceback).
OVERFLOW = [
    (["generate", "--max-new-tokens", "100000", "--method", "ar", "--prompt", "The"],
     "--max-new-tokens 100000: the prompt's 2 tokens + 100000 new = 100002 positions exceed zoo's 2048 "
     "(max_position_embeddings): give --max-new-tokens <= 2046"),
    (["generate", "--max-new-tokens", "2047", "--method", "chain4", "--prompt", "The"], "--max-new-tokens 2047:"),
    (["generate", "--seed", str(2**64), "--temperature", "1", "--method", "ar", "--prompt", "The"],
     f"--seed must fit 64 bits (-2**63 <= seed < 2**63), got {2**64}"),
    (["bench", "--random", "--max-new-tokens", "100000"],
     "--max-new-tokens 100000: prompts 64 tokens wide (random tokens) + 100000 new = 100064 positions exceed "
     "random-neox-6x256's 2048 (max_position_embeddings): give --max-new-tokens <= 1984 or a smaller --prompt-len"),
    (["bench", "--random", "--prompt-len", "3000"], "--prompt-len 3000: prompts 3000 tokens wide (random tokens) "
     "leave no room for a new token in random-neox-6x256's 2048 positions"),
    (["bench", "--prompt", "The", "--prompts", "1", "--warmup", "0", "--max-new-tokens", "2047"],
     "--max-new-tokens 2047: prompts 2 tokens wide (--prompt) + 2047 new = 2049 positions exceed tiny-neox-target's "
     "2048 (max_position_embeddings): give --max-new-tokens <= 2046"),
    (["bench", "--prompt", "The", "--prompts", "3"], "--prompts 3: --prompt has 1 prompt; ask for at most 1"),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    source = zoo.path("tiny-neox-target")
    for name, files in (("bare", ("config.json",)), ("ckpt", ("config.json", "tokenizer.json"))):
        (root / name).mkdir()
        for f in files:
            shutil.copy(source / f, root / name / f)
    for kind in ("dflash", "eagle3"):  # a drafter's config.json without its weights: its kind is all it tells
        (root / kind).mkdir()
        shutil.copy(zoo.path(f"tiny-neox-{kind}") / "config.json", root / kind / "config.json")
    (root / "junk").mkdir()
    (root / "junk" / "config.json").write_text("{not json")
    shutil.copy(source / "tokenizer.json", root / "junk" / "tokenizer.json")
    return root


@pytest.mark.parametrize("argv, says", MISUSE, ids=[" ".join(a) or "(nothing)" for a, _ in MISUSE])
def test_misuse_is_one_polite_line_and_exit_2(argv, says, tmp, capsys):
    argv = [a.format(tmp=tmp) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"specjax {argv[0]}: error: " if argv else "specjax: error: "), last
    assert says.format(tmp=tmp) in last, f"{says.format(tmp=tmp)!r} not in {last!r}"


@pytest.mark.parametrize("argv, says", OVERFLOW, ids=[" ".join(a) for a, _ in OVERFLOW])
def test_too_large_numbers_are_one_line_naming_the_flag_and_exit_2(argv, says, capsys):
    assert main(argv + (["--no-progress"] if argv[0] == "bench" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"specjax {argv[0]}: error: ") and says in err, f"{says!r} not in {err!r}"


def test_every_zoo_drafter_passes_the_kind_check_of_its_own_flag():
    """The kind check reads a directory's kind from its config's model_type: a reader kind whose drafters report
    another model_type would refuse every right directory."""
    def flags(**given):
        return argparse.Namespace(**{"draft": None, **dict.fromkeys(READERS), **given})

    for kind in READERS:
        check_drafter_kinds(flags(**{kind: str(zoo.path(f"tiny-neox-{kind}"))}))
    check_drafter_kinds(flags(draft=str(zoo.path("tiny-neox-draft"))))
    with pytest.raises(UsageError, match="holds a gpt_neox language model, not the DFlash drafter"):
        check_drafter_kinds(flags(dflash=str(zoo.path("tiny-neox-draft"))))


class _Reached(Exception):
    """Raised by a stand-in loop once it has recorded its arguments."""


def test_check_trees_reaches_the_loop_of_generate_and_bench(monkeypatch, capsys):
    """generate runs the checked loop for real; bench's first speculative call records its check_trees and stops
    there (the harness path, no second compile)."""
    seen: list = []

    def checked(*args, **kw):
        seen.append(kw.get("check_trees"))
        return real(*args, **kw)

    real = versus_ar_module.generate
    monkeypatch.setattr(versus_ar_module, "generate", checked)
    monkeypatch.setattr(cli_generate, "TIMED_RUNS", 1)
    assert main(["generate", "--method", "chain2", "--prompt", "The", "--max-new-tokens", "4", "--json",
                 "--check-trees"]) == 0
    assert json.loads(capsys.readouterr().out)["speculative"]["vs_ar"] == "identical"
    assert seen and all(seen), seen  # the compiling call and the timed one

    def reached(*args, **kw):
        seen.append(kw.get("check_trees"))
        raise _Reached

    seen.clear()
    monkeypatch.setattr(harness, "generate", reached)
    with pytest.raises(_Reached):
        main(["bench", "--methods", "chain2,ar", "--prompt", "The", "--warmup", "0", "--max-new-tokens", "4",
              "--no-ttft", "--no-progress", "--check-trees"])
    assert seen == [True], seen


# `python -m specjax.train`: (argv, the text its one error line must contain); {tmp}: the scratch directory,
# {data}: a real data directory (the committed SmolLM2 one: values are refused before anything loads).
TRAIN_MISUSE = [
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--lr", "-1"], "--lr must be > 0, got -1.0"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--lr", "nan"], "argument --lr: not a finite number"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--batch-size", "0"], "--batch-size must be > 0, got 0"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--steps", "-5"], "--steps must be > 0"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--seq-len", "0"], "--seq-len must be an integer >= 1"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--warmup-frac", "2"], "--warmup-frac must be <= 1"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--batch-size", "x"], "argument --batch-size: not an integer"),
    (["dflash", "--data", "{tmp}/nowhere", "--out", "{tmp}/run"], "--data {tmp}/nowhere: no such directory"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--mesh", "rows=2"], "--mesh names ['rows']"),
    (["dflash", "--data", "{data}", "--out", "{tmp}/run", "--mesh", "data=2,model=1", "--batch-size", "3"],
     "--batch-size 3 is not a multiple of the mesh's data axis size 2"),  # was a raw IndivisibleError at step 1
    (["domino", "--data", "{data}", "--out", "{tmp}/run", "--prefix", "both"], "prefix must be one of"),
    (["eagle3", "--data", "{data}"], "specjax.train eagle3: error: the following arguments are required: --out"),
    (["data", "--out", "{tmp}/d", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["data", "--out", "{tmp}/d", "--weights", "web=1"], "--weights name unknown sources ['web']"),
    (["data", "--out", "{tmp}/junkdata", "--write-prompt-order", "{tmp}/o.gz"], "manifest.json is not valid JSON"),
    (["eval", "--target", "x"], "specjax.train eval: error: the following arguments are required: --draft"),
    (["lm", "--model", "target", "--tokenizer", "t.json", "--out", "{tmp}/lm", "--lr", "0"], "--lr must be > 0"),
    (["nope"], "specjax.train COMMAND: error: argument COMMAND: invalid choice: 'nope'"),
]


@pytest.mark.parametrize("argv, says", TRAIN_MISUSE, ids=[" ".join(a) for a, _ in TRAIN_MISUSE])
def test_training_misuse_is_one_line_naming_the_command_and_exit_2(argv, says, tmp, capsys):
    from specjax.train.__main__ import main as train_main

    (tmp / "junkdata").mkdir(exist_ok=True)
    (tmp / "junkdata" / "manifest.json").write_text('{"recipe": {"tar')  # truncated
    data = zoo.ZOO_DIR / "data" / "smollm2-135m-instruct"
    argv = [a.format(tmp=tmp, data=data) for a in argv]
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"specjax.train {argv[0] if argv[0] != 'nope' else 'COMMAND'}: error: "), err
    assert says.format(tmp=tmp) in err, f"{says.format(tmp=tmp)!r} not in {err!r}"


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"specjax {__version__}"
    assert main(["generate", "--help"]) == 0
    text = "".join(capsys.readouterr().out.split())
    assert "".join(forms().split()) in text  # the --method help is the registry's list
    for flag in ("--json", "--top-k", "--top-p", "--stop", "--dflash", "--eagle3", "--domino"):
        assert flag in text


def test_methods_command_prints_the_registry_table(capsys):
    from specjax.drafters.registry import markdown_table

    assert main(["methods"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()


def test_generate_json_with_stop_and_sampling_flags(capsys):
    args = ["generate", "--method", "chain2", "--prompt", "The river flows through the", "--max-new-tokens", "8",
            "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "chain2" and report["speculative"]["vs_ar"] == "identical"
    assert report["ar"]["tokens"] == 8 and report["speculative"]["tau"] >= 1
    text = report["ar"]["text"]
    stop = text.strip().split()[1]
    assert main(args + ["--stop", stop]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert cut["ar"]["text"] == text[: text.index(stop)] and stop not in cut["speculative"]["text"]
    assert main(args + ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9"]) == 0
    sampled = json.loads(capsys.readouterr().out)
    assert sampled["sampling"] == "T=0.8" and sampled["speculative"]["vs_ar"] is None


def _options(ap):
    """(command, option action) for every option of every `python -m specjax.train` subcommand."""
    for action in ap._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                for opt in sub._actions:
                    if opt.option_strings and opt.dest != "help":
                        yield name, opt


def test_train_subcommands_document_every_option():
    """`python -m specjax.train COMMAND --help`: real subcommands, each option with help and its default."""
    ap = train_parser()
    commands = {name for name, _ in _options(ap)}
    assert {"data", "features", "dflash", "eagle3", "domino", "lm", "eval"} <= commands
    undocumented = [f"{name} {opt.option_strings[0]}" for name, opt in _options(ap) if not (opt.help or "").strip()]
    assert not undocumented, f"options without help: {undocumented}"
    no_default = [f"{name} {opt.option_strings[0]}" for name, opt in _options(ap)
                  if not opt.required and opt.nargs != 0 and "default" not in (opt.help or "")]
    assert not no_default, f"options whose help does not state the default: {no_default}"
