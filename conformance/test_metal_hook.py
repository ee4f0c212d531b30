"""Claim: (seed patch, ggml-metal) ggml_metal_palw_set_dispatch_hook reports every Metal compute
dispatch with its pipeline name and threadgroup geometry.

On an Apple GPU this case would build the metal variant, install a hook that records
(pipeline, tg0..2, tptg0..2), run the one-token decode and check one dispatch per compute
node with the kernel names of the Qwen3 graph (kernel_mul_mv_q4_K_f32, kernel_soft_max_f32 ...).
Nothing here can run it: there is no Metal device off macOS, and the hook is compiled only
into a Metal build (ggml-metal-device.m): the cpu and cuda libraries do not export it, so no
runtime check of it exists off macOS. That the patch declares it is a property of the patch,
not of a runtime, and is no case of the certified suite.
"""

import sys

import pytest

pytestmark = pytest.mark.palw_cpu


@pytest.mark.palw_metal
@pytest.mark.skipif(sys.platform != "darwin", reason="Metal dispatch hook: needs macOS with an Apple GPU and a "
                    "Metal build of the patched tree (GGML_METAL=ON); `palw build` makes cpu and cuda "
                    "variants only, a metal variant is still to be written on a Mac")
def test_metal_dispatch_hook_reports_dispatches():
    pytest.fail("the metal variant is not implemented yet: this case needs an Apple GPU to develop")
