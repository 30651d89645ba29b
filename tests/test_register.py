"""Methods from outside the package (issue 52 item 3): `specjax.register` / `unregister` / `registered`,
`load_methods` (what `--methods-from` imports), the entry points of group ``specjax.methods``, "did you
mean" for a mistyped name, `Build.target_params`, and the worked example of docs/reusing.md ("Your own
method, by name": docs/examples/my_drafter.py by name through `Pipeline.load`, `specjax generate`,
`specjax bench` and the testing kit) and the README's `Pipeline(pair, Method(...))` block, run as written.

Every test runs inside `specjax.registered()`: what it registers is gone after it.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest

import specjax
from specjax import Build, Field, Method, MethodSpec, PromptLookupDrafter
from specjax.bench.harness import read_json
from specjax.cli import main
from specjax.drafters import registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "my_drafter.py"
PROMPTS = ["--prompt", "The river flows through the", "--prompt", "The city of Paris is"]


@pytest.fixture(autouse=True)
def clean_registry():
    with specjax.registered():
        yield
    assert "repeat" not in {s.name for s in registry.METHOD_SPECS}


def pld(name: str, forms=None, **kw) -> MethodSpec:
    return MethodSpec(name, forms or (name,), f"prompt lookup as {name}",
                      lambda b: (PromptLookupDrafter(num_tokens=b.values.get("N") or 4), {}), **kw)


def test_a_registered_method_is_seen_by_every_lookup_and_unregister_forgets_it():
    spec = pld("lookup", ("lookup<N>",), positional=(Field("N", int, 4, "tokens"),), aliases=(("look", "lookup6"),))
    assert specjax.register(spec) is spec
    assert registry.parse("LOOKUP5").name == "lookup5" and registry.parse("look").name == "lookup6"
    assert registry.needs_of("lookup2") == () and "lookup<N>" in registry.forms()
    assert spec in registry.METHOD_SPECS and registry.method_specs()[-1] is spec and "look" in registry.ALIASES
    assert "| `lookup<N>`; `look` = `lookup6` |" in registry.markdown_table()
    assert "`lookup<N>`" not in registry.markdown_table(own=True)
    m = specjax.method("lookup3")
    assert m == Method("lookup3", PromptLookupDrafter(num_tokens=3), {})
    assert specjax.register(spec) is spec  # the very same spec again: nothing to do
    assert specjax.unregister("lookup") is spec
    with pytest.raises(ValueError, match="unknown method 'lookup3'"):
        registry.parse("lookup3")
    with pytest.raises(ValueError, match="no method 'lookup' was registered"):
        specjax.unregister("lookup")
    with pytest.raises(ValueError, match="'chain' is one of specjax's own methods"):
        specjax.unregister("chain")


def test_registered_restores_the_registry_even_after_an_error():
    before = registry.method_specs()
    with pytest.raises(RuntimeError):
        with specjax.registered(pld("one")):
            specjax.register(pld("two"))
            assert [s.name for s in registry.method_specs()[-2:]] == ["one", "two"]
            raise RuntimeError
    assert registry.method_specs() == before


@pytest.mark.parametrize("spec, error", [
    (pld("chain"), r"method 'chain' \(registered from \S*test_register\): the name is taken \(one of specjax's own"),
    (pld("mine", ("chain3",)), r"'mine' .* clashes with method 'chain' \(one of specjax's own\): 'chain3' would"),
    (pld("mine", ("tree",)), r"clashes with method 'fixed' .*'tree' would read as both"),  # an alias head of fixed
    (pld("mine", ("mine",), aliases=(("dflash", "mine"),)), r"clashes with method 'dflash'"),
    (pld("mine", ("fixed<D>x<B>",), positional=(Field("D"), Field("B"))), r"clashes with method 'fixed'"),
    (pld("mine", needs=("medusa",)), r"needs unknown kinds \['medusa'\]; the kinds are draft, target, dflash"),
    (pld("mine", ("Mine",)), r"write \['Mine'\] in lower case"),
    (pld("mine", aliases=(("m", "other3"),)), r"alias 'm' stands for 'other3', which is not one of its forms"),
])
def test_register_refuses_a_clash_naming_it(spec, error):
    with pytest.raises(ValueError, match=error):
        specjax.register(spec)
    assert spec not in registry.METHOD_SPECS


def test_register_takes_only_method_specs_and_replace_swaps_a_registered_one():
    with pytest.raises(TypeError, match="a method is a specjax.drafters.spec.MethodSpec, got str 'pld'"):
        specjax.register("pld")
    specjax.register(pld("mine"))
    again = pld("mine")  # a notebook cell run again: a new builder, the same name
    with pytest.raises(ValueError, match="the name is taken"):
        specjax.register(again)
    assert specjax.register(again, replace=True) is again and registry.parse("mine").spec is again
    with pytest.raises(ValueError, match="the name is taken"):
        specjax.register(pld("pld"), replace=True)  # the package's own are never replaced


def test_an_unknown_name_or_field_gets_the_closest_one():
    with pytest.raises(ValueError, match=r"unknown method 'ddtre-8'; did you mean 'ddtree-8'\? Or use one of: ar,"):
        registry.parse("ddtre-8")
    with pytest.raises(ValueError, match=r"did you mean 'dynatree-zoo:tau=0.1'\?"):
        registry.parse("dynatre-zoo:tau=0.1")
    with pytest.raises(ValueError, match=r"unknown method 'ddtree'; did you mean 'ddtree-<N>'\?"):
        registry.parse("ddtree")
    with pytest.raises(ValueError, match=r"unknown method 'beam4'; use one of"):  # nothing close: no guess
        registry.parse("beam4")
    with pytest.raises(ValueError, match=r"unknown dynamic tree field 'topkk' \(did you mean 'topk'\?\)"):
        registry.parse("eagle3:topkk=4")
    specjax.load_methods(str(EXAMPLE))
    with pytest.raises(ValueError, match=r"did you mean 'repeat4'\?"):
        registry.parse("repet4")


def probe(seen: list) -> MethodSpec:
    """A method whose builder records what it was given, building the pld drafter."""
    return MethodSpec("probe", ("probe",), "records its Build",
                      lambda b: (seen.append(b), (PromptLookupDrafter(num_tokens=4), {}))[1])


def test_build_gets_the_target_config_and_params_where_the_caller_has_them():
    seen: list[Build] = []
    specjax.register(probe(seen))
    pipe = specjax.Pipeline.load("zoo", method="probe")  # loads, builds; nothing compiles
    assert seen[-1].target_cfg is pipe.pair.cfg and seen[-1].target_params is pipe.pair.params
    specjax.method("probe", pipe.pair.cfg)
    assert seen[-1].target_params is None
    with pytest.raises(TypeError, match="target_params= given without target_cfg"):
        specjax.method("probe", target_params=pipe.pair.params)
    assert Build("ar", {}, {}).target_params is None  # every existing builder's Build still reads
    # the CLI passes them too: a builder that fails after recording stops `generate` before any compile
    specjax.unregister("probe")
    specjax.register(MethodSpec("probe", ("probe",), "records, then fails",
                                lambda b: (seen.append(b), (_ for _ in ()).throw(ValueError("probe stops here")))))
    assert main(["generate", "--method", "probe", "--prompt", "The", "--max-new-tokens", "2"]) == 2
    assert seen[-1].target_params is not None and seen[-1].target_cfg.vocab_size == pipe.pair.cfg.vocab_size


def test_load_methods_imports_a_file_or_a_module_once(tmp_path, monkeypatch):
    (first,) = specjax.load_methods(str(EXAMPLE))
    assert first.name == "repeat" and specjax.load_methods(str(EXAMPLE)) == (first,)
    assert registry.parse("repeat").name == "repeat" and registry.parse("repeat5").values == {"K": 5}
    (tmp_path / "self_registering.py").write_text(
        "import specjax\nfrom specjax import MethodSpec, PromptLookupDrafter\nLOADS = []\nLOADS.append(1)\n"
        "specjax.register(MethodSpec('selfreg', ('selfreg',), 'h', lambda b: (PromptLookupDrafter(), {})))\n")
    (tmp_path / "no_methods.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (spec,) = specjax.load_methods("self_registering")  # a module name: what it registers on import counts
    specjax.unregister("selfreg")
    assert specjax.load_methods("self_registering") == (spec,) and registry.parse("selfreg").spec is spec
    import self_registering
    assert self_registering.LOADS == [1]  # imported once
    with pytest.raises(ValueError, match="declares no METHODS and registers no method"):
        specjax.load_methods(str(tmp_path / "no_methods.py"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        specjax.load_methods(str(tmp_path / "missing.py"))
    with pytest.raises(ImportError, match="cannot import 'no_such_module_xyz'"):
        specjax.load_methods("no_such_module_xyz")


def test_entry_points_are_read_once_the_first_time_a_name_resolves(tmp_path, monkeypatch):
    (tmp_path / "plug_methods.py").write_text(
        "from specjax import MethodSpec, PromptLookupDrafter\nLOADS = []\nLOADS.append(1)\n"
        "def spec(name):\n    return MethodSpec(name, (name,), 'a plugin', lambda b: (PromptLookupDrafter(), {}))\n"
        "METHODS = (spec('plug-a'),)\n"
        "def more():\n    return [spec('plug-b')]\n")
    info = tmp_path / "plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\na = plug_methods\nb = plug_methods:more\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_TABLE", registry._Table(registry._TABLE.own))  # as if specjax just started
    assert "plug_methods" not in sys.modules  # nothing read yet
    assert registry.parse("plug-b").spec.name == "plug-b" and registry.parse("plug-a").name == "plug-a"
    import plug_methods
    assert plug_methods.LOADS == [1] and [s.name for s in registry.method_specs()[-2:]] == ["plug-a", "plug-b"]
    with pytest.raises(ValueError, match=r"method 'plug-a' .*: the name is taken \(entry point a = plug_methods "
                                         r"\(specjax.methods, package plug\)\)"):
        specjax.register(plug_methods.spec("plug-a"))
    # a broken entry point: an error naming it, and none of that group's methods half-registered
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\na = plug_methods\nc = plug_missing\n")
    monkeypatch.setattr(registry, "_TABLE", registry._Table(registry._TABLE.own))
    with pytest.raises(ImportError, match=r"entry point c = plug_missing \(specjax.methods, package plug\) does not "
                                          r"load: ModuleNotFoundError.*fix or uninstall that package"):
        registry.parse("ar")
    assert registry._TABLE.added == {}


def test_the_cli_takes_methods_from_a_file(capsys):
    assert main(["methods", "--methods-from", f"{EXAMPLE},{EXAMPLE}"]) == 0
    assert "| `repeat[<K>]` |  |  | a chain of K copies" in capsys.readouterr().out
    assert main(["generate", "--methods-from", str(EXAMPLE), "--help"]) == 0
    assert "repeat[<K>]" in "".join(capsys.readouterr().out.split())  # --method's help lists it
    assert main(["generate", "--methods-from", "no/such_file.py", "--method", "ar"]) == 2
    assert "specjax generate: error: --methods-from no/such_file.py: FileNotFoundError" in capsys.readouterr().err
    assert main(["bench", "--methods-from", str(EXAMPLE), "--methods", "ar,repet4", *PROMPTS, "--prompts", "2",
                 "--warmup", "1"]) == 2
    assert "unknown method 'repet4'; did you mean 'repeat4'?" in capsys.readouterr().err
    assert main(["methods", "--methods-from", str(EXAMPLE), "--readme", "README.md"]) == 2
    assert "--readme writes the package's own methods only" in capsys.readouterr().err


def test_the_docs_example_runs_by_name_and_passes_the_kit(monkeypatch):
    """docs/reusing.md's "Your own method, by name" block, as written (from the repository root)."""
    text = (ROOT / "docs" / "reusing.md").read_text()
    section = text[text.index("## Your own method, by name"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) < 30
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "reusing_by_name"}
    exec(compile(code, "docs/reusing.md (Your own method, by name)", "exec"), namespace)  # noqa: S102
    assert namespace["pipe"].method.name == "repeat4" and namespace["out"][0].rounds >= 1


