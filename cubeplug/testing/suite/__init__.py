"""The conformance suite: every test class and fixture, for ``from cubeplug.testing.suite import *``.

A backend's test module is two lines (the SQLAlchemy / fsspec pattern)::

    from cubeplug.testing.suite import *  # noqa: F403
    CUBEPLUG_BACKEND = "mybackend"

Every test goes through the public :class:`~cubeplug.core.client.ComputeClient` API and skips only
with ``"backend lacks <capability>"`` (see :mod:`cubeplug.testing.gates`).
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite(
    "cubeplug.testing.suite.arrays",
    "cubeplug.testing.suite.bad_input",
    "cubeplug.testing.suite.capture",
    "cubeplug.testing.suite.collectives",
    "cubeplug.testing.suite.corpus",
    "cubeplug.testing.suite.data",
    "cubeplug.testing.suite.faults",
    "cubeplug.testing.suite.guard",
    "cubeplug.testing.suite.lang",
    "cubeplug.testing.suite.launch",
    "cubeplug.testing.suite.memory",
    "cubeplug.testing.suite.model",
    "cubeplug.testing.suite.runtime",
    "cubeplug.testing.suite.streams",
    "cubeplug.testing.suite.writes",
)

from cubeplug.testing.fixtures import (  # noqa: E402
    cubeplug_backend,
    cubeplug_client,
    cubeplug_cpu_client,
    cubeplug_fresh_client,
    cubeplug_new_client,
)
from cubeplug.testing.suite.arrays import TestArrays  # noqa: E402
from cubeplug.testing.suite.bad_input import TestBadInput, keeper  # noqa: E402
from cubeplug.testing.suite.capture import TestCapture  # noqa: E402
from cubeplug.testing.suite.collectives import (  # noqa: E402
    TestCollectiveErrors,
    TestCollectives,
    cubeplug_peers,
)
from cubeplug.testing.suite.corpus import TestBadInputCorpus  # noqa: E402
from cubeplug.testing.suite.data import TestRoundTrip, TestTensors, TestViews  # noqa: E402
from cubeplug.testing.suite.faults import TestFork, TestInterrupts  # noqa: E402
from cubeplug.testing.suite.guard import TestRedZones  # noqa: E402
from cubeplug.testing.suite.lang import TestLang, lang_client  # noqa: E402
from cubeplug.testing.suite.launch import TestCubeCount, TestLaunch  # noqa: E402
from cubeplug.testing.suite.memory import TestMemory  # noqa: E402
from cubeplug.testing.suite.model import TestClientModel  # noqa: E402
from cubeplug.testing.suite.runtime import (  # noqa: E402
    TestClose,
    TestCompileCache,
    TestIdentity,
    TestProfiling,
    TestToClient,
)
from cubeplug.testing.suite.streams import TestStreams  # noqa: E402
from cubeplug.testing.suite.writes import TestWriteCopyFill  # noqa: E402

__all__ = [
    "TestArrays",
    "TestBadInput",
    "TestBadInputCorpus",
    "TestCapture",
    "TestClientModel",
    "TestClose",
    "TestCollectiveErrors",
    "TestCollectives",
    "TestCompileCache",
    "TestCubeCount",
    "TestFork",
    "TestInterrupts",
    "TestIdentity",
    "TestLang",
    "TestLaunch",
    "TestMemory",
    "TestProfiling",
    "TestRedZones",
    "TestRoundTrip",
    "TestStreams",
    "TestTensors",
    "TestToClient",
    "TestViews",
    "TestWriteCopyFill",
    "cubeplug_backend",
    "cubeplug_client",
    "cubeplug_cpu_client",
    "cubeplug_fresh_client",
    "cubeplug_new_client",
    "cubeplug_peers",
    "keeper",
    "lang_client",
]
