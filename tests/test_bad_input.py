"""Every bad input gets a named error that says what to fix, raised before compiling (issue 38,
items 5 and 6), or is accepted in its obvious meaning.

`BAD` is the table: (id, a callable that provokes the error, the exception type, the substrings
its message must contain: the file and the tensor for checkpoints, the numbers for lengths, the
class to use for configs). `ACCEPTED` pairs an input in a convenient form with the canonical call
it means; the results must be equal. Tiny random models, so the module runs in seconds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.domino import DominoDrafter
from specjax.drafters.eagle3 import eagle3_drafter
from specjax.models import (CheckpointError, GPTNeoXConfig, init_cache, init_params, load_checkpoint, pad_prompts,
                            prefill, save_checkpoint)
from specjax.models.dflash import DFlashConfig
from specjax.models.domino import DominoConfig
from specjax.models.eagle3 import Eagle3Config
from specjax.sampling import Sampling

TARGET = GPTNeoXConfig(vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, rotary_dim=4,
                       max_position_embeddings=24)
DRAFT = GPTNeoXConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, rotary_dim=8)
FIT = dict(num_layers=1, target_layer_ids=(1,), block_size=3, mask_token_id=31)
DFLASH = DFlashConfig.for_target(TARGET, **FIT)
DOMINO = DominoConfig.for_target(TARGET, **FIT, gru_hidden=8, head_rank=4)
EAGLE3 = Eagle3Config.for_target(TARGET, target_layer_ids=(0, 1))
PROMPTS = [[1, 2, 3], [4, 5]]
NEW = 4


@dataclasses.dataclass
class Ctx:
    """What a case works on: random params, and a fresh checkpoint directory of TARGET (float32)."""

    params: dict
    draft_params: dict
    domino_params: dict
    ckpt: Path

    @property
    def weights(self) -> Path:
        return self.ckpt / "model.safetensors"


@pytest.fixture(scope="module")
def models():
    return tuple(init_params(cfg, jax.random.key(i)) for i, cfg in enumerate((TARGET, DRAFT, DOMINO)))


@pytest.fixture
def ctx(models, tmp_path):
    save_checkpoint(tmp_path / "ckpt", TARGET, models[0])
    return Ctx(*models, ckpt=tmp_path / "ckpt")


# ------------------------------------------------------------------ corrupting a safetensors file


def split_file(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_file(path: Path, header: dict | bytes, data: bytes) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def last_tensor(path: Path) -> str:
    header, _ = split_file(path)
    return max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])


def edit_header(path: Path, name: str, **changes) -> None:
    header, data = split_file(path)
    header[name].update(changes)
    write_file(path, header, data)


def truncate(c: Ctx):
    c.weights.write_bytes(c.weights.read_bytes()[:-10])
    return load_checkpoint(c.ckpt)


def bad_json_header(c: Ctx):
    _, data = split_file(c.weights)
    write_file(c.weights, b'{"embed_out.weight": {"dtype": "F32",', data)
    return load_checkpoint(c.ckpt)


def bad_offsets(c: Ctx):
    header, _ = split_file(c.weights)
    start, end = header["gpt_neox.embed_in.weight"]["data_offsets"]
    edit_header(c.weights, "gpt_neox.embed_in.weight", data_offsets=[start, end - 4])
    return load_checkpoint(c.ckpt)


def unknown_dtype(c: Ctx):
    edit_header(c.weights, "gpt_neox.final_layer_norm.bias", dtype="Q7")
    return load_checkpoint(c.ckpt)


def header_length(c: Ctx):
    c.weights.write_bytes(struct.pack("<Q", 1 << 40) + c.weights.read_bytes()[8:])
    return load_checkpoint(c.ckpt)


def edit_tensors(c: Ctx, fn) -> None:
    from specjax.models.loading import read_safetensors, write_safetensors

    tensors = dict(read_safetensors(c.weights))
    fn(tensors)
    write_safetensors(c.weights, tensors)


def missing_and_unexpected(c: Ctx):
    def fn(t):
        del t["gpt_neox.layers.0.mlp.dense_4h_to_h.bias"], t["embed_out.weight"]
        t["gpt_neox.layers.0.attention.lora_A.weight"] = np.zeros((2, 2), np.float32)
        t["gpt_neox.layers.1.attention.lora_B.weight"] = np.zeros((2, 2), np.float32)

    edit_tensors(c, fn)
    return load_checkpoint(c.ckpt)


def wrong_shape(c: Ctx):
    edit_tensors(c, lambda t: t.update({"embed_out.weight": t["embed_out.weight"][:-1]}))
    return load_checkpoint(c.ckpt)


def integer_weights(c: Ctx):
    edit_tensors(c, lambda t: t.update({"gpt_neox.final_layer_norm.weight": np.ones(32, np.int32)}))
    return load_checkpoint(c.ckpt)


def broken_config(c: Ctx):
    (c.ckpt / "config.json").write_text('{"model_type": "gpt_neox", "hidden_size": 32,,}')
    return load_checkpoint(c.ckpt)


def config_field_of_wrong_type(c: Ctx):
    hf = json.loads((c.ckpt / "config.json").read_text())
    (c.ckpt / "config.json").write_text(json.dumps({**hf, "num_hidden_layers": "two"}))
    return load_checkpoint(c.ckpt)


def missing_shard(c: Ctx):
    index = {"weight_map": {"embed_out.weight": "model-00002-of-00002.safetensors"}}
    (c.ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    return load_checkpoint(c.ckpt)


def broken_index(c: Ctx):
    (c.ckpt / "model.safetensors.index.json").write_text("{weight_map: nope}")
    return load_checkpoint(c.ckpt)


# ------------------------------------------------------------------ decoding and drafters


def prompts():
    return pad_prompts(PROMPTS)


def ar(c: Ctx, tokens=None, lengths=None, new=NEW, **kw):
    tokens, lengths = (tokens, lengths) if tokens is not None else prompts()
    return generate_ar(c.params, TARGET, tokens, lengths, new, **kw)


def chain(c: Ctx, tokens=None, lengths=None, new=NEW, drafter=None, draft_params=None, **kw):
    tokens, lengths = (tokens, lengths) if tokens is not None else prompts()
    drafter = drafter or ChainDrafter(DRAFT, 2)
    return generate(c.params, TARGET, drafter, c.draft_params if draft_params is None else draft_params,
                    tokens, lengths, new, **kw)


def too_long(fn):
    tokens, lengths = pad_prompts([list(range(1, 21)), [1]])  # 20 + NEW = 24 fits; 20 + 8 = 28 does not
    return lambda c: fn(c, tokens, lengths, 8)


@dataclasses.dataclass(frozen=True)
class Bad:
    id: str
    provoke: Callable[[Ctx], object]
    error: type[Exception]
    says: tuple[str, ...]


BAD = [
    # item 5: checkpoints
    Bad("truncated safetensors", truncate, CheckpointError, ("model.safetensors", "truncated", "{last}")),
    Bad("header not JSON", bad_json_header, CheckpointError, ("model.safetensors", "header is not valid JSON")),
    Bad("header offsets", bad_offsets, CheckpointError,
        ("model.safetensors", "'gpt_neox.embed_in.weight'", "F32[32, 32] needs 4096 bytes", "data_offsets")),
    Bad("unknown dtype", unknown_dtype, CheckpointError,
        ("model.safetensors", "'gpt_neox.final_layer_norm.bias'", "unknown dtype 'Q7'")),
    Bad("header length", header_length, CheckpointError, ("model.safetensors", "header length field")),
    Bad("missing and unexpected: the full diff", missing_and_unexpected, CheckpointError,
        ("model.safetensors", "missing tensors: ['embed_out.weight (config.json has tie_word_embeddings false, so "
         "the checkpoint must store the LM head)', 'gpt_neox.layers.0.mlp.dense_4h_to_h.bias']",
         "['gpt_neox.layers.0.attention.lora_A.weight', 'gpt_neox.layers.1.attention.lora_B.weight']")),
    Bad("wrong shape", wrong_shape, CheckpointError,
        ("model.safetensors", "embed_out.weight: checkpoint (31, 32) vs expected (32, 32)")),
    Bad("integer weights", integer_weights, CheckpointError,
        ("model.safetensors", "gpt_neox.final_layer_norm.weight: int32, expected a floating-point dtype")),
    Bad("config.json not JSON", broken_config, CheckpointError, ("config.json is not valid JSON",)),
    Bad("config.json field of the wrong type", config_field_of_wrong_type, CheckpointError,
        ("config.json: invalid config: gpt_neox config field 'num_hidden_layers' must be an integer, got 'two'",)),
    Bad("index names a missing shard", missing_shard, CheckpointError,
        ("model.safetensors.index.json", "model-00002-of-00002.safetensors")),
    Bad("index not JSON", broken_index, CheckpointError, ("model.safetensors.index.json is not valid JSON",)),
    # item 6: decoding
    Bad("sampling=1.0 (generate_ar)", lambda c: ar(c, sampling=1.0), TypeError, ("Sampling(temperature=1.0)",)),
    Bad("sampling=1.0 (generate)", lambda c: chain(c, sampling=1.0), TypeError, ("Sampling(temperature=1.0)",)),
    Bad("no key when sampling (generate_ar)", lambda c: ar(c, sampling=Sampling(1.0)), ValueError,
        ("a PRNG key is required when sampling", "key=jax.random.key")),
    Bad("no key when sampling (generate)", lambda c: chain(c, sampling=Sampling(0.7)), ValueError,
        ("a PRNG key is required when sampling",)),
    Bad("prompt + new tokens past the positions (generate_ar)", too_long(ar), ValueError,
        ("prompt of 20 tokens + max_new_tokens 8", "the model's 24")),
    Bad("prompt + new tokens past the positions (generate)", too_long(chain), ValueError,
        ("prompt of 20 tokens + max_new_tokens 8", "the model's 24")),
    Bad("prompt past the positions (prefill)",
        lambda c: prefill(c.params, TARGET, [list(range(1, 26))], None, init_cache(TARGET, 1, 32)), ValueError,
        ("prompt of 25 tokens", "the model's 24")),
    Bad("prefill without a cache", lambda c: prefill(c.params, TARGET, PROMPTS), TypeError, ("init_cache",)),
    Bad("3-D prompts", lambda c: ar(c, jnp.ones((1, 2, 3), jnp.int32), None), ValueError,
        ("prompts must be integer token ids", "int32[1, 2, 3]")),
    Bad("float prompts", lambda c: ar(c, [[1.0, 2.0]], None), ValueError, ("flat list of integer token ids",)),
    Bad("lengths that disagree with a list of prompts", lambda c: ar(c, PROMPTS, [3, 3]), ValueError,
        ("disagree with the prompts' lengths [3, 2]",)),
    Bad("no max_new_tokens", lambda c: generate_ar(c.params, TARGET, PROMPTS), TypeError, ("needs max_new_tokens",)),
    # issue 51: values that slipped through to the compiled loop
    Bad("NaN temperature (generate_ar)", lambda c: ar(c, sampling=Sampling(float("nan")), key=jax.random.key(0)),
        ValueError, ("temperature must be finite, got nan",)),
    Bad("inf temperature (generate)", lambda c: chain(c, sampling=Sampling(float("inf")), key=jax.random.key(0)),
        ValueError, ("temperature must be finite, got inf",)),
    Bad("string max_new_tokens (generate)", lambda c: chain(c, new="8"), TypeError,
        ("max_new_tokens must be a Python int", "str '8'")),
    Bad("non-callable on_round (generate_ar)", lambda c: ar(c, on_round="print"), TypeError,
        ("on_round must be callable",)),
    # item 6: drafter configs and params of the wrong kind
    Bad("EAGLE-3 config in a DFlash drafter", lambda c: DFlashDrafter(EAGLE3, TARGET), ValueError,
        ("DFlashDrafter needs a DFlashConfig", "eagle3_drafter")),
    Bad("Domino config in a DFlash drafter", lambda c: DFlashDrafter(DOMINO, TARGET), ValueError,
        ("DFlashDrafter needs a DFlashConfig", "DominoDrafter(cfg, target_cfg)")),
    Bad("DFlash config in a Domino drafter", lambda c: DominoDrafter(DFLASH, TARGET), ValueError,
        ("DominoDrafter needs a DominoConfig",)),
    Bad("DFlash config in the EAGLE-3 drafter", lambda c: eagle3_drafter(DFLASH, TARGET), ValueError,
        ("needs an Eagle3Config", "DFlashDrafter(cfg, target_cfg)")),
    Bad("DFlash config as a draft LM", lambda c: chain(c, drafter=ChainDrafter(DFLASH, 2)), ValueError,
        ("draft-LM drafter needs a GPTNeoXConfig or LlamaConfig", "DFlashDrafter(cfg, target_cfg)")),
    Bad("Domino params in a DFlash drafter",
        lambda c: chain(c, drafter=DFlashDrafter(DFLASH, TARGET), draft_params=c.domino_params), ValueError,
        ("DFlashDrafter got params that do not fit its DFlashConfig", "unexpected params: [\"['head']",
         "use DominoDrafter")),
    Bad("DFlash params in a Domino drafter",
        lambda c: chain(c, drafter=DominoDrafter(DOMINO, TARGET),
                        draft_params={k: v for k, v in c.domino_params.items() if k != "head"}), ValueError,
        ("DominoDrafter got params that do not fit its DominoConfig", "missing tensors: [\"['head']")),
    Bad("Domino params as a draft LM", lambda c: chain(c, draft_params=c.domino_params), ValueError,
        ("the draft LM got params that do not fit its GPTNeoXConfig",)),
]


ENTRY_POINTS = ("generate_entry", "generate_ar_entry", "prefill_unchecked")  # the programs a bad call must not reach


@pytest.mark.parametrize("case", BAD, ids=[b.id for b in BAD])
def test_bad_input_raises_a_named_error_before_compiling(case, ctx, caplog):
    names = {"last": last_tensor(ctx.weights), "ckpt": str(ctx.ckpt)}
    with pytest.raises(case.error) as info, jax.log_compiles(True), caplog.at_level(logging.WARNING):
        case.provoke(ctx)
    message = str(info.value)
    for text in case.says:
        assert text.format(**names) in message, f"{text.format(**names)!r} not in: {message}"
    compiled = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("Compiling") and any(f"jit({n})" in r.getMessage() for n in ENTRY_POINTS)]
    assert not compiled, f"raised after compiling: {compiled}"


# ------------------------------------------------------------------ accepted in the obvious meaning


def eos_of(c: Ctx) -> int:
    """A token AR emits at step 2 of row 0 (so an EOS set of it changes the output)."""
    return int(ar(c, eos_ids=()).tokens[0, 1])


ACCEPTED = [
    ("list of prompts (generate_ar)", lambda c: ar(c, PROMPTS, None), lambda c: ar(c)),
    ("one prompt as a list (generate_ar)", lambda c: ar(c, [1, 2, 3], None),
     lambda c: ar(c, *pad_prompts([[1, 2, 3]]))),
    ("one prompt as a 1-D array (generate_ar)", lambda c: ar(c, jnp.asarray([1, 2, 3], jnp.int32), None),
     lambda c: ar(c, *pad_prompts([[1, 2, 3]]))),
    ("2-D prompts without lengths (generate_ar)", lambda c: ar(c, np.asarray([[1, 2, 3], [4, 5, 6]]), None),
     lambda c: ar(c, *pad_prompts([[1, 2, 3], [4, 5, 6]]))),
    ("eos_ids as an int (generate_ar)", lambda c: ar(c, eos_ids=eos_of(c)), lambda c: ar(c, eos_ids=(eos_of(c),))),
    ("list of prompts and an int EOS (generate)", lambda c: chain(c, PROMPTS, None, eos_ids=eos_of(c)),
     lambda c: chain(c, eos_ids=(eos_of(c),))),
    ("one prompt as a list (generate)", lambda c: chain(c, [4, 5], None), lambda c: chain(c, *pad_prompts([[4, 5]]))),
    ("list of prompts (prefill)", lambda c: prefill(c.params, TARGET, PROMPTS, None, init_cache(TARGET, 2, 3))[1],
     lambda c: prefill(c.params, TARGET, *prompts(), init_cache(TARGET, 2, 3))[1]),
]


@pytest.mark.parametrize("convenient, canonical", [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_input_with_an_obvious_meaning_is_accepted_in_it(convenient, canonical, ctx):
    got, want = convenient(ctx), canonical(ctx)
    if hasattr(want, "tokens"):
        got, want = (got.tokens, got.num_tokens), (want.tokens, want.num_tokens)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got, want)
