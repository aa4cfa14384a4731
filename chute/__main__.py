"""``python -m chute``: the ``chute`` command."""

from chute.cli import main

raise SystemExit(main())
