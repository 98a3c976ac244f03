"""``python -m engine.cli ...``: the ``toe`` command."""

from engine.cli import main

raise SystemExit(main())
