"""GGUF (llama.cpp) checkpoints of the Llama family: config, dequantised params and tokenizer.

    cfg, params, tok = load_gguf(path)          # LlamaConfig, params pytree, GGUFTokenizer

What happens, strictly (anything we do not implement raises, naming the key or tensor):

* every refusal names the file: an empty, foreign (no b"GGUF" magic), truncated or corrupt file raises
  `GGUFError` before the package's own numpy / struct errors can, and metadata of the wrong type
  (an integer key holding a float or a bool) raises `ConfigTypeError` naming the key;
* the file is read with the `gguf` package's `GGUFReader`; `general.architecture` must be
  "llama"; the `llama.*` metadata becomes a `LlamaConfig`. Keys implying a feature the
  port lacks (rope scaling, partial rotary `llama.rope.dimension_count` != head_dim,
  experts, per-layer head counts, ...) raise `UnsupportedConfigError`, and so does any
  `llama.*` key this module does not know;
* every tensor is dequantised to float32 numpy (`gguf.quants.dequantize`: F32, F16, BF16,
  Q4_0/1, Q5_0/1, Q8_0, K-quants, ...). GGUF records a tensor's dims in ggml order
  `ne = [ne0, ne1]` (ne0 = contiguous row length); the numpy array is `ne` reversed, which
  is exactly HF's `[out, in]` layout. Every shape is checked against the config;
* GGUF names (`token_embd.weight`, `blk.{i}.attn_q.weight`, ...) are mapped to HF names and
  llama.cpp's rotary row permutation of q/k is undone (`unpermute_rope_rows`), then
  `params_from_tensors` applies the loader's strict key/shape checks. Missing GGUF
  tensors and unknown/leftover ones (e.g. `rope_freqs.weight`) raise `GGUFError`;
* the tokenizer (`tokenizer.ggml.model == "gpt2"`: byte-level BPE from the token list,
  merges and token types) becomes a `tokenizers.Tokenizer`, wrapped in `GGUFTokenizer`
  with the chat template from `tokenizer.chat_template` and `apply_chat_template`.

The permutation: convert_hf_to_gguf stores q_proj (n = n_head) and k_proj (n = n_head_kv)
rows as `W.reshape(n, 2, D/2, E).swapaxes(1, 2).reshape(n*D, E)`, i.e. GGUF row
`h*D + 2j + s` is HF row `h*D + s*D/2 + j` (interleaved rotary pairs for ggml's "normal"
rope). HF/our "rotate half" layout needs the inverse.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import gguf
import jax.numpy as jnp
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from specjax.models.hf_config import ConfigReader, ConfigTypeError, UnsupportedConfigError
from specjax.models.llama import LlamaConfig
from specjax.models.loading import CheckpointError, params_from_tensors, raise_on_mismatch

__all__ = [
    "GGUFError", "GGUFCheckpoint", "GGUFTokenizer", "load_gguf", "read_gguf", "read_metadata", "config_from_gguf",
    "dequantize_tensors", "hf_tensors_from_gguf", "tokenizer_from_gguf", "unpermute_rope_rows", "GGUF_TO_HF",
]


class GGUFError(CheckpointError):
    """The GGUF file's tensors do not match what its metadata describes (missing, unknown, bad shape/type)."""


# GGUF tensor name -> HF name. Layer names are relative to "blk.{i}." / "model.layers.{i}.".
GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_TO_HF = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TENSOR_HINTS = {
    "rope_freqs.weight": "per-dimension rope frequency factors (llama3-style rope scaling), not implemented",
    "ffn_gate_inp.weight": "mixture-of-experts router, not implemented",
    "attn_q.bias": "attention biases, not implemented for GGUF",
}

# ------------------------------------------------------------------------------------------ metadata