def test_the_cli_generates_and_benches_the_example_by_name(tmp_path, capsys):
    (spec,) = specjax.load_methods(str(EXAMPLE))
    drafter = spec.build(Build("repeat4", {"K": 4}, {}))[0]
    assert isinstance(drafter, specjax.Drafter) and drafter.budget == drafter.max_depth == 4
    seen: list[Build] = []  # the bench suite's builds get the target too; the same drafter, no new compile
    specjax.register(MethodSpec("probe", ("probe",), "repeat4, recorded", lambda b: (seen.append(b), (drafter, {}))[1]))
    args = ["generate", "--methods-from", str(EXAMPLE), "--method", "repeat4", "--prompt",
            "The river flows through the", "--max-new-tokens", "8", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "repeat4" and report["speculative"]["vs_ar"].startswith("identical")
    args = ["bench", "--methods-from", str(EXAMPLE), "--methods", "ar,repeat4,probe", *PROMPTS, "--prompts", "2",
            "--warmup", "1", "--max-new-tokens", "8", "--no-progress", "--no-ttft", "--json", str(tmp_path / "b.json")]
    assert main(args) == 0  # exit 1: a greedy output differed from AR's
    results, _, _ = read_json(tmp_path / "b.json")
    assert [r.method for r in results] == ["ar", "repeat4", "probe"] and all(r.identical_to_ar for r in results)
    assert seen[-1].target_params is not None and seen[-1].target_cfg is not None


def test_the_readme_block_runs_a_drafter_object_and_a_registered_method():
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(from specjax import Method, MethodSpec.*?)```", readme, re.S).group(1)
    exec(compile(code, "README.md (Pipeline(pair, Method(...)))", "exec"), {"__name__": "readme_block"})  # noqa: S102
    assert registry.parse("pld-16").spec.help == "prompt lookup of 16 tokens"
