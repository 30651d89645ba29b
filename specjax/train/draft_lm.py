"""Training a draft LM: a small causal LM distilled on the target's own answers (the chain, fixed-tree,
EAGLE-2-tree and DynaTree drafters' draft model).

DynaTree ("DynaTree: Confidence-Aware Adaptive Tree Speculative Decoding for Efficient LLM Inference",
Chen, Liu and Li, §3: a draft LM expands the tree level by level) and the chain / fixed-tree baselines it is
compared with need a separate small LM that shares the target's tokenizer. For a target without a published small sibling (SmolLM2-135M-Instruct is the family's
smallest) this module makes one from the data every drafter of the target trains on.

Data: the drafters' data (`specjax.train.data` shards: a prompt, then the target's response); no target
features (`layers` is empty: nothing is cached or computed by the target in a step).

Loss (`make_step`, jitted): next-token cross entropy on the response tokens only: position t predicts
x_{t+1} where m_{t+1} = 1 (m the loss mask). This is sequence-level knowledge distillation (Kim and Rush,
"Sequence-Level Knowledge Distillation", arXiv 1606.07947, §3): three quarters of the answers are the
target's greedy outputs, exactly what a greedy chain must predict to be accepted, the rest T = 1 samples
of the target, whose hard labels estimate the cross entropy to the target's distribution without bias.
With a draft vocabulary (`--draft-vocab K`, FR-Spec's frequency ranking, `specjax.train.vocab`) the logits
are the K rows of the tied embedding only, as the draft LM drafts (`specjax.drafters.draft_lm.draft_forward`);
a label outside them leaves the loss and counts as a miss.

Model (`build_config`): a Llama-family causal LM (`LlamaConfig`, SwiGLU, RMSNorm, rotary, grouped-query
attention, tied embeddings) with the target's vocabulary, EOS and RoPE base, sized by `DraftLMArch`; it
saves as a plain HF `LlamaForCausalLM` directory (plus `draft_vocab.ids` when restricted).
Init (`init_from_target`): the tied embedding starts at the target's embedding projected onto its top-E
principal directions (E the draft's width; the target's token geometry, kept as far as E dimensions
allow), rescaled to a fresh embedding's standard deviation, when the target is at least as wide;
everything else normal(0.02).

Logged: loss, top-1 accuracy of the next response token, and the τ estimate of a greedy chain of
`CHAIN` tokens: 1 + the run of correct next-token predictions from each response position, capped at
`CHAIN` (teacher forced; exact for the greedy answers, whose tokens are the target's own continuation).
The export measures τ by decoding with `ChainDrafter(dcfg, CHAIN)`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters.chain import ChainDrafter
from specjax.drafters.draft_lm import check_compatible
from specjax.models.cache import init_cache
from specjax.models.llama import LlamaConfig
from specjax.models.model import causal_mask, final_norm, forward_tapped
from specjax.train.loop import DrafterTrainConfig
from specjax.train.trainer import Trainer, arch_field, for_compute, optimizer_steps
from specjax.train.vocab import labels_in_vocab, subset_logits

__all__ = ["CHAIN", "DraftLMArch", "DraftLMTrainConfig", "TRAINER", "build_config", "init_from_target",
           "make_step", "next_token_loss", "pca_embedding"]

CHAIN = 4  # draft tokens per round of the chain whose τ training estimates and the export measures
INIT_STD = 0.02  # the standard deviation of a fresh embedding (`specjax.models.layers`' normal init)


@dataclasses.dataclass(frozen=True)
class DraftLMTrainConfig(DrafterTrainConfig):
    """Draft-LM training: `DrafterTrainConfig`'s fields (see there), with this kind's defaults: a higher
    learning rate (a small LM trained from scratch), weight decay 0.1, the cosine decay to 10 %."""

    steps: int = 2000
    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1


@dataclasses.dataclass(frozen=True)
class DraftLMArch:
    """A draft LM's architecture choices (flags of `python -m specjax.train draft-lm`), named as `LlamaConfig`'s
    fields, so the recipe never hands one of them a DFlash-family value.

    Fields:
      hidden_size: E, the residual width (the tied embedding is V x E: 49,152 x 192 in float16 is 18.9 MB).
      num_layers: decoder layers.
      num_heads: query heads (head_dim = hidden_size / num_heads, even).
      num_kv_heads: key / value heads (divides num_heads).
      intermediate_size: the SwiGLU MLP's width.
    """

    hidden_size: int = arch_field(192, "the residual width E")
    num_layers: int = arch_field(4, "decoder layers")
    num_heads: int = arch_field(3, "query heads (head_dim = hidden_size / num_heads)")
    num_kv_heads: int = arch_field(1, "key/value heads (divides num_heads)")
    intermediate_size: int = arch_field(512, "the SwiGLU MLP's width")


def build_config(arch: DraftLMArch, tcfg, mask_id: int = 0, draft_vocab: int = 0) -> LlamaConfig:
    """The draft LM's `LlamaConfig` for target config `tcfg` (its vocabulary, EOS / BOS ids, RoPE base and
    context length); mask_id and draft_vocab are not part of it (a draft LM has no mask token; the draft
    vocabulary travels in its params). ValueError naming the flag for an impossible shape."""
    if arch.hidden_size % arch.num_heads:
        raise ValueError(f"--hidden-size {arch.hidden_size} is not a multiple of --num-heads {arch.num_heads}")
    head_dim = arch.hidden_size // arch.num_heads
    if head_dim % 2:
        raise ValueError(f"head_dim = --hidden-size / --num-heads = {head_dim} must be even (rotary)")
    if arch.num_heads % arch.num_kv_heads:
        raise ValueError(f"--num-heads {arch.num_heads} is not a multiple of --num-kv-heads {arch.num_kv_heads}")
    cfg = LlamaConfig(vocab_size=tcfg.vocab_size, hidden_size=arch.hidden_size, num_layers=arch.num_layers,
                      num_heads=arch.num_heads, num_kv_heads=arch.num_kv_heads, head_dim=head_dim,
                      intermediate_size=arch.intermediate_size,
                      rope_theta=float(getattr(tcfg, "rope_theta", 10000.0)), rms_norm_eps=1e-5,
                      tie_word_embeddings=True,
                      max_position_embeddings=int(getattr(tcfg, "max_position_embeddings", 2048)),
                      eos_token_ids=tuple(tcfg.eos_token_ids), bos_token_id=getattr(tcfg, "bos_token_id", None))
    check_compatible(cfg, tcfg)
    return cfg


def pca_embedding(embedding: np.ndarray, width: int) -> np.ndarray:
    """float32[V, width]: the rows of `embedding` [V, E_t] (E_t >= width) in the basis of its top-`width`
    principal directions (eigenvectors of E^T E, largest eigenvalue first): the projection that keeps the
    most of the rows' inner products (Eckart-Young), so similar tokens stay similar."""
    x = np.asarray(embedding, np.float64)
    if x.shape[1] < width:
        raise ValueError(f"a {x.shape[1]}-wide embedding has no {width} principal directions")
    eigenvalues, vectors = np.linalg.eigh(x.T @ x)  # ascending
    return (x @ vectors[:, ::-1][:, :width]).astype(np.float32)


