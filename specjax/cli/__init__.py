"""The command line, and nothing else: every argv parser of specjax lives in this package.

    specjax.cli.main      `specjax` / `python -m specjax`: generate, bench, bench-device, methods, the tools
    specjax.cli.generate  `specjax generate`          specjax.cli.bench   `specjax bench`, `bench-device`
    specjax.cli.tools     the benchmark tools, `specjax assets`
    specjax.cli.train     `python -m specjax.train` (data, features, the trained drafter kinds, lm, eval, tokenizer)
    specjax.cli.showcase  `make run` (`python -m specjax.showcase`)
    specjax.cli.launch    `specjax launch` / `python -m specjax.launch` (the launcher: `specjax.launch`)
    specjax.cli.plans     a plan dataclass's flags, parsed back into the plan
    specjax.cli.common    the one-line user error, model-source flags, checks shared by the commands

Below this package, benchmarks and training take dataclasses (`specjax.bench.suite.BenchPlan`,
`specjax.train.run.TrainPlan`, ...) and raise ordinary exceptions; `tests/test_import_graph.py`
keeps argparse and sys.argv out of every other module.
"""

from specjax.cli.main import main

__all__ = ["main"]
