"""The template backend runs cubeplug's conformance suite: `cubeplug conformance template`."""

from cubeplug.testing.suite import *  # noqa: F403

CUBEPLUG_BACKEND = "template"
