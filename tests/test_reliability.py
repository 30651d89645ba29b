"""Nothing lost, nothing silently wrong (issue 51): atomic and complete saves, strictly typed config
files, host-side argument checks before anything compiles, and streaming routed per call.

Each test names the failure it guards; each failed on the code before the fix."""

import dataclasses
import json
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import specjax
from specjax import atomic, pipeline
from specjax.decode import generate_ar
from specjax.inputs import check_callback, check_int, stop_strings
from specjax.models import CheckpointError, init_params, load_checkpoint, load_config, save_checkpoint
from specjax.models import dflash, domino, eagle3, loading
from specjax.models.gguf import GGUFError, config_from_gguf, load_gguf
from specjax.models.llama import LlamaConfig
from specjax.models.loading import read_safetensors, write_safetensors
from specjax.sampling import Sampling
from specjax.train import data as train_data

CFG = LlamaConfig(vocab_size=41, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=2, head_dim=8,
                  intermediate_size=32)


def params_of(seed: int) -> dict:
    return jax.device_get(init_params(CFG, jax.random.key(seed), jnp.float32))


def same_params(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def snapshot(directory) -> dict[str, bytes]:
    """Every file of a directory, by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def shard(directory) -> None:
    """Rewrite the directory's model.safetensors as two shards + a shard index (what transformers writes
    for a large model)."""
    tensors = read_safetensors(directory / "model.safetensors")
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in halves.items():
        write_safetensors(directory / file, {k: tensors[k] for k in keys})
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}))
    (directory / "model.safetensors").unlink()


# ------------------------------------------------------------------------------- 1. atomic, complete saves


def test_saving_over_a_sharded_checkpoint_returns_the_new_weights(tmp_path):
    """Guards: the old shard index stayed beside the new model.safetensors and won on load, so loading
    returned the OLD weights, silently. The stale index and its shards must go."""
    save_checkpoint(tmp_path, CFG, params_of(0))
    shard(tmp_path)
    assert same_params(load_checkpoint(tmp_path)[1], params_of(0))
    save_checkpoint(tmp_path, CFG, params_of(1))
    assert same_params(load_checkpoint(tmp_path)[1], params_of(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.complex64, np.bool_])
def test_a_dtype_the_loader_cannot_read_is_refused_before_anything_is_written(tmp_path, dtype):
    """Guards: save_checkpoint(dtype=int8) succeeded and left a checkpoint that does not load (and
    replaced the previous one)."""
    save_checkpoint(tmp_path, CFG, params_of(0))
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=f"dtype is {np.dtype(dtype).name}, which load_checkpoint cannot read"):
        save_checkpoint(tmp_path, CFG, params_of(1), dtype=dtype)
    assert snapshot(tmp_path) == before
    with pytest.raises(ValueError, match=r"tensor '[a-z_.0-9]+' is int32"):
        save_checkpoint(tmp_path / "new", CFG, jax.tree.map(lambda x: np.asarray(x).astype(np.int32), params_of(1)))
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").iterdir())


@pytest.mark.parametrize("field, value", [("num_layers", 3), ("num_layers", 1), ("vocab_size", 43),
                                          ("intermediate_size", 24)])
def test_params_of_another_config_are_refused_before_anything_is_written(tmp_path, field, value):
    """Guards: saving one config's params under another config raised a raw `IndexError: index 2 is out of
    bounds for axis 0 with size 2` (more layers), or, with another vocabulary or width, wrote a checkpoint
    whose config.json contradicts its tensors (it did not load again). Now a CheckpointError names each
    differing tensor with both shapes, and the checkpoint already there is left byte for byte."""
    save_checkpoint(tmp_path, CFG, params_of(0))
    before = snapshot(tmp_path)
    other = dataclasses.replace(CFG, **{field: value})
    with pytest.raises(CheckpointError, match="do not belong to the LlamaConfig given .*nothing was written") as e:
        save_checkpoint(tmp_path, other, params_of(1))
    assert snapshot(tmp_path) == before
    want = jax.eval_shape(lambda: init_params(other, jax.random.key(0)))
    pairs = [(jax.tree_util.keystr(k), list(a.shape), list(np.shape(b)))
             for (k, a), b in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(params_of(1)))]
    differing = [f"{name} is {have}, the config's is {need}" for name, need, have in pairs if need != have]
    assert differing and all(d in str(e.value) for d in differing), str(e.value)
    with pytest.raises(CheckpointError, match=r"params the config has no place for: \["):
        save_checkpoint(tmp_path, CFG, {**params_of(1), "extra_head": np.zeros((3, 16), np.float32)})
    assert snapshot(tmp_path) == before


def test_16_bit_saves_still_load(tmp_path):
    for dtype in (np.float16, ml_dtypes.bfloat16):
        save_checkpoint(tmp_path, CFG, params_of(2), dtype=dtype)
        assert load_checkpoint(tmp_path)[0] == CFG


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("failing", ["model.safetensors", "config.json"])
def test_a_save_interrupted_at_any_file_leaves_the_previous_checkpoint_loadable_and_unchanged(
        tmp_path, monkeypatch, failing, sharded):
    """Guards: config.json was rewritten first and the weights written in place, so a full disk half way
    through left the previous checkpoint unloadable. Each file of the save in turn: the writer writes
    part of the file, then raises (ENOSPC); every byte of the previous checkpoint must survive."""
    save_checkpoint(tmp_path, CFG, params_of(0))
    if sharded:
        shard(tmp_path)
    before = snapshot(tmp_path)
    write_weights, write_all = loading.write_safetensors, atomic._write_all

    def full_disk(path, data):
        path.write_bytes(bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    if failing == "model.safetensors":
        def partial_weights(path, tensors):
            write_weights(path, tensors)
            full_disk(path, path.read_bytes())
        monkeypatch.setattr(loading, "write_safetensors", partial_weights)
    else:
        monkeypatch.setattr(atomic, "_write_all", lambda path, data: (
            full_disk(path, data) if path.name.startswith(".config.json") else write_all(path, data)))
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path, CFG, params_of(1))
    assert snapshot(tmp_path) == before  # no temporary file left behind either
    assert same_params(load_checkpoint(tmp_path)[1], params_of(0))


def test_a_save_that_does_not_read_back_is_refused_before_replacing(tmp_path, monkeypatch):
    """The written weights' header is checked (names, shapes) before the rename: a writer that drops a
    tensor fails the save and keeps the previous checkpoint."""
    save_checkpoint(tmp_path, CFG, params_of(0))
    before = snapshot(tmp_path)
    write_weights = loading.write_safetensors
    monkeypatch.setattr(loading, "write_safetensors",
                        lambda path, tensors: write_weights(path, dict(list(tensors.items())[1:])))
    with pytest.raises(CheckpointError, match="do not hold the tensors saved"):
        save_checkpoint(tmp_path, CFG, params_of(1))
    assert snapshot(tmp_path) == before


def test_data_files_are_written_atomically_without_leftovers(tmp_path, monkeypatch):
    """Guards: the data pipeline's manifest / shard writer used one fixed `<name>.tmp` and left it (a
    partial file) behind when the write failed; the file itself must keep its old bytes."""
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError):
        train_data._atomic_write(target, b"new")
    assert snapshot(tmp_path) == {"manifest.json": b"old"}
    monkeypatch.undo()
    train_data._atomic_write(target, b"new")
    assert snapshot(tmp_path) == {"manifest.json": b"new"}


def test_replace_directory_swaps_a_staged_directory_in(tmp_path):
    """Training checkpoints: the staged copy replaces the old directory whole; a failed second rename
    puts the old one back."""
    target = tmp_path / "ckpt"
    target.mkdir()
    (target / "a").write_text("old")
    staged = atomic.staging_path(target)
    staged.mkdir()
    (staged / "b").write_text("new")
    atomic.replace_directory(staged, target)
    assert snapshot(target) == {"b": b"new"} and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    with pytest.raises(FileNotFoundError, match="staged directory"):
        atomic.replace_directory(tmp_path / "missing", target)
    assert snapshot(target) == {"b": b"new"}


# ------------------------------------------------------------------------------- 2. strict types


DRAFT_TARGET = LlamaConfig(vocab_size=41, hidden_size=16, num_layers=4, num_heads=2, num_kv_heads=2, head_dim=8,
                           intermediate_size=32)
DOMINO = domino.DominoConfig.for_target(DRAFT_TARGET, num_layers=1, target_layer_ids=(0, 2), mask_token_id=40,
                                        gru_hidden=6, head_rank=5)
EAGLE = eagle3.Eagle3Config.for_target(DRAFT_TARGET, target_layer_ids=(0, 1, 2), draft_vocab_size=20)


def load_edited(tmp_path, hf: dict, edit):
    """load_config of config.json = `hf` changed by `edit(hf)` (the dict, nested objects included)."""
    hf = json.loads(json.dumps(hf))
    edit(hf)
    (tmp_path / "config.json").write_text(json.dumps(hf))
    return load_config(tmp_path)


def setter(*path, value):
    def edit(hf):
        for p in path[:-1]:
            hf = hf[p]
        hf[path[-1]] = value
    return edit


@pytest.mark.parametrize("hf, path, value, field", [
    # Guards: "shift_label": "false" loaded as True (the opposite label alignment), silently.
    (DOMINO.to_reference(), ("dflash_config", "shift_label"), "false", "dflash_config.shift_label"),
    (DOMINO.to_hf(), ("shift_label",), "false", "shift_label"),
    (DOMINO.to_hf(), ("norm_last_layer",), "true", "norm_last_layer"),
    (EAGLE.to_hf(), ("own_lm_head",), "yes", "own_lm_head"),
    # Guards: a boolean loaded as a layer count / a size.
    (DOMINO.to_hf(), ("num_hidden_layers",), True, "num_hidden_layers"),
    (DOMINO.to_reference(), ("num_hidden_layers",), True, "num_hidden_layers"),
    (DOMINO.to_reference(), ("dflash_config", "gru_hidden_dim"), True, "dflash_config.gru_hidden_dim"),
    (EAGLE.to_reference(), ("draft_vocab_size",), True, "draft_vocab_size"),
    (CFG.to_hf(), ("num_hidden_layers",), True, "num_hidden_layers"),
    # Guards: numbers as strings, refused with messages that named no field.
    (DOMINO.to_reference(), ("dflash_config", "pure_draft_prefix_len"), "1", "dflash_config.pure_draft_prefix_len"),
    (DOMINO.to_hf(), ("rope_theta",), "10000", "rope_theta"),
    (EAGLE.to_reference(), ("eagle_config", "eagle_aux_hidden_state_layer_ids"), [0, "1", 2],
     "eagle_config.eagle_aux_hidden_state_layer_ids"),
    (DOMINO.to_hf(), ("mask_token_id",), 40.0, "mask_token_id"),
])
def test_a_wrongly_typed_config_field_is_refused_naming_the_file_and_the_field(tmp_path, hf, path, value, field):
    with pytest.raises(ValueError) as e:
        load_edited(tmp_path, hf, setter(*path, value=value))
    assert str(tmp_path / "config.json") in str(e.value) and f"'{field}'" in str(e.value), str(e.value)


def test_well_typed_reference_configs_still_load(tmp_path):
    assert load_edited(tmp_path, DOMINO.to_reference(), setter("dflash_config", "shift_label", value=True)).shift_label
    assert load_edited(tmp_path, DOMINO.to_hf(), lambda hf: None) == DOMINO
    assert load_edited(tmp_path, EAGLE.to_hf(), lambda hf: None) == EAGLE


def test_an_enumeration_outside_its_values_is_refused(tmp_path):
    with pytest.raises(ValueError, match="projector_type"):
        load_edited(tmp_path, DOMINO.to_reference(), setter("dflash_config", "projector_type", value="mlp"))
    with pytest.raises(ValueError, match="hidden_act"):
        load_edited(tmp_path, DOMINO.to_hf(), setter("hidden_act", value="gelu"))


def test_gguf_metadata_of_the_wrong_type_is_refused_naming_the_key():
    meta = {"general.architecture": "llama", "llama.embedding_length": 16, "llama.attention.head_count": 2,
            "llama.block_count": True, "llama.feed_forward_length": 32, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "llama.vocab_size": 41}
    with pytest.raises(ValueError, match="'llama.block_count' must be an integer, got True"):
        config_from_gguf(meta, frozenset())


# ------------------------------------------------------------------------------- 3. host-side checks


def test_corrupt_or_empty_gguf_files_are_refused_naming_the_file(tmp_path):
    """Guards: numpy / gguf-reader errors that named no file."""
    empty, corrupt = tmp_path / "empty.gguf", tmp_path / "corrupt.gguf"
    empty.write_bytes(b"")
    corrupt.write_bytes(b"GGUF" + bytes(range(256)) * 3)
    for path in (empty, corrupt):
        with pytest.raises(GGUFError, match=str(path)):
            load_gguf(path)


@pytest.fixture(scope="module")
def tiny():
    return CFG, init_params(CFG, jax.random.key(0), jnp.float32)


@pytest.mark.parametrize("sampling, match", [
    (Sampling(float("nan")), "temperature must be finite"),  # Guards: an empty completion marked eos, exit 0
    (Sampling(float("inf")), "temperature must be finite"),
    (Sampling(1.0, top_k=2.5), "top_k must be an integer"),
    (Sampling(1.0, top_k=True), "top_k must be an integer"),
])
def test_non_finite_or_non_integer_sampling_settings_are_refused_before_compiling(tiny, sampling, match):
    cfg, params = tiny
    with pytest.raises((TypeError, ValueError), match=match):
        generate_ar(params, cfg, [[1, 2, 3]], max_new_tokens=4, sampling=sampling, key=jax.random.key(0))


@pytest.mark.parametrize("value", ["8", 8.0, True])
def test_max_new_tokens_must_be_an_integer(tiny, value):
    cfg, params = tiny
    with pytest.raises(TypeError, match="max_new_tokens must be a Python int"):
        generate_ar(params, cfg, [[1, 2, 3]], max_new_tokens=value)


def test_stop_strings_one_string_is_one_stop_string():
    """Guards: stop="the world" read as the characters t, h, e, ... (the text cut at the first 't')."""
    assert stop_strings("the world") == ("the world",)
    assert stop_strings(["a", "bc"]) == ("a", "bc")
    for bad in ([""], "", ["ok", 3], [None]):
        with pytest.raises(ValueError, match="every stop string must be a non-empty string"):
            stop_strings(bad)
    with pytest.raises(TypeError, match="stop must be a string or a list of strings"):
        stop_strings(5)


def test_check_int_and_check_callback_name_the_argument():
    assert check_int("n", np.int64(3), 1) == 3
    for bad in ("3", 3.0, True, None):
        with pytest.raises(TypeError, match=r"^n must be an integer"):
            check_int("n", bad)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        check_int("n", 0, 1)
    with pytest.raises(TypeError, match="callback must be callable"):
        check_callback("callback", "print")
    check_callback("callback", None)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(temperature=float("nan")), ValueError, "temperature must be finite"),
    (dict(top_p=float("inf")), ValueError, "top_p"),
    (dict(max_new_tokens="8"), TypeError, "max_new_tokens must be an integer"),
    (dict(stop=[""]), ValueError, "every stop string must be a non-empty string"),
    (dict(stop=[3]), ValueError, "every stop string must be a non-empty string"),
    (dict(callback="print"), TypeError, "callback must be callable"),  # Guards: an XLA INTERNAL error mid-loop
    (dict(key=True), TypeError, "key must be an integer"),
    (dict(stop_at_eos="no"), TypeError, "stop_at_eos must be True or False"),
])
def test_pipeline_generate_refuses_bad_arguments_naming_them_before_compiling(kwargs, error, match, monkeypatch):
    """Pipeline.generate's arguments, checked on the host: nothing reaches the compiled loop."""
    pipe = pipeline.Pipeline.__new__(pipeline.Pipeline)  # no model needed: the checks come first
    monkeypatch.setattr(pipeline, "generate", lambda *a, **k: pytest.fail("reached generate"))
    monkeypatch.setattr(pipeline, "generate_ar", lambda *a, **k: pytest.fail("reached generate_ar"))
    with pytest.raises(error, match=match):
        pipe.generate("Hello", **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dflash="PARAMS"), r"dflash= must be the dflash drafter as a \(cfg, params\) pair.*got a dict"),
    (dict(dflash="CFG"), r"dflash= must be the dflash drafter as a \(cfg, params\) pair.*got a DFlashConfig"),
    (dict(dflash=("PARAMS", "CFG")), r"its first item a config, its second the params; got \(dict, DFlashConfig\)"),
    (dict(draft="CFG"), r"draft= must be the draft LM as a \(cfg, params\) pair.*got a DFlashConfig"),
])
def test_method_names_the_model_argument_that_is_mixed_up(kwargs, match):
    """Guards: specjax.method("ddtree-8", cfg, dflash=params) / draft=cfg raised messages naming nothing."""
    dcfg = dflash.DFlashConfig.for_target(CFG, target_layer_ids=(0,), mask_token_id=40)
    objects = {"PARAMS": {"layers": {}}, "CFG": dcfg}
    resolve = lambda v: tuple(objects[x] for x in v) if isinstance(v, tuple) else objects[v]  # noqa: E731
    with pytest.raises(TypeError, match=match):
        specjax.method("ddtree-8", CFG, **{k: resolve(v) for k, v in kwargs.items()})
    with pytest.raises(TypeError, match="target_cfg must be the target's config"):
        specjax.method("ddtree-8", objects["PARAMS"], dflash=(dcfg, objects["PARAMS"]))


# ------------------------------------------------------------------------------- 4. streaming per call


def test_two_threads_streaming_at_once_each_receive_only_their_own_rounds(tiny):
    """Guards: one process-wide listener list: a generation started while another streamed took over its
    rounds (the other's callback got them). Thread A's callback holds its first round until B has
    streamed one, so both calls are listening at once; then every round must reach its own callback."""
    cfg, params = tiny
    prompts = {"A": [[1, 2, 3, 4]], "B": [[9, 8, 7, 6, 5, 4, 3, 2]]}
    generate_ar(params, cfg, prompts["A"], max_new_tokens=24, eos_ids=(), on_round=lambda new: None)  # compile
    got = {"A": [], "B": []}
    b_streams = threading.Event()
    outputs, errors = {}, []

    def on_round(name):
        def receive(new):
            got[name].append(np.asarray(new[0]).tolist())
            if name == "B":
                b_streams.set()
            elif len(got["A"]) == 1:
                b_streams.wait(timeout=20)
        return receive

    def run(name):
        try:
            outputs[name] = generate_ar(params, cfg, prompts[name], max_new_tokens=24, eos_ids=(),
                                        on_round=on_round(name))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = {name: threading.Thread(target=run, args=(name,)) for name in prompts}
    threads["A"].start()
    while not got["A"]:
        threading.Event().wait(0.01)
    threads["B"].start()
    for t in threads.values():
        t.join(timeout=120)
    assert not errors, errors
    for name in prompts:
        streamed = [t for chunk in got[name] for t in chunk]
        assert streamed == np.asarray(outputs[name].tokens[0]).tolist(), name
        assert len(got[name]) == 24, (name, len(got[name]))
