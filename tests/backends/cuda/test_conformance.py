import pytest

from cubeplug.testing.suite import *  # noqa: F403

CUBEPLUG_BACKEND, pytestmark = "cuda", pytest.mark.gpu
