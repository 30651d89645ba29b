"""The τ-against-data table (`python -m specjax.train scaling KIND`): one run per budget on the data's first
sequences, every run with the same held-out prompts, measured greedy and sampled, resumable."""

from __future__ import annotations

import json

import numpy as np

from specjax.cli.train import main as train_main
from specjax.train import scaling as scaling_module
from specjax.train.data import load_shards
from specjax.train.features import data_sha256
from specjax.train.scaling import budget_steps, paired_difference
from tests.train_fixtures import add_tiny_shard, tiny_data_directory

ROWS, LENGTH, PROMPT, VALID = 16, 24, 5, 2  # tiny_data_directory's shape: 19 response tokens a sequence


def test_budget_steps_are_epochs_over_the_budgets_sequences_capped():
    assert budget_steps(7, 2, 1.0, 50) == 4 and budget_steps(7, 2, 3.0, 50) == 11 and budget_steps(7, 2, 3.0, 5) == 5
    assert budget_steps(1, 64, 0.5, 10) == 1


def test_the_table_trains_one_drafter_per_budget_and_a_rerun_reads_it_back(tmp_path, monkeypatch, capsys):
    """Budgets of 3 and 7 sequences (57 and 133 response tokens) of a zoo-target data directory: two DFlash runs
    whose schedules are one pass over their own sequences, early stopping on, each measured greedy and at T = 1
    on the same 2 held-out prompts; rerun, nothing trains again and the table is the same."""
    data = tiny_data_directory(tmp_path / "data", rows=ROWS, length=LENGTH, prompt=PROMPT)
    out = tmp_path / "table"
    args = ["scaling", "dflash", "--target", "zoo", "--data", str(data), "--out", str(out), "--seq-len", "24",
            "--valid-rows", str(VALID), "--features", "online", "--budgets", "57,133", "--epochs", "1",
            "--eval-prompts", "2", "--new-tokens", "4", "--temperatures", "0,1", "--block-size", "4",
            "--batch-size", "2", "--anchors", "2", "--log-every", "1", "--patience", "2", "--steps", "50"]
    assert train_main(args) == 0
    doc = json.loads((out / "scaling.json").read_text())
    rows = doc["rows"]
    assert [r["budget"] for r in rows] == [57, 133]
    assert [r["train_sequences"] for r in rows] == [3, 7] and [r["train_response_tokens"] for r in rows] == [57, 133]
    assert [r["steps_planned"] for r in rows] == [2, 4] and all(r["complete"] for r in rows)
    for r in rows:
        recipe = json.loads((out / f"tokens-{r['budget']}" / "drafter" / "recipe.json").read_text())
        assert recipe["data"]["train_sequences"] == r["train_sequences"] and recipe["early_stopping"]["patience"] == 2
        assert set(r["tau"]) == {"T=0", "T=1"}
        for t, m in r["tau"].items():
            assert m["prompts"] == 2 and m["new_tokens"] == 4 and m["temperature"] == float(t[2:])
            assert all(1 <= x <= 4 + 1 for x in m["tau_per_prompt"])  # at least the target's token, at most a block
    table = (out / "scaling.md").read_text()
    assert capsys.readouterr().out.endswith(table) and "| 57 | 3 |" in table and "| 133 | 7 |" in table

    def no_training(*a, **kw):
        raise AssertionError("a measured budget was trained again")
    monkeypatch.setattr(scaling_module, "run", no_training)
    assert train_main(args) == 0
    assert json.loads((out / "scaling.json").read_text())["rows"] == rows
    # a reference drafter (here the first budget's own export) is measured on the same prompts with the same keys,
    # those of the data as the first call read it, though a generator has appended a shard since
    add_tiny_shard(data, rows=ROWS, length=LENGTH, prompt=PROMPT)
    assert train_main(args + ["--reference", str(out / "tokens-57" / "drafter")]) == 0
    doc = json.loads((out / "scaling.json").read_text())
    assert doc["data_shards"] == 1 and doc["data_sha256"] == data_sha256(load_shards(data, 1))
    again = doc["rows"]
    assert again[:2] == rows and again[2]["budget"] is None and again[2]["tau"] == rows[0]["tau"]
    assert "| reference: " in (out / "scaling.md").read_text()
    # `compare` measures exported drafters on the same prompts with the same keys: the table's figures again
    exports = [str(out / f"tokens-{n}" / "drafter") for n in (57, 133)]
    assert train_main(["compare", "dflash", "--target", "zoo", "--data", str(data), "--drafters", ",".join(exports),
                       "--valid-rows", str(VALID), "--eval-prompts", "2", "--new-tokens", "4", "--data-shards", "1",
                       "--json", str(tmp_path / "compare.json")]) == 0
    written = json.loads((tmp_path / "compare.json").read_text())
    measured = written["drafters"]
    assert [measured[e] for e in exports] == [r["tau"] for r in rows]
    assert (written["eval_prompts"], written["new_tokens"], written["data_shards"]) == (2, 4, 1)
    assert "budgets" not in written and "one_run" not in written  # what was measured, not a table's plan
    printed = capsys.readouterr().out
    assert f"| {exports[0]} | {rows[0]['tau']['T=0']['tau_mean']:.3f} |" in printed
    pair = paired_difference(measured[exports[0]]["T=0"]["tau_per_prompt"],
                             measured[exports[1]]["T=0"]["tau_per_prompt"])
    assert f"| {exports[0]} - {exports[1]}, paired | {pair['mean']:+.3f} ± {pair['se']:.3f}" in printed


