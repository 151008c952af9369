"""Device names as users have them: a preset's, a short one, or the vendor's (nvidia-smi, a
trace's device properties); other parts than the presets' are refused naming the key."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.compute import DEVICES, device
from flowsim.device_names import ALIASES, preset_name
from flowsim.errors import ConfigError
from flowsim.topology.clusters import expand_cluster


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H100 80GB HBM3", "h100_sxm_80gb"),     # nvidia-smi on an SXM5 H100
    ("H100-SXM5-80GB", "h100_sxm_80gb"),
    ("h100 sxm", "h100_sxm_80gb"),
    ("DGX H100", "h100_sxm_80gb"),
    ("DGX A100 80GB", "a100_sxm_80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"),     # nvidia-smi on SXM4 A100s
    ("NVIDIA A100-SXM4-40GB", "a100_sxm_40gb"),
    ("A100 40GB", "a100_sxm_40gb"),
    ("a100-80gb", "a100_sxm_80gb"),
    ("NVIDIA H200", "h200_sxm_141gb"),
    ("NVIDIA H200 141GB HBM3e", "h200_sxm_141gb"),
    ("NVIDIA H800", "h800_sxm_80gb"),
    ("NVIDIA B200", "b200_sxm"),
    ("NVIDIA GB200", "gb200"),
    ("GB200 NVL72", "gb200"),
    ("NVIDIA B300 SXM6 AC", "b300_sxm"),     # nvidia-smi on an HGX B300
    ("B300 288GB", "b300_sxm"),
    ("NVIDIA GB300", "gb300"),
    ("GB300 NVL72", "gb300"),
])
def test_a_vendor_s_name_of_a_preset_s_part_is_that_preset(name, preset):
    assert device(name).name == preset
    assert expand_cluster({"device": name, "nodes": 2}, "net.yml")["device"] == preset


@pytest.mark.parametrize("name", [*DEVICES, *ALIASES])
def test_every_preset_and_short_name_still_reads_as_itself(name):
    assert preset_name(name) == ALIASES.get(name, name)
    assert preset_name(name.upper()) == preset_name(name)


@pytest.mark.parametrize("name", [
    "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "A100-PCIE-40GB", "NVIDIA A100 80GB PCIe",
    "H200 NVL", "GH200", "H100 94GB", "A100 64GB", "H100 A100", "tpu v5p", "MI300X",
    "A100 SXM5", "H100 SXM6", "B200 HBM2", "DGX A100",   # another part's words; which A100
    "B300 180GB", "GB300 NVL36",   # memory or a rack B300 and GB300 never shipped as
])
def test_another_part_is_refused_naming_the_key_and_the_value(name):
    with pytest.raises(ConfigError, match=r"cluster\.device.*h100_sxm_80gb") as refused:
        expand_cluster({"device": name, "nodes": 2}, "net.yml")
    assert repr(name) in str(refused.value)
    with pytest.raises(ConfigError, match="device"):
        device(name)


def test_a_cluster_named_as_nvidia_smi_prints_it_runs_as_the_preset():
    spec = dict(generator="transformer", layers=2, hidden=256, heads=8, sequence=128,
                micro_batch=1, global_batch=16, tp=8, dp=2)
    times = [float(flowsim.simulate({"cluster": {"device": name, "nodes": 2}}, spec,
                                    "nccl").time_ns)
             for name in ("NVIDIA H100 80GB HBM3", "h100")]
    assert times[0] == times[1]
