"""Reading Hugging Face `config.json` dicts strictly.

Every field of a config must be either consumed by the architecture's parser, known
to be irrelevant at inference (dropout, initialiser range, ids, bookkeeping), or set
to a value that means "feature off". Anything else raises `UnsupportedConfigError`
naming the field, so a checkpoint using a feature we do not implement (rope scaling
other than llama3's, sliding windows, alibi, ...) never runs silently with the wrong maths.

Every typed field is read at its JSON type (`INTEGER_FIELDS`, `BOOLEAN_FIELDS`, ...; `ConfigReader.get`
for specjax's own layouts and GGUF metadata, `check_types` for the reference layouts' whole dicts):
"false" is not False, true is not a layer count, "10000" is not a number. A wrong type raises
`ConfigTypeError` naming the field; the loader adds the file.
"""

from __future__ import annotations

from typing import Any

from specjax.models.layers import Llama3RopeScaling


class UnsupportedConfigError(ValueError):
    """A config field is set to a value specjax does not implement."""


# Fields with no effect on the forward pass at inference.
IRRELEVANT_FIELDS = frozenset(
    {
        "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
        "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
        "use_cache", "initializer_range", "attention_dropout", "hidden_dropout", "classifier_dropout",
        "embd_pdrop", "resid_pdrop", "is_decoder", "max_position_embeddings", "output_attentions",
        "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type", "task_specific_params",
        "chunk_size_feed_forward", "torchscript", "tokenizer_class", "prefix", "pruned_heads",
        "tie_encoder_decoder", "is_encoder_decoder", "add_cross_attention", "cross_attention_hidden_size",
        "finetuning_task", "bad_words_ids", "num_return_sequences", "max_length", "min_length",
        "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature",
        "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
        "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
        "suppress_tokens", "begin_suppress_tokens", "tf_legacy_loss", "use_bfloat16", "quantization_config",
    }
)


class ConfigTypeError(ValueError):
    """A config field holds a value of the wrong JSON type (a string where a boolean belongs, a boolean
    where an integer belongs, ...) or outside its enumeration. The message names the field; the loader
    prefixes the file."""


# The JSON type of every typed field a config.json-like file (HF configs, the reference layouts'
# configs and their `dflash_config` / `eagle_config` objects, GGUF metadata) may hold. JSON null is
# "absent" (the parser's default applies) unless the field is required. `ConfigReader.get` and
# `check_types` refuse anything else, naming the field: "false" is not False, true is not 1.
INTEGER_FIELDS = frozenset({
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "target_num_hidden_layers", "num_target_layers", "block_size", "mask_token_id",
    "draft_vocab_size", "gru_hidden_dim", "head_rank", "emb_dim", "pure_draft_prefix_len",
    "max_position_embeddings", "target_hidden_size", "rotary_emb_base_dim", "original_max_position_embeddings",
    "llama.embedding_length", "llama.attention.head_count", "llama.attention.head_count_kv", "llama.block_count",
    "llama.feed_forward_length", "llama.context_length", "llama.vocab_size", "llama.attention.key_length",
    "llama.attention.value_length", "llama.rope.dimension_count",
})
BOOLEAN_FIELDS = frozenset({
    "tie_word_embeddings", "attention_bias", "mlp_bias", "use_parallel_residual", "shift_label", "norm_last_layer",
    "own_lm_head", "is_causal", "use_sliding_window", "use_aux_hidden_state",
})
NUMBER_FIELDS = frozenset({
    "rope_theta", "rms_norm_eps", "layer_norm_eps", "rotary_pct", "partial_rotary_factor", "rotary_emb_base",
    "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon",
})
STRING_FIELDS = frozenset({"model_type", "hidden_act", "target_model_type", "projector_type"})
INTEGER_LIST_FIELDS = frozenset({"target_layer_ids", "eagle_aux_hidden_state_layer_ids"})


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_problem(key: str, value: Any) -> str | None:
    """What is wrong with the type of `value` for the field `key` (None: nothing, or not a typed field)."""
    if value is None:
        return None
    if key in INTEGER_FIELDS:
        ok, what = _is_int(value), "an integer"
    elif key in BOOLEAN_FIELDS:
        ok, what = isinstance(value, bool), "a JSON boolean (true / false, not a string or a number)"
    elif key in NUMBER_FIELDS:
        ok, what = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif key in STRING_FIELDS:
        ok, what = isinstance(value, str), "a string"
    elif key in INTEGER_LIST_FIELDS:
        ok, what = isinstance(value, list) and all(map(_is_int, value)), "an array of integers"
    else:
        return None
    return None if ok else f"must be {what}, got {value!r} (a JSON {json_type(value)})"


