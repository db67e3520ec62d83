"""``python -m cntkio``: the command line (see ``cntkio --help``)."""

from cntkio._src.cli.main import main

raise SystemExit(main())