def read_metadata(reader) -> dict[str, Any]:
    """All key/value fields of an open `gguf.GGUFReader` as plain Python values.

    FLOAT32 values are given back as the shortest decimal that rounds to the stored float32
    (the converter wrote e.g. rms eps 1e-5 as float32; we want 1e-05, not 9.9999997e-06).
    """
    out = {}
    for key, field in reader.fields.items():
        value = field.contents()
        if field.types and field.types[0] == gguf.GGUFValueType.FLOAT32:
            value = float(str(np.float32(value)))
        out[key] = value
    return out


# Keys that are fine only at the value meaning "feature off".
_LLAMA_KEYS_OFF = {
    "expert_count": ((0,), "mixture of experts"),
    "expert_used_count": ((0,), "mixture of experts"),
    "rope.scaling.type": (("none",), "rope scaling"),
    "rope.scaling.factor": ((0.0, 1.0), "rope scaling"),
    "attention.causal": ((True,), "non-causal attention"),
    "use_parallel_residual": ((False,), "parallel residual blocks"),
    "attention.clamp_kqv": ((0.0,), "clamped q/k/v"),
    "attention.max_alibi_bias": ((0.0,), "ALiBi"),
    "logit_scale": ((1.0,), "output logit scaling"),
}
_TOKENIZER_KEYS = {
    "model", "pre", "tokens", "token_type", "merges", "scores", "bos_token_id", "eos_token_id", "eot_token_id",
    "eom_token_id", "unknown_token_id", "padding_token_id", "seperator_token_id", "cls_token_id", "mask_token_id",
    "add_bos_token", "add_eos_token", "add_space_prefix",
}