def check_types(hf: dict[str, Any], where: str, prefix: str = "") -> None:
    """Every typed field of a config dict (and of its nested objects, as `prefix.key`) holds its JSON type;
    else ConfigTypeError naming `where` and the field."""
    for key, value in hf.items():
        if isinstance(value, dict) and key not in ("rope_scaling", "rope_parameters"):
            check_types(value, where, f"{prefix}{key}.")
            continue
        problem = type_problem(key, value)
        if problem:
            raise ConfigTypeError(f"{where} config field {prefix + key!r} {problem}")


class ConfigReader:
    """Consumes fields of a HF config dict and reports the unconsumed ones. Every typed field read
    (`INTEGER_FIELDS`, `BOOLEAN_FIELDS`, ...) is checked against its JSON type: a wrong one raises
    `ConfigTypeError` naming the field."""

    def __init__(self, hf: dict[str, Any], model_type: str):
        self.hf = dict(hf)
        self.model_type = model_type
        self.consumed: set[str] = set()

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        self.consumed.add(key)
        if required and key not in self.hf:
            raise UnsupportedConfigError(f"{self.model_type} config is missing required field {key!r}")
        value = self.hf.get(key, default)
        problem = type_problem(key, value)
        if problem:
            raise ConfigTypeError(f"{self.model_type} config field {key!r} {problem}")
        return value

    def expect(self, key: str, allowed: tuple, why: str) -> None:
        """Accept `key` only if absent or one of `allowed` (values meaning 'feature off')."""
        self.consumed.add(key)
        problem = type_problem(key, self.hf.get(key))
        if problem:
            raise ConfigTypeError(f"{self.model_type} config field {key!r} {problem}")
        if key in self.hf and self.hf[key] not in allowed:
            raise UnsupportedConfigError(
                f"{self.model_type} config field {key!r}={self.hf[key]!r} is not supported ({why}); "
                f"supported values: {allowed}"
            )

    def finish(self) -> None:
        unknown = sorted(k for k in self.hf if k not in self.consumed and k not in IRRELEVANT_FIELDS)
        if unknown:
            raise UnsupportedConfigError(
                f"{self.model_type} config has field(s) specjax does not implement: {unknown}"
            )


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def read_rope(reader: ConfigReader, default_theta: float, legacy_theta_key: str = "rope_theta",
              scaled_types: tuple[str, ...] = ()) -> dict[str, Any]:
    """Rope settings from either the transformers>=5 `rope_parameters` dict or legacy fields.

    Returns {"theta": float, "partial_rotary_factor": float or None, "scaling": Llama3RopeScaling or None}.
    The default (unscaled) rope type is always accepted; a scaled one only if the caller lists
    it in `scaled_types` (only "llama3" is implemented). Any other type, or a key the type
    does not use, raises `UnsupportedConfigError` naming it.
    """
    params = reader.get("rope_parameters") or {}
    scaling = reader.get("rope_scaling")
    supported = ("default", *scaled_types)
    if scaling:
        rope_type = scaling.get("rope_type", scaling.get("type"))
        if rope_type not in (None, *supported):
            raise UnsupportedConfigError(
                f"{reader.model_type} config field 'rope_scaling' of type {rope_type!r} is not supported "
                f"(supported rope types: {list(supported)})"
            )
        params = {**scaling, **params}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in supported:
        raise UnsupportedConfigError(
            f"{reader.model_type} config field 'rope_parameters.rope_type'={rope_type!r} is not supported "
            f"(supported rope types: {list(supported)})"
        )
    known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    if rope_type == "llama3":
        known |= set(_LLAMA3_KEYS)
    extra = set(params) - known
    if extra:
        raise UnsupportedConfigError(
            f"{reader.model_type} config field 'rope_parameters' has unsupported keys {sorted(extra)} "
            f"for rope type {rope_type!r}"
        )
    theta = params.get("rope_theta", reader.get(legacy_theta_key, default_theta))
    rope_scaling = None
    if rope_type == "llama3":
        # transformers falls back to max_position_embeddings when the original length is absent
        values = {"original_max_position_embeddings": reader.hf.get("max_position_embeddings"), **params}
        missing = [k for k in _LLAMA3_KEYS if values.get(k) is None]
        if missing:
            raise UnsupportedConfigError(f"{reader.model_type} llama3 rope scaling is missing {missing}")
        try:
            rope_scaling = Llama3RopeScaling(
                factor=float(values["factor"]), low_freq_factor=float(values["low_freq_factor"]),
                high_freq_factor=float(values["high_freq_factor"]),
                original_max_position_embeddings=int(values["original_max_position_embeddings"]),
            )
        except (TypeError, ValueError) as e:
            raise UnsupportedConfigError(f"{reader.model_type} llama3 rope scaling: {e}") from None
    return {"theta": float(theta), "partial_rotary_factor": params.get("partial_rotary_factor"),
            "scaling": rope_scaling}


def eos_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)
