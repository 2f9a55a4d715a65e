"""The ``c`` dialect's full source: f16 is enabled (CUDA's header, OpenCL's pragma) for a kernel that
uses it, in a parameter or only in its source."""

from __future__ import annotations

import pytest

from cubeplug.core.cdialect import full_source, prelude_lines
from cubeplug.core.kernel import Buffer, Kernel, Scalar

SRC = "KERNEL k(GLOBAL float* x) { f16 h = (f16)x[0]; x[0] = (float)(h + h); }\n"
ENABLES = {"cuda": "#include <cuda_fp16.h>", "opencl": "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"}


def _kernel(*params: Buffer | Scalar, dtypes: tuple[str, ...] = ()) -> Kernel:
    return Kernel("k", params or (Buffer("x", "f32"),), {"c": SRC}, dtypes=dtypes)


@pytest.mark.parametrize("api", ["cuda", "opencl"])
def test_f16_is_enabled_for_a_source_that_uses_it(api: str) -> None:
    half_inside = _kernel(dtypes=("f16",))
    assert ENABLES[api] in full_source(half_inside, SRC, api, fp16=True)
    assert ENABLES[api] in full_source(_kernel(Scalar("h", "f16")), SRC, api, fp16=True)
    assert ENABLES[api] not in full_source(_kernel(), SRC, api, fp16=True)
    # A device without f16 gets no enabling (the launcher refuses the kernel first, naming f16).
    assert ENABLES[api] not in full_source(half_inside, SRC, api, fp16=False)
    # The compiler's line numbers map back past the longer prelude.
    full = full_source(half_inside, SRC, api, fp16=True)
    assert full.splitlines()[prelude_lines(api, half_inside, fp16=True)] == SRC.rstrip("\n")
