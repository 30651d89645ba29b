"""Generated training data (specjax.train.data, specjax.data.train_sources): resumable shards, a
refused recipe change, and the committed SmolLM2 shards share no prompt with any evaluation set."""

import collections
import gzip
import json
import pathlib

import numpy as np
import pytest

from specjax.data.prompts import (gsm8k_prompts, humaneval_prompts, math500_prompts, mbpp_prompts, mtbench_prompts,
                                  normalise, sharegpt_prompts, wiki_prompts)
from specjax.data.train_sources import (DEFAULT_WEIGHTS, FOLLOW_ON, read_prompt_order, source_prompts,
                                        training_prompts, write_prompt_order)
from specjax.train import data as train_data
from specjax.train.data import (DataRecipe, compress_prompt_files, generate_shards, load_shards, load_target,
                                read_shard_prompts)
from tests.train_fixtures import record_bars

COMMITTED = pathlib.Path(__file__).parent.parent / "specjax" / "zoo" / "data" / "smollm2-135m-instruct"
pytestmark = pytest.mark.registry  # the prompt sources and evaluation sets are registry assets


def _by_prompt(directory: pathlib.Path) -> dict[int, tuple[list[int], float]]:
    """prompt index -> (its sequence, its temperature), over every shard of a data directory."""
    manifest, out = json.loads((directory / "manifest.json").read_text()), {}
    for shard in manifest["shards"]:
        with np.load(directory / shard["file"]) as z:
            for k, i in enumerate(z["prompt_index"]):
                out[int(i)] = (z["tokens"][z["offsets"][k]:z["offsets"][k + 1]].tolist(), float(z["temperature"][k]))
    return out


@pytest.mark.parametrize("engine", ["continuous", "batched"])
def test_generation_resumes_where_it_stopped_and_refuses_another_recipe(tmp_path, engine, monkeypatch):
    """A run stops within one answer of its target (its last shard ends early at a prompt index: the cursor) and
    its progress bar ends on the manifest's total; a run stopped at 60 tokens and continued to 150 holds the same
    sequences, prompt for prompt, as one run to 150, sampled answers included (each drawn with its prompt's key)."""
    bars = record_bars(monkeypatch, train_data)
    cfg, params, enc, _ = load_target("zoo")
    recipe = DataRecipe(target="zoo", max_new_tokens=8, max_prompt_tokens=24, batch_size=8, chat=False)
    kw = dict(shard_batches=1, progress=True, engine=engine)
    runs = [("a", 150), ("b", 60), ("b", 150)]  # b: stopped at 60, then continued at the cursor
    for directory, tokens in runs:
        manifest = generate_shards((cfg, params), enc, recipe, tmp_path / directory, response_tokens=tokens, **kw)
        total = manifest["totals"]["response_tokens"]
        assert tokens <= total < tokens + recipe.max_new_tokens, (tokens, total)  # within one answer of it
        assert bars[-1].n == total, (bars[-1].n, total)  # the bar's number is the summary's
        ranges = [s["prompt_range"] for s in manifest["shards"]]
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert ranges[-1][1] == manifest["cursor"]
    whole, resumed = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("a", "b"))
    assert len(whole["shards"]) >= 3 and whole["cursor"] == resumed["cursor"]
    assert whole["totals"]["response_tokens"] == resumed["totals"]["response_tokens"]
    whole_rows, resumed_rows = _by_prompt(tmp_path / "a"), _by_prompt(tmp_path / "b")
    assert whole_rows.keys() == resumed_rows.keys()
    assert whole_rows == resumed_rows  # every answer: each prompt's sampling is its own (index and key)
    temperatures = [t for _, t in whole_rows.values()]
    assert 0 < temperatures.count(1.0) < len(temperatures)  # both kinds were compared
    data = load_shards(tmp_path / "b")
    assert len(data) == whole["totals"]["sequences"]
    responses = np.diff(data.offsets) - data.prompt_lengths
    assert responses.sum() == whole["totals"]["response_tokens"] and (responses <= 8).all()
    with pytest.raises(ValueError, match="another recipe"):
        generate_shards((cfg, params), enc, DataRecipe(target="zoo", max_new_tokens=9, max_prompt_tokens=24,
                                                        batch_size=8, chat=False), tmp_path / "a", response_tokens=10)
    (tmp_path / "a" / whole["shards"][0]["file"]).write_bytes(b"broken")
    with pytest.raises(ValueError, match="sha256 differs"):
        load_shards(tmp_path / "a")


