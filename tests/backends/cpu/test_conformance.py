from cubeplug.testing.suite import *  # noqa: F403

CUBEPLUG_BACKEND = "cpu"
#: The collectives run among devices cpu:0, cpu:1, cpu:2 (``[backends.cpu] devices``).
CUBEPLUG_PEERS_CONFIG = {"backends": {"cpu": {"devices": 3}}}
