"""Method specs for the benchmarks: a short string -> a drafter (`specjax.drafters.registry`).

The grammar lives in `specjax.drafters.spec` and every method is declared by its drafter
module (``METHODS``); this module keeps the benchmarks' names for the registry's functions.
`forms()` lists every method string, `markdown_table()` the README's table (fields, defaults,
what each drafts with). Retrieval tables persist across the benchmark's calls (hot start): the
harness passes each method's table on with the drafter's ``carry_over``. Depths count draft
tokens on a root-to-leaf path (our convention; the DynaTree authors' "D" trees hold D + 1).
"""

from __future__ import annotations

from specjax.drafters.registry import Method, forms, markdown_table, method, parse, parse_method

__all__ = ["Method", "forms", "markdown_table", "method", "parse", "parse_method"]
