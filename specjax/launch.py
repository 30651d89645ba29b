"""`python -m specjax.launch`: N local processes joined by `jax.distributed`; the launcher lives in
`specjax.cli.launch` (every argv parser is in `specjax.cli`)."""

from specjax.cli.launch import child_env, free_port, launch, main, parser, python_target

__all__ = ["child_env", "free_port", "launch", "main", "parser", "python_target"]

if __name__ == "__main__":
    raise SystemExit(main())
