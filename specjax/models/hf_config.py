"""Reading Hugging Face `config.json` dicts strictly.

Every field of a config must be either consumed by the architecture's parser, known
to be irrelevant at inference (dropout, initialiser range, ids, bookkeeping), or set
to a value that means "feature off". Anything else raises `UnsupportedConfigError`
naming the field, so a checkpoint using a feature we do not implement (rope scaling
other than llama3's, sliding windows, alibi, ...) never runs silently with the wrong maths.
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


class ConfigReader:
    """Consumes fields of a HF config dict and reports the unconsumed ones."""

    def __init__(self, hf: dict[str, Any], model_type: str):
        self.hf = dict(hf)
        self.model_type = model_type
        self.consumed: set[str] = set()

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        self.consumed.add(key)
        if required and key not in self.hf:
            raise UnsupportedConfigError(f"{self.model_type} config is missing required field {key!r}")
        return self.hf.get(key, default)

    def expect(self, key: str, allowed: tuple, why: str) -> None:
        """Accept `key` only if absent or one of `allowed` (values meaning 'feature off')."""
        self.consumed.add(key)
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