def test_prompt_files_are_gzipped_and_a_plain_directory_is_compressed_when_it_resumes(tmp_path):
    """A shard's prompts are written gzip'd and read back as the prompts of its sequences, in order; a
    directory written with plain `.jsonl` prompt files (before 2026-11-28) continues with its plain files
    compressed in place (the manifest names the `.gz`, the plain ones are gone, the prompts unchanged), and
    it then holds the sequences a run of the gzip'd form holds, prompt for prompt."""
    cfg, params, enc, _ = load_target("zoo")
    recipe = DataRecipe(target="zoo", max_new_tokens=6, max_prompt_tokens=24, batch_size=8, chat=False)
    kw = dict(shard_batches=1, progress=False)
    order = training_prompts(dict(recipe.weights), recipe.seed)
    made = generate_shards((cfg, params), enc, recipe, tmp_path / "a", response_tokens=60, **kw)
    for shard in made["shards"]:
        assert shard["prompts_file"].endswith(".prompts.jsonl.gz")
        with np.load(tmp_path / "a" / shard["file"]) as z:
            want = [order[i] for i in z["prompt_index"]]
        assert read_shard_prompts(tmp_path / "a", shard) == [
            {"source": p.source, "key": p.key, "text": p.text} for p in want]

    generate_shards((cfg, params), enc, recipe, tmp_path / "b", response_tokens=30, **kw)  # the old form:
    b = tmp_path / "b"
    manifest = json.loads((b / "manifest.json").read_text())
    before = [read_shard_prompts(b, s) for s in manifest["shards"]]
    for shard in manifest["shards"]:
        gz = b / shard["prompts_file"]
        shard["prompts_file"] = gz.name.removesuffix(".gz")
        (b / shard["prompts_file"]).write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    (b / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    assert [read_shard_prompts(b, s) for s in manifest["shards"]] == before  # the reader takes both forms

    resumed = generate_shards((cfg, params), enc, recipe, b, response_tokens=60, **kw)
    assert not list(b.glob("*.prompts.jsonl")) and all(s["prompts_file"].endswith(".gz") for s in resumed["shards"])
    assert [read_shard_prompts(b, s) for s in resumed["shards"][:len(before)]] == before
    assert compress_prompt_files(b, resumed) == 0  # nothing left to compress
    assert len(resumed["shards"]) > len(before)  # it went on, in the gzip'd form, each file its shard's prompts
    for shard in resumed["shards"]:
        with np.load(b / shard["file"]) as z:
            want = [order[i] for i in z["prompt_index"]]
        assert read_shard_prompts(b, shard) == [{"source": p.source, "key": p.key, "text": p.text} for p in want]
    assert _by_prompt(tmp_path / "a") == _by_prompt(b)  # the same sequences, prompt for prompt


def test_a_prompt_order_file_replaces_the_registry_and_gives_the_same_shards(tmp_path):
    """A machine without the registry (a GPU node) generates from a prompt-order file: read back it is the
    registry's order from its start (None before it), a file of another seed or an edited one is refused,
    and the shards it gives are byte-identical to those from the registry (stored as uint16, read as int32)."""
    weights = dict(DEFAULT_WEIGHTS)
    order = training_prompts(weights, 0)
    path = tmp_path / "order.jsonl.gz"
    assert write_prompt_order(path, weights, 0, start=8) == len(order) - 8
    back = read_prompt_order(path, weights, 0)
    assert back[:8] == [None] * 8 and back[8:] == order[8:]
    with pytest.raises(ValueError, match="not of this recipe"):
        read_prompt_order(path, weights, 1)
    plain = tmp_path / "order.jsonl"
    write_prompt_order(plain, weights, 0)
    lines = plain.read_text().split("\n")
    plain.write_text("\n".join(lines[:1] + [lines[2], lines[1]] + lines[3:]))  # two prompts swapped
    with pytest.raises(ValueError, match="do not match the sha256"):
        read_prompt_order(plain, weights, 0)

    cfg, params, enc, _ = load_target("zoo")
    recipe = DataRecipe(target="zoo", max_new_tokens=6, max_prompt_tokens=24, batch_size=8, chat=False)
    kw = dict(response_tokens=40, shard_batches=1, progress=False)
    generate_shards((cfg, params), enc, recipe, tmp_path / "registry", **kw)
    with pytest.raises(ValueError, match="starts after"):  # the file must cover the cursor
        generate_shards((cfg, params), enc, recipe, tmp_path / "file", prompt_order=path, **kw)
    write_prompt_order(path, weights, 0)
    made = generate_shards((cfg, params), enc, recipe, tmp_path / "file", prompt_order=path, **kw)
    for shard in made["shards"]:
        a, b = (tmp_path / d / shard["file"] for d in ("registry", "file"))
        assert a.read_bytes() == b.read_bytes()
        with np.load(a) as z:
            assert z["tokens"].dtype == np.uint16
    assert load_shards(tmp_path / "file").tokens.dtype == np.int32


def _evaluation_prompts() -> tuple[set, list]:
    """Every evaluation prompt, normalised: (all of them, the benchmark ones long enough to search for)."""
    bench = [p.prompt for f in (gsm8k_prompts, math500_prompts, humaneval_prompts, mbpp_prompts) for p in f()]
    bench += [t for p in mtbench_prompts() for t in p.turns]
    held = [p.prompt for s in ("valid", "test") for f in (sharegpt_prompts, wiki_prompts) for p in f(s)]
    return {normalise(t) for t in bench + held}, sorted({normalise(t) for t in bench if len(t) >= 40})


def _benchmark_search(bench: list[str]):
    """contains(text) -> whether some prompt of `bench` is a substring of text. A text contains a prompt only
    where that prompt's first k characters start (k: the shortest prompt's length), so a text is searched only
    for the prompts whose k-prefix is one of its k-windows: the answer of searching it for every prompt
    (~40M substring searches over the committed data, 30 s) from ~16M set lookups."""
    k = min(map(len, bench))
    by_prefix = collections.defaultdict(list)
    for b in bench:
        by_prefix[b[:k]].append(b)

    def contains(text: str) -> bool:
        windows = {text[i:i + k] for i in range(len(text) - k + 1)}
        return any(b in text for w in windows & by_prefix.keys() for b in by_prefix[w])

    return contains


def test_the_committed_shards_share_no_prompt_with_any_evaluation_set():
    """Brute force, independent of the generator's own filter: no training prompt equals an evaluation
    prompt (GSM8K, MATH-500, HumanEval, MBPP, MT-Bench, ShareGPT / wiki valid + test) or contains a
    benchmark prompt; the shards' checksums hold and agree with the manifest's totals."""
    manifest = json.loads((COMMITTED / "manifest.json").read_text())
    data = load_shards(COMMITTED)  # sha256 of every shard
    exact, bench = _evaluation_prompts()
    texts = [p["text"] for s in manifest["shards"] for p in read_shard_prompts(COMMITTED, s)]
    assert len(texts) == len(data) == manifest["totals"]["sequences"]
    contains = _benchmark_search(bench)
    planted = [t for b in bench[::50] for t in (f"a question: {b} thanks", f"a question: {b[:-1]}")]
    assert all(contains(t) for t in planted[::2])  # a prompt inside a longer text is found
    for text in planted + [normalise(t) for t in texts[::500]]:  # the answer of searching for every prompt
        assert contains(text) == any(b in text for b in bench), text
    for text in texts:
        norm = normalise(text)
        assert norm not in exact, text
        assert not contains(norm), text
    responses = np.diff(data.offsets) - data.prompt_lengths
    assert responses.sum() == manifest["totals"]["response_tokens"] and (responses <= 256).all()
    assert manifest["totals"]["response_tokens"] >= 250_000  # what is committed (goal 500k: the command continues it)


def _choice_loop_order(weights: dict[str, float], rng) -> list:
    """The reference the order is checked against: each position draws a live source (not exhausted, weight > 0)
    with `rng.choice` over the live sources' normalised weights, one call per position."""
    queues = {}
    for name in sorted(weights):
        items = list(source_prompts(name))
        queues[name] = [items[i] for i in rng.permutation(len(items))]
    heads, order = {name: 0 for name in queues}, []
    while live := [n for n in sorted(queues) if heads[n] < len(queues[n]) and weights[n] > 0]:
        p = np.array([weights[n] for n in live], float)
        name = live[int(rng.choice(len(live), p=p / p.sum()))]
        order.append(queues[name][heads[name]])
        heads[name] += 1
    return order


@pytest.mark.parametrize("weights, seed", [(DEFAULT_WEIGHTS, 0), ({"sharegpt": 1.0, "math": 0.0, "code": 2.0}, 3)])
def test_the_weighted_order_is_the_one_rng_choice_draws_position_by_position(weights, seed):
    """`training_prompts`' order (uniforms drawn at once, a CDF per live set) equals drawing each position with
    `rng.choice` (the order the committed data was generated in), the follow-on phase included: the same
    generator state at every step, so a data directory's cursor keeps meaning the same prompts."""
    rng = np.random.default_rng(seed)
    want = _choice_loop_order(dict(weights), rng)
    after = {f: w for name, w in sorted(weights.items()) for f in FOLLOW_ON.get(name, ()) if f not in weights}
    want += _choice_loop_order(after, rng)
    assert training_prompts(dict(weights), seed) == want


def test_follow_on_sources_extend_the_order_without_moving_its_first_phase():
    """The follow-on sources (later ShareGPT turns, wiki tasks) come only after every weighted source is
    exhausted: the order without them is the order's prefix, prompt for prompt (so a data directory made
    before them keeps its cursor); with them the order holds >= 50k distinct prompts (issue 59), none an
    evaluation text, each (source, key) once, every follow-on source in it."""
    from specjax.data.train_sources import evaluation_texts

    first = training_prompts(dict(DEFAULT_WEIGHTS), 0, follow_on=False)
    whole = training_prompts(dict(DEFAULT_WEIGHTS), 0)
    assert whole[: len(first)] == first and len(whole) > len(first)
    later = whole[len(first):]
    assert {p.source for p in later} == {f for fs in FOLLOW_ON.values() for f in fs}
    assert len({(p.source, p.key) for p in whole}) == len(whole)
    texts = {normalise(p.text) for p in whole}
    assert len(texts) >= 50_000, len(texts)
    assert not texts & evaluation_texts()
    first_turns = {normalise(p.text) for p in first if p.source == "sharegpt"}
    assert not first_turns & {normalise(p.text) for p in later if p.source == "sharegpt-turns"}


def test_a_continued_directory_keeps_its_own_sampled_fraction_whatever_the_default_is(tmp_path):
    """`fraction_for`: a given fraction wins; else an existing directory's recipe (the committed SmolLM2 data was
    generated at 0.25, before the default became 0.5), so continuing it needs no flag and meets no refusal; else
    the default. The committed data's own value is read back the same way."""
    old = tmp_path / "old"
    old.mkdir()
    manifest = {"recipe": {"target": "zoo", "sampled_fraction": 0.25}, "target": {"name": "zoo", "params_sha256": "-"},
                "cursor": 0, "skipped_prompts": 0, "shards": []}
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert train_data.fraction_for(old) == 0.25 and train_data.fraction_for(old, 1.0) == 1.0
    assert train_data.fraction_for(tmp_path / "new") == DataRecipe.sampled_fraction == 0.5
    assert train_data.fraction_for(tmp_path / "new", 0.0) == 0.0
    assert train_data.fraction_for(COMMITTED) == 0.25
