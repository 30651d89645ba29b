"""What every draft model that reads a target (DFlash, EAGLE-3) shares: the record of the
target it was built for, the check against the target it is used with, and the fields it
copies from that target."""

from __future__ import annotations


class TargetBound:
    """Mixin of draft-model configs with fields hidden_size, vocab_size, target_layer_ids,
    target_num_layers, target_model_type; `kind` names the drafter in errors."""

    kind = "drafter"

    def check_target(self, target_cfg) -> None:
        """Raise ValueError naming every way `target_cfg` differs from the target this drafter was built for."""
        problems = []
        if target_cfg.hidden_size != self.hidden_size:
            problems.append(f"hidden size: drafter {self.hidden_size}, target {target_cfg.hidden_size}")
        if target_cfg.vocab_size != self.vocab_size:
            problems.append(f"vocab size: drafter {self.vocab_size}, target {target_cfg.vocab_size}")
        if self.target_num_layers is not None and target_cfg.num_layers != self.target_num_layers:  # None: unrecorded
            problems.append(f"layer count: drafter trained on a {self.target_num_layers}-layer target, "
                            f"target has {target_cfg.num_layers}")
        bad = [i for i in self.target_layer_ids if i >= target_cfg.num_layers]
        if bad:
            problems.append(f"layer ids {bad} >= the target's {target_cfg.num_layers} layers")
        if self.target_model_type is not None and target_cfg.model_type != self.target_model_type:  # None: unrecorded
            problems.append(f"model type: drafter {self.target_model_type!r}, target {target_cfg.model_type!r}")
        if problems:
            raise ValueError(f"{self.kind} drafter was trained for another target: " + "; ".join(problems))

    def check_layer_ids(self) -> None:
        if not self.target_layer_ids:
            raise ValueError(f"{self.kind} needs at least one target layer id to read features from")
        if self.target_num_layers is None:  # unrecorded (a reference layout): `check_target` checks the ids
            bad = [i for i in self.target_layer_ids if i < 0]
            if bad:
                raise ValueError(f"{self.kind} target layer ids {bad} are negative")
            return
        bad = [i for i in self.target_layer_ids if not 0 <= i < self.target_num_layers]
        if bad:
            raise ValueError(f"{self.kind} target layer ids {bad} are outside the target's {self.target_num_layers} "
                             f"layers [0, {self.target_num_layers})")


def fitted_to(target_cfg, target_layer_ids) -> dict:
    """The config fields a drafter copies from its target: width, heads, head dim, FFN, rope, norm eps."""
    return dict(vocab_size=target_cfg.vocab_size, hidden_size=target_cfg.hidden_size,
                num_heads=target_cfg.num_heads, num_kv_heads=target_cfg.num_kv_heads, head_dim=target_cfg.head_dim,
                intermediate_size=target_cfg.intermediate_size, target_layer_ids=tuple(target_layer_ids),
                target_num_layers=target_cfg.num_layers, target_model_type=target_cfg.model_type,
                rope_theta=target_cfg.rope_theta, rms_norm_eps=getattr(target_cfg, "rms_norm_eps", 1e-6))
