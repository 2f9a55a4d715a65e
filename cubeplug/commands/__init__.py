"""The subcommands of ``cubeplug`` beyond ``list`` and ``doctor``: ``bench``, ``cache`` and ``conformance``.

Each module defines ``add_arguments(parser)`` and ``run(args) -> int``; :mod:`cubeplug.cli` imports
one only when it runs (``LazyCommand``). :mod:`.output` is what every command prints with.
"""
