"""``python -m chute.cli``: the ``chute`` command (as ``python -m chute``)."""

from chute.cli import main

raise SystemExit(main())
