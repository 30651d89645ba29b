"""Two of the `gpu` subset's claims (tests/gpu_subset.py) that no other module states on the default device:
the mesh code paths on a one-device mesh, and a whole bfloat16 training step with online target features, as
an accelerator runs them. Both hold on any backend; on a CPU they run with the rest of the suite.

References: the same generations without a mesh (token-for-token: one device, so the sharded program may
differ only in its annotations), and the float32 step on cached features (within the bfloat16 rounding bound
derived below).
"""

import jax
import jax.numpy as jnp
import numpy as np

from specjax import sharding as S
from specjax import zoo
from specjax.decode import generate, generate_ar
from specjax.drafters.ddtree import DDTreeDrafter
from specjax.drafters.dflash import DFlashDrafter
from specjax.models import init_params, pad_prompts
from specjax.models.dflash_net import target_outer
from specjax.train.loop import TrainSet, make_optimizer, online_steps
from specjax.train.run import TRAINERS
from tests.zoo_prompts import PROMPTS


def test_mesh_paths_on_one_device_equal_no_mesh():
    """`shard_params` / `shard_batch` / `replicate` on a (data=1, model=1) mesh of the default device: greedy
    `generate_ar` and DDTree over the trained DFlash drafter give the tokens of the unsharded calls, and the
    rounds accept the same tokens."""
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    tokens, lengths = pad_prompts([zoo.encode(tok, p)[:24] for _, p in PROMPTS[:4]], 24)
    mesh = S.make_mesh(1, 1, devices=jax.devices()[:1])
    sharded = S.shard_params(tparams, tcfg, mesh)
    stokens, slengths = S.shard_batch(tokens, lengths, mesh)
    ar = generate_ar(tparams, tcfg, tokens, lengths, 24, eos_ids=())
    ar_mesh = generate_ar(sharded, tcfg, stokens, slengths, 24, eos_ids=())
    np.testing.assert_array_equal(np.asarray(ar_mesh.tokens), np.asarray(ar.tokens))
    drafter = DDTreeDrafter(DFlashDrafter(dcfg, tcfg), 8)
    spec = generate(tparams, tcfg, drafter, dparams, tokens, lengths, 24, eos_ids=())
    spec_mesh = generate(sharded, tcfg, drafter, S.replicate(dparams, mesh), stokens, slengths, 24, eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec_mesh.tokens), np.asarray(spec.tokens))
    np.testing.assert_array_equal(np.asarray(spec_mesh.stats.accepted), np.asarray(spec.stats.accepted))


def test_bfloat16_training_step_with_online_target_features():
    """The accelerator's DFlash step: the frozen target's forward in bfloat16 inside the step (online features)
    and the drafter's products in bfloat16, float32 master weights and optimizer state. Against the float32
    step on cached float32-computed features: the loss moves (bfloat16 did run) by at most 2 k u of it, u = 2^-8,
    k = 6 + 5 = 11 rounded stages (the drafter's 6: `test_train_run`'s bound, plus the target's params cast and
    its 4 layers up to the deepest tapped one); the weights and optimizer state stay float32; the gradient (Adam's
    first moment after the step) within the same 2 k u of the float32 one, in norm."""
    tcfg, tparams, _ = zoo.load("tiny-neox-target")
    t = TRAINERS["dflash"]
    dcfg = t.build_config(t.arch(), tcfg, tcfg.vocab_size - 1)
    layers = t.layers(dcfg, tcfg)
    tokens = np.random.default_rng(5).integers(1, tcfg.vocab_size, (4, 24)).astype(np.int32)
    mask = np.zeros(tokens.shape, bool)
    mask[:, 5:] = True
    cached = TrainSet.from_dense((tcfg, tparams), tokens, mask, layers, valid_rows=0)
    rows = np.arange(4)
    tc = t.train_config(steps=10, batch_size=4, anchors=4)
    opt, _ = make_optimizer(tc)
    touter, key = target_outer(tparams), jax.random.key(6)
    dparams = init_params(dcfg, jax.random.key(0), jnp.float32)
    step32 = t.make_step(dcfg, tcfg, opt, tc)[0]
    step16, eval16 = t.make_step(dcfg, tcfg, opt, tc, compute_dtype=jnp.bfloat16)
    online, _ = online_steps(step16, eval16, tcfg, layers, jnp.bfloat16)
    batch32 = jax.tree.map(jnp.asarray, cached.batch(rows))
    batch16 = {k: v for k, v in batch32.items() if k != "features"}
    # One step each: the schedule's warmup starts at a learning rate of 0 (optax counts its own steps), so the
    # step moves the weights by nothing and Adam's first moment by (1 - b1) x the gradient: compared there.
    p32, s32, l32, _ = step32(dparams, opt.init(dparams), touter, batch32, None, key, jnp.int32(0))
    p16, s16, l16, _ = online(dparams, opt.init(dparams), (touter, tparams), batch16, None, key, jnp.int32(0))
    u, stages = 2.0 ** -8, 11
    assert float(l32) != float(l16) and abs(float(l16) - float(l32)) <= 2 * stages * u * abs(float(l32)), (l32, l16)
    floats = [x for x in jax.tree.leaves((p16, s16)) if jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats and all(x.dtype == jnp.float32 for x in floats)
    g32, g16 = _first_moment(s32), _first_moment(s16)
    assert np.linalg.norm(g32) > 0 and np.linalg.norm(g16 - g32) <= 2 * stages * u * np.linalg.norm(g32), (
        np.linalg.norm(g16 - g32) / np.linalg.norm(g32))


def _first_moment(opt_state) -> np.ndarray:
    """Adam's first moment (1 - b1) x gradient after one step, every leaf flattened into one vector."""
    leaves = [x for path, x in jax.tree_util.tree_flatten_with_path(opt_state)[0]
              if any(getattr(k, "name", None) == "mu" for k in path)]
    assert leaves, "no Adam first moment in the optimizer state"
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in leaves])
