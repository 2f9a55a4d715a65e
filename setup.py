"""The optional C extension; everything else is in pyproject.toml.

``cubeplug.backends.opencl._fastlaunch`` (the OpenCL client's launch in C) needs only a C compiler
and the Python headers, no OpenCL SDK. It is optional: where it cannot be built, the install goes on
and OpenCL launches run in Python (``cubeplug.backends.opencl.launch_path.status()`` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cubeplug.backends.opencl._fastlaunch",
            ["cubeplug/backends/opencl/_fastlaunch.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