def config_from_gguf(meta: dict[str, Any], tensor_names: set[str] | frozenset[str]) -> LlamaConfig:
    """A `LlamaConfig` from GGUF metadata; tied embeddings iff there is no `output.weight` tensor.

    Raises UnsupportedConfigError for a non-llama architecture, a key implying a feature we do
    not implement, or an unknown `llama.*` / namespace key.
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise UnsupportedConfigError(f"GGUF general.architecture {arch!r} is not supported (only 'llama')")
    for key in meta:
        ns = key.split(".", 1)[0]
        if ns in ("GGUF", "general", "llama", "quantize"):
            continue
        if ns == "tokenizer":
            if key.startswith("tokenizer.chat_template") or key == "tokenizer.huggingface.json":
                continue
            if key.startswith("tokenizer.ggml.") and key.removeprefix("tokenizer.ggml.") in _TOKENIZER_KEYS:
                continue
        if ns == "split":
            raise UnsupportedConfigError(f"GGUF key {key!r}: split (multi-file) GGUF checkpoints are not supported")
        raise UnsupportedConfigError(f"GGUF metadata key {key!r} is not understood by specjax's llama loader")

    # The llama.* keys go through the strict HF config reader: every key is consumed by the
    # parser below, set to the value meaning "feature off", or raises naming it (`finish`).
    llama = {k: v for k, v in meta.items() if k.startswith("llama.")}
    per_layer = sorted(k for k, v in llama.items() if isinstance(v, list))
    if per_layer:
        raise UnsupportedConfigError(f"GGUF key {per_layer[0]!r} is per-layer ({llama[per_layer[0]][:4]}...): "
                                     f"not supported")
    reader = ConfigReader(llama, "GGUF llama")
    for name, (allowed, feature) in _LLAMA_KEYS_OFF.items():
        reader.expect(f"llama.{name}", allowed, feature)
    reader.expect("llama.attention.layer_norm_epsilon", (), "LayerNorm, not RMSNorm")
    if llama.get("llama.rope.scaling.type", "none") == "none":  # attn_factor, orig_ctx_len, ...: unused without it
        for key in llama:
            if key.startswith("llama.rope.scaling."):
                reader.get(key)

    def get(name: str, default: Any = None, required: bool = False):
        return reader.get(f"llama.{name}", default, required=required)

    hidden, heads = int(get("embedding_length", required=True)), int(get("attention.head_count", required=True))
    if hidden % heads and get("attention.key_length") is None:
        raise UnsupportedConfigError(f"embedding_length {hidden} is not a multiple of head_count {heads}")
    head_dim = int(get("attention.key_length", hidden // heads))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise UnsupportedConfigError("GGUF key 'llama.attention.value_length' != key_length: not supported")
    rot = get("rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        raise UnsupportedConfigError(
            f"GGUF key 'llama.rope.dimension_count' = {rot} != head_dim {head_dim}: partial rotary is not supported")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = get("vocab_size")
    if tokens is None and vocab is None:
        raise UnsupportedConfigError("GGUF metadata has neither tokenizer.ggml.tokens nor llama.vocab_size")
    if tokens is not None and vocab is not None and int(vocab) != len(tokens):
        raise UnsupportedConfigError(f"llama.vocab_size {vocab} != {len(tokens)} tokens in tokenizer.ggml.tokens")
    eos = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in meta]
    cfg = LlamaConfig(
        vocab_size=len(tokens) if tokens is not None else int(vocab),
        hidden_size=hidden,
        num_layers=int(get("block_count", required=True)),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=head_dim,
        intermediate_size=int(get("feed_forward_length", required=True)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", required=True)),
        tie_word_embeddings="output.weight" not in tensor_names,
        flavor="llama",
        max_position_embeddings=int(get("context_length", 2048)),
        eos_token_ids=tuple(dict.fromkeys(int(e) for e in eos)),
        bos_token_id=int(meta["tokenizer.ggml.bos_token_id"]) if "tokenizer.ggml.bos_token_id" in meta else None,
    )
    reader.finish()
    return cfg


# ------------------------------------------------------------------------------------------ tensors


def dequantize_tensors(reader) -> dict[str, np.ndarray]:
    """Every tensor of an open `GGUFReader` as float32 numpy, shape = ggml `ne` reversed ([out, in] for a matrix)."""
    if reader.byte_order != "I":
        raise GGUFError("byte-swapped (foreign-endian) GGUF files are not supported")
    out = {}
    for t in reader.tensors:
        qtype = gguf.GGMLQuantizationType(t.tensor_type)
        want = tuple(int(d) for d in reversed(t.shape.tolist()))
        if qtype == gguf.GGMLQuantizationType.F64:
            arr = np.asarray(t.data, np.float64).astype(np.float32)
        elif qtype.name.startswith("I"):
            raise GGUFError(f"tensor {t.name!r} has integer type {qtype.name}; a llama weight must be floating point")
        else:
            try:
                arr = gguf.quants.dequantize(t.data, qtype)
            except NotImplementedError as e:
                raise GGUFError(f"tensor {t.name!r}: cannot dequantise ggml type {qtype.name}: {e}") from e
            arr = np.asarray(arr, np.float32)
        if arr.shape != want:
            raise GGUFError(f"tensor {t.name!r}: dequantised shape {arr.shape} != reversed ggml ne {want}")
        out[t.name] = arr
    return out


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: [n*D, ...] interleaved-pair rows -> HF "rotate half" rows.

    GGUF row h*D + 2j + s holds HF row h*D + s*D/2 + j (s in {0, 1}, j < D/2); the inverse of
    `W.reshape(n, 2, D/2, ...).swapaxes(1, 2).reshape(W.shape)`.
    """
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise GGUFError(f"cannot unpermute {rows} rows into {n_heads} heads of even size")
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """GGUF name -> numpy shape (= reversed ggml ne) every tensor of `cfg` must have."""
    v, e, f = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size
    h, k, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    shapes = {"token_embd.weight": (v, e), "output_norm.weight": (e,)}
    if not cfg.tie_word_embeddings:
        shapes["output.weight"] = (v, e)
    per_layer = {"attn_norm.weight": (e,), "ffn_norm.weight": (e,), "attn_q.weight": (h * d, e),
                 "attn_k.weight": (k * d, e), "attn_v.weight": (k * d, e), "attn_output.weight": (e, h * d),
                 "ffn_gate.weight": (f, e), "ffn_up.weight": (f, e), "ffn_down.weight": (e, f)}
    for i in range(cfg.num_layers):
        shapes.update({f"blk.{i}.{n}": s for n, s in per_layer.items()})
    return shapes


