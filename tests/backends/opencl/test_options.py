"""The ``[backends.opencl]`` options: validation and how a selector's filter maps onto them."""

from __future__ import annotations

import pytest

from cubeplug import ConfigError
from cubeplug.backends.opencl.options import OpenCLOptions, describe_filter, options
from cubeplug.core.config import Config


def _config(**opts: object) -> Config:
    config = Config()
    config.backends["opencl"] = dict(opts)
    return config


def test_options_validation() -> None:
    assert options(Config()) == OpenCLOptions()
    assert options(_config(platform="PoCL", device_type="CPU")).device_type == "cpu"
    assert options(_config(filter="pocl", platform="nvidia")).platform == "pocl"
    assert options(_config(filter="gpu")).device_type == "gpu"
    with pytest.raises(ConfigError, match="unknown key 'platfrom'"):
        options(_config(platfrom="pocl"))
    with pytest.raises(ConfigError, match="device_type"):
        options(_config(device_type="tpu"))
    with pytest.raises(ConfigError, match="profiling"):
        options(_config(profiling="yes"))
    with pytest.raises(ConfigError, match="platform"):
        options(_config(platform=""))


def test_describe_filter() -> None:
    assert describe_filter(OpenCLOptions()) == "no filter"
    assert describe_filter(options(_config(filter="pocl", device_type="cpu"))) == (
        "platform matching 'pocl' and type cpu"
    )
