"""One entry per named model (`specjax.pipeline.NamedModel`, `register_model`): a third model declared in a
module of its own is taken by name everywhere a name is taken -- `Pipeline.load` / `generate`, `specjax
generate` and `specjax bench` (`--model`), the data engine's target, the recipe's plan and the showcase -- and
no site names a model of the package by hand.

Reference: the same model's greedy AR output (prompt lookup is lossless), and its config as saved.
"""

import importlib
import shutil
import sys

import jax
import jax.numpy as jnp
import pytest

from specjax import zoo
from specjax.models import load_config, save_checkpoint
from specjax.models.llama import LlamaConfig
from specjax.models.model import init_params
from specjax.pipeline import MODELS, NamedModel, Pipeline, Serving, model_config, register_model, unregister_model

THIRD = "tiny-third"
MODULE = '''
"""A model specjax does not ship, declared where it lives: a directory and the catalogue entry that names it."""
from pathlib import Path

from tokenizers import Tokenizer

from specjax.models import load_checkpoint, load_config
from specjax.pipeline import NamedModel, Serving, register_model

DIRECTORY = Path({directory!r})
register_model(NamedModel(
    "tiny-third", lambda dtype: (*load_checkpoint(DIRECTORY, dtype), Tokenizer.from_file(str(DIRECTORY / "tokenizer.json"))),
    zoo_prefix="tiny-third", display="tiny third (2 x 32 Llama)", default_prompt=lambda: "The river flows through the",
    serving={{"cpu": Serving("pld:ngram=2,num=4", "unstacked", measured="a test's model: nothing measured")}},
    config=lambda: load_config(DIRECTORY), hf_directory=lambda: DIRECTORY))
'''


@pytest.fixture(scope="module")
def third(tmp_path_factory):
    """A 2-layer Llama over the zoo's 8,192-token tokenizer, saved as an HF checkpoint, registered by importing
    a module of its own; unregistered afterwards."""
    root = tmp_path_factory.mktemp("third")
    directory = root / "model"
    cfg = LlamaConfig(vocab_size=8192, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                      intermediate_size=64, tie_word_embeddings=True, eos_token_ids=(0,))
    save_checkpoint(directory, cfg, init_params(cfg, jax.random.key(3), jnp.float32))
    shutil.copy(zoo.path("tiny-neox-target") / "tokenizer.json", directory / "tokenizer.json")
    (root / "third_model.py").write_text(MODULE.format(directory=str(directory)))
    sys.path.insert(0, str(root))
    try:
        importlib.import_module("third_model")
        yield cfg, directory
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("third_model", None)
        unregister_model(THIRD)


def test_registering_checks_the_entry(third):
    entry = MODELS["zoo"]
    with pytest.raises(ValueError, match="one of specjax's own: choose another name"):
        register_model(entry)
    with pytest.raises(ValueError, match="registered already: pass replace=True"):
        register_model(MODELS[THIRD])
    with pytest.raises(TypeError, match="takes a NamedModel"):
        register_model("zoo")
    with pytest.raises(ValueError, match="serving needs a 'cpu' entry"):
        register_model(NamedModel("x-model", entry.load, "x", "x", serving={"gpu": Serving("ar")}))


def test_pipeline_and_the_plan_take_the_third_name(third):
    cfg, directory = third
    pipe = Pipeline.load(THIRD)  # its serving entry: method and layout
    assert pipe.method.name == "pld:ngram=2,num=4"
    ar = Pipeline.load(THIRD, method="ar").generate("The river flows through the river", max_new_tokens=12)[0]
    out = pipe.generate("The river flows through the river", max_new_tokens=12)[0]
    assert out.text == ar.text and out.token_ids == ar.token_ids and out.rounds < ar.rounds  # it did draft
    assert model_config(THIRD) == load_config(directory) == cfg
    from specjax import recipe

    plan = recipe.plan(recipe.RecipeConfig(target=THIRD, minutes=1.0))
    assert plan  # sized from the entry's config, nothing loaded


def test_the_command_line_and_the_data_engine_take_the_third_name(third, tmp_path, capsys):
    from specjax.cli.main import main
    from specjax.train.data import load_target

    assert main(["generate", "--model", THIRD, "--max-new-tokens", "6", "--prompt", "The river"]) == 0
    assert "pld:ngram=2,num=4" in capsys.readouterr().out
    assert main(["bench", "--model", THIRD, "--methods", "ar,pld", "--prompt", "The river flows",
                 "--prompt", "A cat sat on the", "--prompts", "2", "--warmup", "1", "--max-new-tokens", "6",
                 "--no-progress", "--no-ttft"]) == 0
    cfg, params, enc, reserved = load_target(THIRD)
    assert cfg == third[0] and enc.chat is False and reserved == (0,)


def test_the_showcase_runs_the_third_model_with_its_serving(third, monkeypatch):
    from specjax.cli import showcase

    calls = []
    monkeypatch.setattr(showcase, "run_specjax", lambda argv: calls.append(argv) or 0)
    assert showcase.main(["--model", THIRD, "--max-new-tokens", "4"]) == 0
    argv = calls[0]
    assert argv[argv.index("--model") + 1] == THIRD and argv[argv.index("--method") + 1] == "pld:ngram=2,num=4"
    assert argv[argv.index("--layout") + 1] == "unstacked"


DECLARING = '''
"""The same model declared, not registered: what `--methods-from` reads (`NAMED_MODELS`)."""
from pathlib import Path

from tokenizers import Tokenizer

from specjax.models import load_checkpoint
from specjax.pipeline import NamedModel, Serving

DIRECTORY = Path({directory!r})
NAMED_MODELS = (NamedModel(
    "tiny-fourth", lambda dtype: (*load_checkpoint(DIRECTORY, dtype), Tokenizer.from_file(str(DIRECTORY / "tokenizer.json"))),
    zoo_prefix="tiny-fourth", display="tiny fourth", serving={{"cpu": Serving("pld:ngram=2,num=4", measured="none")}}),)
'''


def test_a_module_read_with_methods_from_declares_a_model_for_the_command_line(third, tmp_path):
    """A fresh process: `--methods-from FILE.py` imports a module whose NAMED_MODELS the catalogue then holds, so
    `--model` takes its name (it is checked after the module is read, with a did-you-mean otherwise)."""
    import subprocess

    module = tmp_path / "fourth_model.py"
    module.write_text(DECLARING.format(directory=str(third[1])))
    run = subprocess.run([sys.executable, "-m", "specjax", "generate", "--methods-from", str(module), "--model",
                          "tiny-fourth", "--max-new-tokens", "4", "--prompt", "The river"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "pld:ngram=2,num=4" in run.stdout
    assert "tiny-fourth" not in MODELS  # this process never read the module
