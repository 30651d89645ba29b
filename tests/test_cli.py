"""The README's main job, in process: the embedded pair, AR vs a speculative method, and
the `specjax bench` table.

`specjax generate` and `specjax bench` exit 1 if a speculative continuation differs from
AR, so exit code 0 is the end-to-end losslessness check of the shipped commands.
"""

import pytest

from specjax.cli import main


@pytest.mark.parametrize("method", ["chain", "fixed"])
def test_generate_command_matches_ar_on_the_embedded_pair(method, capsys):
    assert main(["generate", "--method", method, "--prompt", "The river flows through the", "--max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "[AR greedy]" in out and "vs AR: identical" in out and "mean accepted length" in out


def test_generate_takes_any_method_spec_and_prints_rounds(capsys):
    args = ["generate", "--method", "fixed3x2n8", "--prompt", "The river flows through the", "--max-new-tokens", "12",
            "--rounds"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[fixed3x2n8 speculative, greedy]" in out and "vs AR: identical" in out
    rounds = [line for line in out.splitlines() if line.strip().startswith("round ")]
    assert rounds and all("accepted" in r and "tree nodes" in r and "tree depth" in r for r in rounds)
    hist = out.split("accepted draft tokens per round: ")[1].splitlines()[0]
    assert [k for k, _ in (h.split(": ") for h in hist.split(", "))] == ["0", "1", "2", "3"]
    assert sum(int(c) for _, c in (h.split(": ") for h in hist.split(", "))) == len(rounds)


def test_generate_rejects_an_unknown_method(capsys):
    assert main(["generate", "--method", "beam4", "--prompt", "The", "--max-new-tokens", "4"]) == 2
    assert "unknown method 'beam4'" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_command_on_the_embedded_pair(tmp_path, capsys):
    from specjax.bench.harness import read_csv, read_json

    args = ["bench", "--prompt", "The river flows through the", "--prompt", "The city of Paris is", "--prompts", "2",
            "--warmup", "1", "--max-new-tokens", "16", "--methods", "ar,chain4,dynatree-p3", "--no-progress",
            "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv")]
    assert main(args) == 0  # exit 1 would mean a method's greedy output differs from AR's
    out = capsys.readouterr().out
    assert "1 counted prompt (--prompt, 1 warm-up discarded)" in out and "environment: target=tiny-neox-target" in out
    results, env, config = read_json(tmp_path / "b.json")
    assert [r.method for r in results] == ["ar", "chain4", "dynatree-p3"] == config["methods"]
    assert all(r.identical_to_ar and r.num_prompts == 1 and r.total_tokens == 16 for r in results)
    assert results[0].speedup == 1.0 and results[2].acceptance_rate > 0 and env["draft"] == "tiny-neox-draft"
    for r in results:
        assert f"{r.method} " in out
    rows, _ = read_csv(tmp_path / "b.csv")
    assert [(r.method, r.throughput, r.accept_hist) for r in rows] == [(r.method, r.throughput, r.accept_hist)
                                                                       for r in results]


def test_bench_reads_only_the_drafters_its_methods_draft_with(monkeypatch, capsys):
    """`specjax bench` loads the model with the drafters its methods need, not every one the model has (a GPU
    machine given only the target and the DFlash drafter benches DDTree; the others are never read)."""
    from specjax.bench import suite

    asked, load = [], suite.load_pair
    monkeypatch.setattr(suite, "load_pair", lambda model, needs, **kw: asked.append(tuple(needs)) or load(model, needs, **kw))
    args = ["bench", "--prompt", "The river flows through the", "--prompts", "1", "--warmup", "0",
            "--max-new-tokens", "8", "--methods", "ar,ddtree-4,pld", "--no-progress", "--no-ttft"]
    assert main(args) == 0
    assert asked == [("dflash",)], asked
    assert "ddtree-4" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.registry
def test_bench_runs_several_datasets_on_the_same_models(tmp_path, capsys):
    """--dataset a,b: a table per set, a JSON per set (PATH's stem + set), and the summary of speedup / τ
    per set whose cells are those files' numbers."""
    from specjax.bench.harness import read_json

    args = ["bench", "--dataset", "austen,gsm8k", "--prompts", "2", "--warmup", "1", "--max-new-tokens", "8",
            "--methods", "ar,chain4", "--no-progress", "--no-ttft", "--json", str(tmp_path / "b.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 counted prompt (austen (test), 1 warm-up discarded)" in out and "1 counted prompt (gsm8k, 1" in out
    summary = out[out.index("their means over the datasets"):].splitlines()
    chain = next(line for line in summary if line.startswith("chain4")).split()
    cells = []
    for name in ("austen", "gsm8k"):
        results, _, config = read_json(tmp_path / f"b.{name}.json")
        assert [r.method for r in results] == ["ar", "chain4"] and config["prompts"].startswith(name)
        cells += [f"{results[1].speedup:.2f}", f"{results[1].tokens_per_iteration:.2f}"]
    assert [float(c) for c in chain[1:5]] == [float(c) for c in cells] and chain[-1] == "yes"


@pytest.mark.slow
def test_bench_round_split_explains_eta(tmp_path, capsys):
    """--round-split: a row per speculative method whose in-loop round cost is τ / speedup of the same run
    (1 / η), the round and AR step timed alone, and the round's parts: DDTree's own, the drafter protocol's for a
    chain (`protocol_split`)."""
    from specjax.bench.harness import read_json

    args = ["bench", "--prompt", "The river flows through the", "--prompt", "The city of Paris is", "--prompts", "2",
            "--warmup", "1", "--max-new-tokens", "16", "--methods", "ar,chain4,ddtree-8", "--no-progress",
            "--no-ttft", "--round-split", "--json", str(tmp_path / "b.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = out[out.index("what a round costs"):].splitlines()
    rows = {line.split()[0]: line for line in lines if line.startswith(("chain4", "ddtree-8", "ar "))}
    assert set(rows) == {"chain4", "ddtree-8"}
    results = {r.method: r for r in read_json(tmp_path / "b.json")[0]}
    for name, line in rows.items():
        r, cells = results[name], line.split()
        assert float(cells[1]) == round(r.tokens_per_iteration, 2) and float(cells[3]) == round(r.efficiency, 2)
        assert float(cells[4]) == round(r.tokens_per_iteration / r.speedup, 2)
        assert float(cells[5]) > 0 and float(cells[6]) > 0
    assert all(f"{part} " in rows["chain4"] for part in ("propose", "verify", "commit_observe"))
    assert all(f"{part} " in rows["ddtree-8"] for part in ("draft", "select", "mask", "verify", "walk_commit"))


def test_bench_rejects_bad_arguments(capsys):
    assert main(["bench", "--prompt", "The", "--prompts", "2", "--warmup", "2"]) == 2
    assert "--warmup" in capsys.readouterr().err
    assert main(["bench", "--methods", "ar,beam4", "--prompt", "The", "--prompt", "A", "--prompts", "2", "--warmup", "1"]) == 2
    assert "unknown method 'beam4'" in capsys.readouterr().err


def test_generate_dflash_on_the_embedded_pair(capsys):
    """`--method dflash`: the zoo's trained DFlash drafter reads the target's features; exit 0 = identical to AR."""
    args = ["generate", "--method", "dflash", "--prompt", "The river flows through the", "--max-new-tokens", "16"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[dflash speculative, greedy]" in out and "vs AR: identical" in out
    assert main(args[:2] + ["dflash:block=5"] + args[3:] + ["--temperature", "1"]) == 0
    assert "[dflash:block=5 speculative, T=1.0]" in capsys.readouterr().out


def test_generate_eagle3_on_the_embedded_pair(capsys, tmp_path):
    """`--method eagle3...`: the zoo's EAGLE-3 drafter (or `--eagle3 DIR`) on the dynamic tree; identical to AR."""
    args = ["generate", "--method", "eagle3:topk=3,depth=3,total=12", "--prompt", "The river flows through the",
            "--max-new-tokens", "16"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[eagle3:topk=3,depth=3,total=12 speculative, greedy]" in out and "vs AR: identical" in out
    from specjax import zoo

    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text((zoo.path("tiny-neox-eagle3") / "config.json").read_text())
    # --eagle3 DIR is loaded strictly (here: no weights): a one-line error, exit 2, no traceback
    assert main(args[:2] + ["eagle3-chain4"] + args[3:] + ["--eagle3", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specjax generate: error: cannot run 'eagle3-chain4'") and "model.safetensors" in err


def test_generate_domino_on_the_embedded_pair(capsys):
    """`--method domino[:...]`: the zoo's Domino drafter, greedy and sampled; identical to AR at T = 0."""
    args = ["generate", "--method", "domino", "--prompt", "The river flows through the", "--max-new-tokens", "16"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[domino speculative, greedy]" in out and "vs AR: identical" in out
    assert main(args[:2] + ["domino:verify=walk"] + args[3:] + ["--temperature", "1"]) == 0
    assert "[domino:verify=walk speculative, T=1.0]" in capsys.readouterr().out


def test_generate_defaults_to_ddtree_on_the_embedded_pair(capsys):
    """`make run`'s default method (README: the fastest on this pair) runs and matches AR."""
    assert main(["generate", "--prompt", "The river flows through the", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "[ddtree-8 speculative, greedy]" in out and "vs AR: identical" in out
