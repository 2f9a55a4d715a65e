"""The optional C extension; everything else is in pyproject.toml.

``cubeplug.backends.opencl._fastlaunch`` (the OpenCL client's launch in C) needs only a C compiler
and the Python headers, no OpenCL SDK. It is optional: where it cannot be built, the install goes on
and OpenCL launches run in Python (``cubeplug.backends.opencl.launch_path.status()`` says which).
``CUBEPLUG_PURE_WHEEL=1`` builds without it: a pure ``py3-none-any`` wheel, installable on any Python
(bench/gpu_session.sh uses one on the GPU machine, whose Python differs from this machine's).
"""

import os

from setuptools import Extension, setup

FASTLAUNCH = Extension(
    "cubeplug.backends.opencl._fastlaunch",
    ["cubeplug/backends/opencl/_fastlaunch.c"],
    optional=True,
    extra_compile_args=["-O2"],
)

setup(ext_modules=[] if os.environ.get("CUBEPLUG_PURE_WHEEL") == "1" else [FASTLAUNCH])
