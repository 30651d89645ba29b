"""`make run` (`python -m specjax.showcase`): the command lives in `specjax.cli.showcase`."""

from specjax.cli.showcase import main, smollm2_serving

__all__ = ["main", "smollm2_serving"]

if __name__ == "__main__":
    raise SystemExit(main())
