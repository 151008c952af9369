"""What the device compute model says about kernels its device cannot run as given."""

from __future__ import annotations

import pytest

from flowsim.compute import DeviceModel
from flowsim.errors import FlowsimWarning
from flowsim.workload.kernels import Gemm


def test_fp8_gemms_on_a_device_without_fp8_are_priced_at_bf16_with_one_warning():
    model = DeviceModel("a100")
    fp8, bf16 = Gemm(4096, 4096, 4096, dtype="fp8"), Gemm(4096, 4096, 4096, dtype="bf16")
    with pytest.warns(FlowsimWarning, match=r"device a100_sxm_80gb has no fp8 tensor cores"):
        priced = model.kernel_ns(fp8)
    assert priced == pytest.approx(model.kernel_ns(bf16), rel=0.01)
    model.kernel_ns(Gemm(1024, 1024, 1024, dtype="fp8"))   # no second warning (an error here)
    assert DeviceModel("h100").kernel_ns(fp8) < DeviceModel("h100").kernel_ns(bf16)
