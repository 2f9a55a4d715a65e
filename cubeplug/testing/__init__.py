"""The conformance suite every cubeplug backend runs (docs/plugins.md).

One generic library of tests, gated by the backend's declared capabilities and never by its name,
instantiated by each backend with a two-line test module::

    from cubeplug.testing.suite import *  # noqa: F403
    CUBEPLUG_BACKEND = "mybackend"

or run directly: ``pytest --pyargs cubeplug.testing --cubeplug-backend=NAME[:DEVICE]`` (add
``--cubeplug-xfails=FILE`` for known failures) or ``cubeplug conformance NAME``. Modules:
:mod:`~cubeplug.testing.suite` (the test classes), :mod:`~cubeplug.testing.kernels` (the kernels, in
the ``python``, ``c`` and ``wgsl`` dialects), :mod:`~cubeplug.testing.gates` (capability skips),
:mod:`~cubeplug.testing.backend` (selection and clients), :mod:`~cubeplug.testing.fixtures`,
:mod:`~cubeplug.testing.plugin` (the pytest plugin) and :mod:`~cubeplug.commands.conformance` (the CLI).
Importing this package imports neither pytest nor any backend.
"""
