"""The suite as collected by ``pytest --pyargs cubeplug.testing --cubeplug-backend=NAME``."""

from cubeplug.testing.suite import *  # noqa: F403
