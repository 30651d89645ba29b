"""`python -m specjax.train`: the command line lives in `specjax.cli.train`."""

from specjax.cli.train import main, parser

__all__ = ["main", "parser"]

if __name__ == "__main__":
    raise SystemExit(main())
