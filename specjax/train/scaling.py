"""What data buys: τ against the response tokens a drafter trains on, at a fixed architecture.

    python -m specjax.train scaling dflash --target smollm2-135m --data DATA --out DIR \\
        --budgets 1000000,3000000,6000000,10000000 --epochs 3 --patience 4 [the kind's architecture / training flags]

    from specjax.train.scaling import ScalingPlan, run_scaling
    rows = run_scaling("dflash", TrainPlan(data=DATA, out=DIR), arch, tc, ScalingPlan(budgets=(10**6, 3 * 10**6)))

For each budget N (response tokens), one run of the kind (`specjax.train.run.run`) on the data's first sequences
holding at most N response tokens (`TrainPlan.train_tokens`); every run has the same architecture, training
config, seed and held-out sequences (the data's last `valid_rows`), so the budget is the only difference. A
run's schedule is `epochs` passes over its sequences (at most the training config's `steps`), cut short by
early stopping on the held-out τ estimate when the config's `patience` is set (its best evaluation's weights
are the run's result). Each exported drafter is then measured the same way: τ (the mean accepted length) of
decoding the first `eval_prompts` held-out prompts, `new_tokens` each, greedy and at each other temperature of
`temperatures` (`specjax.train.run.measured_tau`).

One run instead (`one_run`, where a run per budget costs too much: the largest budget's tokens once, not the sum of
all): the budgets are response tokens *seen*, each at most once (one epoch), by one run with the warmup-stable-decay
schedule ("wsd", `specjax.train.loop.make_optimizer`: warm-up, the learning rate held, a linear decay over the last
`decay_frac` of the steps; Hägele et al., arXiv 2405.18392, §3-4: such a decay matches a cosine schedule of the
same length). A budget's run length is the first step count whose batches hold its tokens
(`TrainSet.tokens_seen`); a smaller budget is the long run's checkpoint at that length's decay start
(`wsd_decay_start`), copied and resumed with its own length, so its schedule, batches and keys are the ones a
separate run of that length would have had. Each model has then been trained on as many tokens as its budget
says, with its own decay; the whole table costs the largest budget's steps plus the smaller budgets' decays.

DIR/tokens-N/ holds each budget's run (run/) and export (drafter/, with its recipe.json); DIR/scaling.json the
rows and DIR/scaling.md the table (`table`). Rerunning the command continues: a measured budget is read back,
an unfinished run resumes from its checkpoint (same recipe). `minutes` boxes the whole command: the run that
is training when it runs out stops at a checkpoint (its row says so) and later budgets wait for a rerun.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import load_checkpoint
from specjax.train.data import load_shards, load_target
from specjax.train.features import data_sha256
from specjax.train.loop import TrainSet, machine, wsd_decay_start
from specjax.train.run import TRAINERS, TrainPlan, check, measured_tau, run

__all__ = ["ScalingPlan", "budget_steps", "check_one_run", "compare_drafters", "paired_difference", "run_scaling",
           "table", "SCALING_FILE", "TABLE_FILE"]

SCALING_FILE = "scaling.json"
TABLE_FILE = "scaling.md"


def _tuple_of(kind):
    return lambda text: tuple(kind(float(x)) if kind is int else kind(x) for x in text.split(",") if x.strip())


@dataclasses.dataclass(frozen=True)
class ScalingPlan:
    """The budgets of a τ-against-data table and how each run is sized and measured (module docstring).

    Fields:
      budgets: response-token budgets, ascending (e.g. 1000000,3000000; 1e6 reads as 1000000).
      epochs: each run's schedule in passes over its own sequences (at most the training config's `steps`).
      eval_prompts: held-out prompts decoded to measure τ.
      new_tokens: tokens generated per held-out prompt.
      temperatures: the decoding temperatures τ is measured at (0: greedy).
      minutes: a time box for the whole command (None: none); a rerun continues.
      reference: an exported drafter of the same kind (e.g. the zoo's) measured on the same held-out prompts, its
        row last in the table: what a budget's drafter has to beat (None: none).
      one_run: the budgets are response tokens seen, each once, by one run and its decay branches
        (`specjax.train.scaling`; `epochs` is then unused): give --schedule wsd, --warmup-steps and no --patience.
    """

    budgets: tuple[int, ...] = dataclasses.field(default=(1_000_000, 3_000_000, 6_000_000, 10_000_000),
                                                 metadata={"parse": _tuple_of(int)})
    epochs: float = 3.0
    eval_prompts: int = 20
    new_tokens: int = 128
    temperatures: tuple[float, ...] = dataclasses.field(default=(0.0, 1.0), metadata={"parse": _tuple_of(float)})
    minutes: float | None = None
    reference: str | None = None
    one_run: bool = False

    def check(self) -> None:
        """Raise ValueError naming the first bad field."""
        if not self.budgets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.budgets):
            raise ValueError(f"budgets must be integers >= 1, got {self.budgets!r}")
        if list(self.budgets) != sorted(set(self.budgets)):
            raise ValueError(f"budgets must be distinct and ascending, got {self.budgets!r}")
        if not (isinstance(self.epochs, (int, float)) and 0 < self.epochs < float("inf")):
            raise ValueError(f"epochs must be a number > 0, got {self.epochs!r}")
        for name in ("eval_prompts", "new_tokens"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not self.temperatures or any(not 0 <= t < float("inf") for t in self.temperatures):
            raise ValueError(f"temperatures must be numbers >= 0, got {self.temperatures!r}")
        if self.minutes is not None and not 0 < self.minutes < float("inf"):
            raise ValueError(f"minutes must be a number > 0, got {self.minutes!r}")
        if self.reference is not None and not (pathlib.Path(self.reference) / "config.json").is_file():
            raise ValueError(f"reference {self.reference}: not an exported drafter (no config.json)")


def budget_steps(sequences: int, batch_size: int, epochs: float, max_steps: int) -> int:
    """A budget's schedule length: `epochs` passes over its `sequences` at `batch_size` a step (at least one
    step), at most `max_steps`."""
    return max(1, min(max_steps, math.ceil(epochs * sequences / batch_size)))


def _plans(kind: str, base: TrainPlan, arch, tc, sp: ScalingPlan,
           everything: TrainSet) -> list[tuple[int, TrainPlan, object, int]]:
    """(budget, its TrainPlan, its train config, its training sequences) of every budget, every value checked,
    the sequence counts from `everything` (the pinned data; ValueError naming a budget it cannot fill)."""
    out = pathlib.Path(base.out)
    plans = []
    for n in sp.budgets:
        try:
            rows = everything.with_train_tokens(n, base.answers).num_train
        except ValueError as e:
            raise ValueError(f"budgets: {n:,} tokens cannot be trained on: {e}") from None
        run_dir = out / f"tokens-{n}"
        plan = dataclasses.replace(base, out=str(run_dir / "run"), export=str(run_dir / "drafter"), train_tokens=n,
                                   eval_prompts=0, resume=(run_dir / "run" / "ckpt").exists(), minutes=None,
                                   fit_steps=False, stop_after=None)
        btc = dataclasses.replace(tc, steps=budget_steps(rows, tc.batch_size, sp.epochs, tc.steps))
        check(kind, plan, arch, btc)
        plans.append((n, plan, btc, rows))
    return plans


def check_one_run(tc) -> None:
    """Raise ValueError naming the fields when training config `tc` cannot be branched (`ScalingPlan.one_run`)."""
    if tc.schedule != "wsd" or tc.warmup_steps < 1 or tc.patience:
        raise ValueError(f"one_run branches one run at each budget's decay start: give `schedule` wsd, a "
                         f"`warmup_steps` >= 1 and `patience` 0 (got {tc.schedule}, {tc.warmup_steps}, {tc.patience})")


def _one_run_plans(kind: str, base: TrainPlan, arch, tc, sp: ScalingPlan,
                   everything: TrainSet) -> list[tuple[int, TrainPlan, object, int, int]]:
    """(budget, its TrainPlan, its train config, sequences seen, response tokens seen) of every budget of a
    one-run table (module docstring): the largest budget's run in its tokens-N/run, every smaller one a branch of
    it. ValueError naming the field for a schedule that cannot branch, or a budget past one epoch."""
    check_one_run(tc)
    trainset = dataclasses.replace(everything, pack=base.pack,
                                   group_batches=base.group_batches).with_train_tokens(None, base.answers)
    per_epoch = trainset.steps_per_epoch(tc.batch_size, tc.seed)
    batches = [trainset.rows_at(s, tc.batch_size, tc.seed) for s in range(per_epoch)]
    seen = np.cumsum([trainset.response_tokens_of(rows) for rows in batches])
    sequences_seen = np.cumsum([int((rows >= 0).sum()) for rows in batches])  # (an epoch reads each one once)
    out, plans = pathlib.Path(base.out), []
    for n in sp.budgets:
        if n > seen[-1]:
            raise ValueError(f"budgets: {n:,} tokens are more than one epoch's {int(seen[-1]):,} response tokens "
                             f"({per_epoch} steps of {tc.batch_size}): one_run sees each token once; generate more "
                             f"data or lower it")
        steps = int(np.searchsorted(seen, n)) + 1  # the first step count whose batches hold n tokens
        if wsd_decay_start(steps, tc.decay_frac, tc.warmup_steps) <= tc.warmup_steps:
            raise ValueError(f"warmup_steps {tc.warmup_steps} does not end before the {n:,}-token budget's decay "
                             f"({steps} steps, the last {tc.decay_frac:g} decaying): lower it")
        run_dir = out / f"tokens-{n}"
        branch = n != sp.budgets[-1]
        plan = dataclasses.replace(base, out=str(run_dir / "run"), export=str(run_dir / "drafter"), train_tokens=None,
                                   eval_prompts=0, resume=False, minutes=None, fit_steps=False, stop_after=None,
                                   override=("steps",) if branch else ())  # (resumed once its run exists)
        btc = dataclasses.replace(tc, steps=steps)
        check(kind, plan, arch, btc)
        plans.append((n, plan, btc, int(sequences_seen[steps - 1]), int(seen[steps - 1])))
    return plans


def _step_of(run_dir: pathlib.Path) -> int:
    state = run_dir / "ckpt" / "state.json"
    return json.loads(state.read_text())["step"] if state.exists() else 0


def _branch(kind: str, main: TrainPlan, arch, main_tc, plan: TrainPlan, tc, deadline, say) -> bool:
    """Make a one-run table's branch `plan` (its run directory): the main run advanced to the branch's decay start
    and copied. False when the time box stopped the main run first."""
    run_dir, main_dir = pathlib.Path(plan.out), pathlib.Path(main.out)
    if (run_dir / "ckpt").exists():
        return True
    at, step = wsd_decay_start(tc.steps, tc.decay_frac, tc.warmup_steps), _step_of(main_dir)
    if step > at:
        raise ValueError(f"{main_dir} is at step {step}, past the {tc.steps}-step branch's decay start {at}: its "
                         f"state there is gone; remove {main_dir.parent.parent} to make the table again")
    if step < at:
        say(f"scaling: the one run to step {at} (the {plan.out} branch's decay start)")
        run(kind, dataclasses.replace(main, export=None, resume=step > 0, stop_after=at - step), arch, main_tc,
            deadline=deadline)
        if _step_of(main_dir) < at:
            return False
    shutil.copytree(main_dir, run_dir)
    return True


def _measure(kind: str, export_dir: str, target, trainset: TrainSet, sp: ScalingPlan) -> dict:
    """τ of the exported drafter at each of `sp.temperatures` on the held-out prompts ({"T=0": {...}, ...})."""
    tcfg, tparams = target
    dcfg, params = load_checkpoint(export_dir, jnp.float32)  # with its draft vocabulary's ids, as a drafter decodes
    trainer = TRAINERS[kind]
    return {f"T={t:g}": measured_tau(trainer, dcfg, tcfg, tparams, params, trainset, sp.eval_prompts,
                                     new_tokens=sp.new_tokens, temperature=t) for t in sp.temperatures}


def compare_drafters(kind: str, target: str, data: str, drafters: tuple[str, ...], sp: ScalingPlan, *,
                     seq_len: int = 448, valid_rows: int = 64, data_shards: int | None = None) -> dict:
    """τ of exported drafters of one kind on the same held-out prompts of a data directory (its last
    `valid_rows` sequences, of its first `data_shards` shards when given: a run's own held-out rows), with the
    same keys, at each of `sp.temperatures` (`sp.eval_prompts` prompts, `sp.new_tokens` each):
    {drafter directory: {"T=0": {...}, ...}}. A drafter replaces another when it is better greedy and sampled on
    prompts neither trained on (`python -m specjax.train compare`)."""
    sp.check()
    missing = [d for d in drafters if not (pathlib.Path(d) / "config.json").is_file()]
    if not drafters or missing:
        raise ValueError(f"drafters must be exported drafter directories (with config.json), got {missing or 'none'}")
    tcfg, tparams, _, _ = load_target(target)
    heldout = TrainSet(load_shards(data, data_shards), None, (), seq_len, valid_rows)
    return {d: _measure(kind, d, (tcfg, tparams), heldout, sp) for d in drafters}


def paired_difference(taus: list[float], reference: list[float]) -> dict | None:
    """Per-prompt τ of a drafter against a reference's on the same prompts (`compare_drafters`' tau_per_prompt):
    {"mean": mean difference, "se": its standard error (sample std / sqrt n), "higher": prompts where it is
    higher, "prompts": n}; None when the lists differ in length (other prompts had rounds) or hold fewer than 2."""
    a, b = np.asarray(taus, np.float64), np.asarray(reference, np.float64)
    if len(a) != len(b) or len(a) < 2:
        return None
    d = a - b
    return {"mean": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))), "higher": int((d > 0).sum()),
            "prompts": len(d)}


def run_scaling(kind: str, base: TrainPlan, arch, tc, sp: ScalingPlan, *, say=print) -> list[dict]:
    """Train and measure one drafter per budget (module docstring); returns the rows (also in DIR/scaling.json,
    the table in DIR/scaling.md). `base`: the runs' plan (its `out` is DIR; export, train_tokens, resume and the
    time box are set per budget); `tc`: the training config every run shares (its `steps` caps each schedule)."""
    t0 = time.time()
    deadline = None if sp.minutes is None else t0 + 60 * sp.minutes
    out = pathlib.Path(base.out)
    path = out / SCALING_FILE
    before = json.loads(path.read_text()) if path.exists() else {}
    # every budget, in this call and any later one, reads the data shards the first call found (the held-out rows
    # stay the same while a generator appends to the directory)
    sp.check()
    shards = load_shards(base.data, before.get("data_shards") or base.data_shards)
    pinned = len(shards.manifest["shards"])
    base = dataclasses.replace(base, data_shards=pinned)
    heldout = TrainSet(shards, None, (), base.seq_len, base.valid_rows)
    if sp.one_run:
        plans = _one_run_plans(kind, base, arch, tc, sp, heldout)
        main, main_tc = plans[-1][1], plans[-1][2]
    else:
        plans = [(n, plan, btc, rows, None) for n, plan, btc, rows in _plans(kind, base, arch, tc, sp, heldout)]
    out.mkdir(parents=True, exist_ok=True)
    done = {r["budget"]: r for r in before.get("rows", [])}
    data = {"data_shards": pinned, "data_sha256": data_sha256(heldout.shards)}
    tcfg, tparams, _, _ = load_target(base.target)
    rows = []
    for n, plan, btc, sequences, seen in plans:
        if n in done and done[n].get("complete"):  # (the reference row, budget None, is measured again)
            rows.append(done[n])
            continue
        if deadline is not None and time.time() >= deadline:
            say(f"scaling: the time box ran out before the {n:,}-token budget (rerun to continue)")
            break
        if sp.one_run and plan is not main and not _branch(kind, main, arch, main_tc, plan, btc, deadline, say):
            say(f"scaling: the time box stopped the one run before the {n:,}-token branch (rerun to continue)")
            break
        say(f"scaling: {kind} on {n:,} response tokens ({sequences:,} sequences, {btc.steps} steps at most)")
        result = run(kind, dataclasses.replace(plan, resume=(pathlib.Path(plan.out) / "ckpt").exists()), arch, btc,
                     deadline=deadline)
        recipe = json.loads((pathlib.Path(plan.export) / "recipe.json").read_text())
        state = json.loads((pathlib.Path(plan.out) / "ckpt" / "state.json").read_text())
        finished = state["step"] >= btc.steps or state.get("stopped_early") is not None
        stop = recipe.get("early_stopping") or {}
        rows.append({"budget": n, "complete": finished, "train_sequences": sequences,
                     "train_response_tokens": recipe["data"]["train_response_tokens"] if seen is None else seen,
                     **({} if seen is None else {"decay_from": wsd_decay_start(btc.steps, btc.decay_frac,
                                                                               btc.warmup_steps)}),
                     "steps_planned": btc.steps, "steps_run": state["step"],
                     "stopped_early_at": stop.get("stopped_early_at"), "best_step": stop.get("best_step"),
                     "best_valid_tau_estimate": stop.get("best_valid_tau_estimate"),
                     "last_valid_tau_estimate": (result["log"][-1]["valid_tau_estimate"] if result["log"] else None),
                     "train_seconds": state["seconds"], "tau": _measure(kind, plan.export, (tcfg, tparams), heldout, sp),
                     "export": plan.export})
        _write(out, kind, base, data, arch, tc, sp, rows)
        if not finished:
            say(f"scaling: the time box stopped the {n:,}-token run at step {state['step']} of {btc.steps}")
            break
    if sp.reference is not None and (deadline is None or time.time() < deadline):
        rows = [r for r in rows if r["budget"] is not None]
        rows.append({"budget": None, "reference": sp.reference, "complete": True,
                     "tau": _measure(kind, sp.reference, (tcfg, tparams), heldout, sp)})
    _write(out, kind, base, data, arch, tc, sp, rows)
    return rows


def _write(out: pathlib.Path, kind: str, base: TrainPlan, data: dict, arch, tc, sp: ScalingPlan,
           rows: list[dict]) -> None:
    doc = {"kind": kind, "target": base.target, "data": base.data, "answers": base.answers, **data,
           "arch": dataclasses.asdict(arch),
           "train_config": dataclasses.asdict(tc), "scaling": dataclasses.asdict(sp), "machine": machine(),
           "devices": [str(d) for d in jax.devices()], "command": base.command, "rows": rows}
    tmp = out / (SCALING_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out / SCALING_FILE)
    (out / TABLE_FILE).write_text(table(doc))


def table(doc: dict) -> str:
    """The markdown table of a scaling.json document: one row per budget."""
    temps = [f"T={t:g}" for t in doc["scaling"]["temperatures"]]
    head = (["response tokens", "sequences", "steps (planned)", "stopped early at", "best held-out τ est."]
            + [f"τ {t}" for t in temps] + ["train s"])
    answers = "" if doc.get("answers", "all") == "all" else f" ({doc['answers']} answers only)"
    tc = doc["train_config"]
    how = (f"one run, each budget's tokens seen once, its own decay over the last {tc['decay_frac']:g} of its "
           f"steps (wsd, lr {tc['lr']:g}, {tc['warmup_steps']} warm-up steps)" if doc["scaling"].get("one_run")
           else f"{doc['scaling']['epochs']:g} epochs at most, patience {tc.get('patience', 0)}")
    lines = [f"{doc['kind']} on {doc['target']}{answers}: τ of {doc['scaling']['eval_prompts']} held-out prompts, "
             f"{doc['scaling']['new_tokens']} new tokens; {how}; {doc['machine']['device_kind']}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in doc["rows"]:
        taus = [r["tau"][t]["tau_mean"] for t in temps]
        if r["budget"] is None:  # the reference drafter
            lines.append("| " + " | ".join([f"reference: {r['reference']}", "", "", "", "",
                                            *["-" if t is None else f"{t:.2f}" for t in taus], ""]) + " |")
            continue
        cells = [f"{r['train_response_tokens']:,}", f"{r['train_sequences']:,}",
                 f"{r['steps_run']} ({r['steps_planned']})" + ("" if r["complete"] else ", time box"),
                 "-" if r["stopped_early_at"] is None else str(r["stopped_early_at"]),
                 "-" if r["best_valid_tau_estimate"] is None else f"{r['best_valid_tau_estimate']:.3f}",
                 *["-" if t is None else f"{t:.2f}" for t in taus], f"{r['train_seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