def _hint(name: str) -> str:
    base = re.sub(r"^blk\.\d+\.", "", name)
    return f"{name} ({_TENSOR_HINTS[base]})" if base in _TENSOR_HINTS else name


def hf_tensors_from_gguf(cfg: LlamaConfig, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GGUF-named float32 tensors -> HF-named ones (q/k rows unpermuted), checking names and shapes.

    Raises GGUFError naming missing tensors, unknown/leftover tensors and wrong shapes (in
    numpy order [out, in] and ggml order ne = [in, out]).
    """
    expected = _expected_shapes(cfg)
    missing = sorted(set(expected) - set(tensors), key=_natural)
    unknown = sorted(set(tensors) - set(expected), key=_natural)
    bad = [f"{n}: numpy {tensors[n].shape} (ggml ne {list(tensors[n].shape[::-1])}) vs expected {expected[n]} "
           f"(ne {list(expected[n][::-1])})" for n in sorted(set(expected) & set(tensors), key=_natural)
           if tuple(tensors[n].shape) != expected[n]]
    raise_on_mismatch(GGUFError, "GGUF tensors do not match the llama config", missing, [_hint(n) for n in unknown],
                      bad, "unknown tensors")
    out = {}
    for name, arr in tensors.items():
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
        if m is None:
            out[GGUF_TO_HF[name]] = arr
            continue
        i, base = m.group(1), m.group(2)
        if base == "attn_q.weight":
            arr = unpermute_rope_rows(arr, cfg.num_heads)
        elif base == "attn_k.weight":
            arr = unpermute_rope_rows(arr, cfg.num_kv_heads)
        out[f"model.layers.{i}.{_LAYER_TO_HF[base]}"] = arr
    return out


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# ------------------------------------------------------------------------------------------ tokenizer

_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER = 1, 3, 4
# tokenizer.ggml.pre -> split digits individually before the GPT-2 byte-level regex?
# (llama.cpp: "gpt-2" is the plain GPT-2 regex; smollm/starcoder/refact/codeshell add "\p{N}" first.)
_PRE_TOKENIZERS = {"gpt-2": False, "smollm": True, "starcoder": True, "refact": True, "codeshell": True}


@dataclasses.dataclass(frozen=True)
class GGUFTokenizer:
    """A GGUF checkpoint's tokenizer: a `tokenizers.Tokenizer` plus special ids and the chat template.

    Fields:
      tokenizer: the `tokenizers.Tokenizer` (byte-level BPE built from the GGUF's token lists, or the
        embedded `tokenizer.huggingface.json`).
      bos_token_id: `tokenizer.ggml.bos_token_id`, or None if the GGUF has none.
      eos_token_id: `tokenizer.ggml.eos_token_id`, or None (the config's eos_token_ids may add the EOT id).
      pad_token_id: `tokenizer.ggml.padding_token_id`, or None.
      unk_token_id: `tokenizer.ggml.unknown_token_id`, or None.
      chat_template: `tokenizer.chat_template` (a Jinja template), or None: `apply_chat_template` then raises.
    """

    tokenizer: Any
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    unk_token_id: int | None = None
    chat_template: str | None = None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special tokens written in the text (e.g. <|im_start|>) are recognised."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def _token(self, i: int | None) -> str | None:
        return None if i is None else self.tokenizer.id_to_token(i)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            tokenize: bool = False, use_jinja: bool = True):
        """Render `messages` ([{"role", "content"}]) with the GGUF's chat template.

        Uses jinja2 (sandboxed, as transformers does) when it is installed and `use_jinja`;
        otherwise a ChatML formatter (`<|im_start|>role\\ncontent<|im_end|>\\n`, with the
        template's default system prompt if it has one), refused for non-ChatML templates.
        Returns the text, or its token ids if `tokenize`.
        """
        if self.chat_template is None:
            raise ValueError("this GGUF has no tokenizer.chat_template")
        text = None
        if use_jinja:
            try:
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError:
                pass
            else:
                env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

                def raise_exception(msg):
                    raise ValueError(msg)

                env.globals["raise_exception"] = raise_exception
                text = env.from_string(self.chat_template).render(
                    messages=messages, add_generation_prompt=add_generation_prompt,
                    bos_token=self._token(self.bos_token_id) or "", eos_token=self._token(self.eos_token_id) or "")
        if text is None:
            text = _chatml(self.chat_template, messages, add_generation_prompt)
        return self.encode(text) if tokenize else text

    def to_transformers(self):
        """The same tokenizer as a transformers `PreTrainedTokenizerFast` (chat template included)."""
        from transformers import PreTrainedTokenizerFast

        kw = {f"{n}_token": self._token(getattr(self, f"{n}_token_id")) for n in ("bos", "eos", "pad", "unk")}
        return PreTrainedTokenizerFast(tokenizer_object=self.tokenizer, chat_template=self.chat_template,
                                       **{k: v for k, v in kw.items() if v is not None})


def _chatml(template: str, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    if "<|im_start|>" not in template:
        raise ValueError("jinja2 is not installed and the chat template is not ChatML: install jinja2")
    # A literal default system prompt (SmolLM2's template adds one when the first message is not "system").
    default = re.search(r"<\|im_start\|>system\n([^'\"{}+]*?)<\|im_end\|>", template)
    parts = []
    if default and messages and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{default.group(1)}<|im_end|>\n")
    parts += [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def tokenizer_from_gguf(meta: dict[str, Any]) -> GGUFTokenizer:
    """Build the byte-level BPE tokenizer of a `tokenizer.ggml.model == "gpt2"` GGUF.

    Control tokens (type 3) become special added tokens, user-defined ones (type 4) plain
    added tokens; `add_bos_token`/`add_eos_token` become a post-processor.
    Raises UnsupportedConfigError for other tokenizer models or unknown pre-tokenizers.
    """
    def special(name):
        v = meta.get(f"tokenizer.ggml.{name}_token_id")
        return None if v is None else int(v)

    template = meta.get("tokenizer.chat_template")
    ids = dict(bos_token_id=special("bos"), eos_token_id=special("eos"), pad_token_id=special("padding"),
               unk_token_id=special("unknown"), chat_template=template)
    if "tokenizer.huggingface.json" in meta:
        return GGUFTokenizer(Tokenizer.from_str(meta["tokenizer.huggingface.json"]), **ids)
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedConfigError(
            f"GGUF tokenizer.ggml.model {kind!r} is not supported (only 'gpt2' byte-level BPE)")
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in _PRE_TOKENIZERS:
        raise UnsupportedConfigError(
            f"GGUF tokenizer.ggml.pre {pre!r} is not supported; known: {sorted(_PRE_TOKENIZERS)}")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [_TOKEN_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(f"{len(types)} token types for {len(tokens)} tokens")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError("tokenizer.ggml.tokens has duplicate tokens")
    merges = [tuple(m.split(" ")) for m in meta.get("tokenizer.ggml.merges", [])]
    if any(len(m) != 2 for m in merges):
        raise GGUFError("a tokenizer.ggml.merges entry is not two space-separated tokens")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=bool(meta.get("tokenizer.ggml.add_space_prefix", False)),
                                          use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if _PRE_TOKENIZERS[pre] else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == _TOKEN_CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types) if ty == _TOKEN_USER])
    add = [(n, ids[f"{n}_token_id"]) for n in ("bos", "eos") if meta.get(f"tokenizer.ggml.add_{n}_token", False)]
    if any(i is None for _, i in add):
        raise GGUFError("tokenizer.ggml.add_bos/eos_token is set but the token id is missing")
    if add:
        bos, eos = ([tokens[i] for n, i in add if n == which] for which in ("bos", "eos"))
        single = " ".join(bos + ["$A"] + eos)  # e.g. "<s> $A" for add_bos_token
        pair = single + " " + single.replace("$A", "$B")
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pair,
                                                           special_tokens=[(tokens[i], i) for _, i in add])
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise GGUFError(f"tokenizer has {tok.get_vocab_size(with_added_tokens=True)} ids for {len(tokens)} tokens")
    return GGUFTokenizer(tok, **ids)


# ------------------------------------------------------------------------------------------ entry points


@dataclasses.dataclass(frozen=True)
class GGUFCheckpoint:
    """A GGUF file read and dequantised, before the params pytree is built (`read_gguf`).

    Fields:
      config: the `LlamaConfig` built from the GGUF metadata (flavor "llama").
      hf_tensors: HF tensor name -> float32 numpy array (dequantised; q/k rows unpermuted back to HF's
        layout): what transformers' LlamaForCausalLM loads.
      tokenizer: the `GGUFTokenizer`, or None when read with with_tokenizer=False.
      metadata: every GGUF key/value (token lists included).
    """

    config: LlamaConfig
    hf_tensors: dict
    tokenizer: GGUFTokenizer | None
    metadata: dict


def read_gguf(path: str | os.PathLike, with_tokenizer: bool = True) -> GGUFCheckpoint:
    """Read a llama GGUF: config from metadata, dequantised HF-named float32 tensors, tokenizer."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    reader, meta = _open(path)
    try:
        cfg = config_from_gguf(meta, frozenset(t.name for t in reader.tensors))
        tok = tokenizer_from_gguf(meta) if with_tokenizer else None
        if tok is not None and tok.vocab_size != cfg.vocab_size:
            raise GGUFError(f"tokenizer has {tok.vocab_size} tokens, the model {cfg.vocab_size}")
        tensors = hf_tensors_from_gguf(cfg, dequantize_tensors(reader))
    except (GGUFError, UnsupportedConfigError, ConfigTypeError) as e:  # every refusal names the file
        raise type(e)(f"{path}: {e}") from None
    return GGUFCheckpoint(cfg, tensors, tok, meta)


def _open(path: Path):
    """(GGUFReader, metadata) of a GGUF file; an empty, truncated or foreign file raises GGUFError naming it
    (the gguf package's own errors -- numpy buffer and struct errors -- name nothing)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        what = "an empty file" if not magic else f"its first bytes are {magic!r}, not the magic b'GGUF'"
        raise GGUFError(f"{path}: not a GGUF file ({what})")
    try:
        reader = gguf.GGUFReader(path)
        return reader, read_metadata(reader)
    except Exception as e:  # noqa: BLE001 -- the reader raises numpy / struct / value errors on corrupt files
        raise GGUFError(f"{path}: not a readable GGUF file (truncated or corrupt: {type(e).__name__}: {e})") from e


def load_gguf(path: str | os.PathLike, dtype=jnp.float32, with_tokenizer: bool = True):
    """Load a llama GGUF. Returns (LlamaConfig, params pytree in `dtype`, GGUFTokenizer or None).

    Tensors are dequantised to float32 first, so params hold the dequantised values exactly
    (cast to `dtype`). All of `params_from_tensors`' key and shape checks apply.
    """
    ckpt = read_gguf(path, with_tokenizer)
    return ckpt.config, params_from_tensors(ckpt.config, ckpt.hf_tensors, dtype), ckpt.tokenizer
