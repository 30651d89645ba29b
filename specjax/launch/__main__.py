"""`python -m specjax.launch`: the command line lives in `specjax.cli.launch`, the launcher in `specjax.launch`."""

from specjax.cli.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
