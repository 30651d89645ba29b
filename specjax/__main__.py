from specjax.cli import main

raise SystemExit(main())
