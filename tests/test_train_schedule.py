"""Learning-rate schedules of drafter training (`specjax.train.loop.make_optimizer`): the warmup-stable-decay
schedule against its formula, and the property the one-run τ-against-data table rests on: a shorter wsd run's
schedule is the longer one's until the shorter one's decay starts."""

import numpy as np
import pytest

from specjax.train.loop import DrafterTrainConfig, make_optimizer, wsd_decay_start
from specjax.train.trainer import check_values


def _wsd(step, steps, lr, warmup, decay_frac, min_ratio):
    """The schedule as the config's docstring states it, written out."""
    decay = max(1, round(decay_frac * steps))
    start = max(warmup, steps - decay)
    if step < warmup:
        return lr * step / warmup
    if step < start:
        return lr
    return lr + (lr * min_ratio - lr) * min(1.0, (step - start) / max(1, steps - start))


@pytest.mark.parametrize("steps,warmup,frac", [(100, 10, 0.2), (37, 3, 0.1), (8, 1, 0.5), (1000, 50, 0.25)])
def test_wsd_is_warmup_then_constant_then_a_linear_decay(steps, warmup, frac):
    tc = DrafterTrainConfig(steps=steps, lr=2e-3, warmup_steps=warmup, schedule="wsd", decay_frac=frac,
                            min_lr_ratio=0.1)
    _, schedule = make_optimizer(tc)
    for s in range(steps + 1):
        np.testing.assert_allclose(float(schedule(s)), _wsd(s, steps, 2e-3, warmup, frac, 0.1), rtol=1e-5, atol=1e-9)
    assert float(schedule(steps)) == pytest.approx(2e-4)
    assert wsd_decay_start(steps, frac, warmup) == max(warmup, steps - max(1, round(frac * steps)))


def test_a_shorter_wsd_run_follows_the_longer_until_its_own_decay():
    long_tc = DrafterTrainConfig(steps=500, lr=1e-3, warmup_steps=20, schedule="wsd", decay_frac=0.2)
    _, long = make_optimizer(long_tc)
    for steps in (60, 151, 333):
        _, short = make_optimizer(DrafterTrainConfig(steps=steps, lr=1e-3, warmup_steps=20, schedule="wsd",
                                                     decay_frac=0.2))
        at = wsd_decay_start(steps, 0.2, 20)
        assert all(float(short(s)) == float(long(s)) for s in range(at + 1))
        assert float(short(at + 1)) < float(long(at + 1))
    # a cosine schedule has no such point: its decay depends on the length from the warm-up on
    _, a = make_optimizer(DrafterTrainConfig(steps=500, warmup_steps=20))
    _, b = make_optimizer(DrafterTrainConfig(steps=100, warmup_steps=20))
    assert float(a(30)) != float(b(30))


def test_an_unknown_schedule_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="schedule must be one of cosine, wsd, got 'linear'"):
        check_values(DrafterTrainConfig(schedule="linear"))