def init_from_target(touter: dict, tcfg, vocab=None):
    """`init` for the loop: the tied embedding from the target's (`pca_embedding`) when the target's token
    embedding is at least as wide as the draft's; otherwise the fresh initialisation is kept."""
    target_embedding = touter.get("embed", {}).get("embedding")

    def init(dparams: dict) -> dict:
        width = dparams["embed"]["embedding"].shape[1]
        if target_embedding is None or target_embedding.shape[1] < width:
            return dparams
        projected = pca_embedding(np.asarray(jax.device_get(target_embedding)), width)
        projected *= INIT_STD / projected.std()  # the fresh init's scale: the tied head's first logits stay small
        return {**dparams, "embed": {"embedding": jnp.asarray(projected, dparams["embed"]["embedding"].dtype)}}

    return init


def next_token_loss(dparams, dcfg: LlamaConfig, tokens, loss_mask, vocab=None, compute_dtype=None,
                    positions=None, segments=None):
    """(loss, {"acc": f32[1], "tau": scalar}) of int32[B, S] sequences with their response mask bool[B, S]
    (module docstring): the mean response next-token cross entropy, the top-1 accuracy and the τ estimate
    of a greedy chain of CHAIN tokens. Logits over the draft vocabulary's K rows (vocab) or all V.
    Packed rows (`specjax.train.trainset.TrainSet.pack`): positions int32[B, S] restart at each sequence and
    segments int32[B, S] keep attention inside it, so each sequence's loss is the one it has alone (a sequence's
    last token predicts the next one's first, a prompt token: outside the mask, as padding is)."""
    b, s = tokens.shape
    p = for_compute(dparams, compute_dtype)
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    mask = causal_mask(b, s)
    if segments is not None:
        mask = mask & (segments[:, :, None] == segments[:, None, :])
    cache = init_cache(dcfg, b, s, compute_dtype or jnp.float32)
    _, _, last = forward_tapped(p, dcfg, tokens, positions, mask, cache, (dcfg.num_layers - 1,), with_logits=False)
    logits = subset_logits(p, dcfg, final_norm(p, dcfg, last[:, :-1, 0]), vocab)  # [B, S-1, K or V]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    labels, in_vocab = labels_in_vocab(tokens[:, 1:], vocab)
    wanted = loss_mask[:, 1:]  # row t predicts x_{t+1}, a response token
    ok = wanted & in_vocab
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    loss = jnp.sum(nll * ok) / jnp.maximum(jnp.sum(ok), 1)
    correct = (jnp.argmax(logp, axis=-1) == labels) & ok  # a label outside the vocabulary is a miss
    acc = jnp.sum(correct) / jnp.maximum(jnp.sum(wanted), 1)
    run, alive = jnp.zeros((b, s - 1), jnp.int32), jnp.ones((b, s - 1), bool)
    for j in range(CHAIN):  # the chain from row t accepts x_{t+1..t+j+1} while every prediction is right
        shifted = jnp.concatenate([correct[:, j:], jnp.zeros((b, j), bool)], axis=1)
        alive = alive & shifted
        run = run + alive
    tau = jnp.sum(jnp.where(wanted, run + 1, 0)) / jnp.maximum(jnp.sum(wanted), 1)
    return loss, {"acc": acc[None], "tau": tau}


def make_step(dcfg: LlamaConfig, tcfg, opt, tc: DraftLMTrainConfig, compute_dtype=None):
    """(step, evaluate) with `specjax.train.loop`'s contract; the target's outer params and the key are
    unused (no target features, no random draws); products in `compute_dtype` (None: float32)."""
    def loss_at(p, touter, batch, vocab, key):
        return next_token_loss(p, dcfg, batch["tokens"], batch["loss_mask"], vocab, compute_dtype,
                               batch.get("positions"), batch.get("segments"))

    return optimizer_steps(loss_at, opt)


TRAINER = Trainer(kind="draft-lm", help="a small draft LM (for chains, fixed trees and DynaTree) distilled on the "
                  "target's answers", train_config=DraftLMTrainConfig, arch=DraftLMArch, build_config=build_config,
                  make_step=make_step, layers=lambda dcfg, tcfg: (), drafter=lambda dcfg, tcfg: ChainDrafter(dcfg, CHAIN),
                  init=init_from_target, measured=("chain4", "dynatree"), uses_mask_token=False,
                  loads_as="draft", packs=True)
