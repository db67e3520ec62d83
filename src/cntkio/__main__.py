"""``python -m cntkio``: the command line (see :mod:`cntkio.cli`)."""

from .cli import main

raise SystemExit(main())
