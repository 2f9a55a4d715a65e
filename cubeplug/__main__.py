"""``python -m cubeplug``: the ``cubeplug`` command."""

from cubeplug.cli import main

raise SystemExit(main())
