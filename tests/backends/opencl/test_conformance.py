from cubeplug.testing.suite import *  # noqa: F403

CUBEPLUG_BACKEND = "opencl"