def test_the_paired_difference_is_the_mean_and_standard_error_of_the_per_prompt_differences():
    pair = paired_difference([2.0, 3.0, 1.5, 2.5], [1.0, 3.5, 1.5, 2.0])  # differences 1, -0.5, 0, 0.5
    assert pair["mean"] == 0.25 and pair["higher"] == 2 and pair["prompts"] == 4
    assert abs(pair["se"] - np.std([1, -0.5, 0, 0.5], ddof=1) / 2) < 1e-12
    assert paired_difference([1.0, 2.0], [1.0]) is None and paired_difference([1.0], [2.0]) is None


def test_a_budget_the_data_cannot_fill_is_refused_naming_it(tmp_path, capsys):
    data = tiny_data_directory(tmp_path / "data", rows=ROWS, length=LENGTH, prompt=PROMPT)
    args = ["scaling", "dflash", "--target", "zoo", "--data", str(data), "--out", str(tmp_path / "t"),
            "--valid-rows", str(VALID), "--budgets", "57,100000"]
    assert train_main(args) == 2
    assert "budgets: 100,000 tokens cannot be trained on" in capsys.readouterr().err
    assert train_main(args[:-1] + ["100,57"]) == 2
    assert "--budgets must be distinct and ascending" in capsys.readouterr().err
    assert not (tmp_path / "t" / "scaling.json").exists()
    assert train_main(["compare", "dflash", "--target", "zoo", "--data", str(data), "--drafters",
                       str(tmp_path / "nowhere")]) == 2
    assert "drafters must be exported drafter directories" in capsys.readouterr().err


def test_one_run_tables_branch_one_wsd_run_and_each_branch_is_the_run_of_its_length(tmp_path):
    """`--one-run`: budgets of tokens seen by one packed draft-LM run (14 training sequences of 19 response tokens,
    two a 48-token row, one row a step: 38 tokens a step). The 114-token budget is 3 steps, branched from the
    7-step run at its decay start (step 2); its export is bit for bit the export of a separate 3-step run with
    the same config, and its row counts the tokens and sequences its batches held."""
    data = tiny_data_directory(tmp_path / "data", rows=ROWS, length=LENGTH, prompt=PROMPT)
    common = ["--target", "zoo", "--data", str(data), "--seq-len", "48", "--valid-rows", str(VALID), "--pack",
              "--hidden-size", "16", "--num-layers", "1", "--num-heads", "2", "--num-kv-heads", "1",
              "--intermediate-size", "32", "--batch-size", "1", "--schedule", "wsd", "--warmup-steps", "1",
              "--decay-frac", "0.2", "--lr", "1e-2", "--log-every", "1", "--ckpt-every", "100"]
    out = tmp_path / "table"
    assert train_main(["scaling", "draft-lm", *common, "--out", str(out), "--budgets", "114,266", "--one-run",
                       "--eval-prompts", "2", "--new-tokens", "4", "--temperatures", "0"]) == 0
    rows = json.loads((out / "scaling.json").read_text())["rows"]
    assert [(r["budget"], r["steps_planned"], r["steps_run"], r["decay_from"]) for r in rows] == [(114, 3, 3, 2),
                                                                                                  (266, 7, 7, 6)]
    assert [(r["train_response_tokens"], r["train_sequences"]) for r in rows] == [(114, 6), (266, 14)]
    branch = json.loads((out / "tokens-114" / "run" / "run.json").read_text())
    assert [c["overrides"] for c in branch["commands"]][-1] == ["train_config.steps"]
    assert train_main(["draft-lm", *common, "--out", str(tmp_path / "alone"), "--export", str(tmp_path / "alone-x"),
                       "--steps", "3"]) == 0
    for name in ("model.safetensors",):
        assert (out / "tokens-114" / "drafter" / name).read_bytes() == (tmp_path / "alone-x" / name).read_bytes()
    recipe = json.loads((tmp_path / "alone-x" / "recipe.json").read_text())
    assert recipe["data"]["packed"] and recipe["data"]["response_tokens_seen"] == 114
    assert "one run, each budget's tokens seen once" in (out / "scaling.md").read_text()


def test_a_one_run_table_needs_a_wsd_schedule_and_budgets_within_one_epoch(tmp_path, capsys):
    data = tiny_data_directory(tmp_path / "data", rows=ROWS, length=LENGTH, prompt=PROMPT)
    args = ["scaling", "draft-lm", "--target", "zoo", "--data", str(data), "--out", str(tmp_path / "t"),
            "--valid-rows", str(VALID), "--one-run", "--budgets", "100"]
    assert train_main(args) == 2
    assert "--one-run branches one run at each budget's decay start: give --schedule wsd" in capsys.readouterr().err
    assert train_main(args[:-1] + ["300", "--schedule", "wsd", "--warmup-steps", "1"]) == 2
    assert "budgets: 300 tokens are more than one epoch's 266 response tokens" in capsys.readouterr().err
    assert not (tmp_path / "t" / "scaling.json").exists()
