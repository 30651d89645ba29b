"""`make run` (`python -m specjax.showcase`): the command lives in `specjax.cli.showcase`."""

from specjax.cli.showcase import SMOLLM2_LAYOUT, SMOLLM2_METHOD, main

__all__ = ["SMOLLM2_LAYOUT", "SMOLLM2_METHOD", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
