"""Build ``workloads/resnet50_dp.txt``: ResNet-50 data-parallel training in ASTRA-sim's text format.

    python scripts/make_resnet50_workload.py [--batch 32] [--peak-tflops 120] [--efficiency 0.5]
                                             [--memory-tbps 1.5] [--output PATH]

The model is torchvision's ``resnet50`` at 224x224: ``conv1`` (7x7, stride 2), a 3x3 max pool,
then four stages of bottleneck blocks (3, 4, 6, 3 blocks; widths 64, 128, 256, 512, expansion
4; the first block of stages 2-4 has stride 2 on its 3x3 convolution), a 1x1 ``downsample``
convolution in the first block of every stage, global average pooling and ``fc`` (2048 ->
1000): 53 convolutions and one fully connected layer, one line each, in execution order
(a block's ``downsample`` after its ``conv3``).

Per layer, for a batch of ``b`` samples per NPU and ``e = 2`` bytes per element (fp16):

* a convolution with ``C_in`` input and ``C_out`` output channels, a ``k x k`` kernel and an
  output of ``H x W``: ``params = k*k*C_in*C_out + 2*C_out`` (the weights and the affine
  scale and shift of the batch norm after it; torchvision's convolutions have no bias),
  ``FLOPs = 2 * b * H * W * k*k*C_in*C_out``;
* ``fc``: ``params = 2048*1000 + 1000``, ``FLOPs = 2 * b * 2048 * 1000``;
* bytes moved by a pass: ``e * (b*input_elements + params + b*output_elements)`` (read the
  input and the weights, write the output);
* forward, input-gradient and weight-gradient passes each do the forward's FLOPs and move its
  bytes (``dX = dY * W^T`` and ``dW = X^T * dY`` are GEMMs of the same shape); ``conv1`` has
  no input gradient (the image needs none), so its ``ig`` time is 0;
* the time of a pass is the roofline ``max(FLOPs / (peak * efficiency), bytes / (memory
  bandwidth * efficiency))`` (:class:`flowsim.workload.roofline.Roofline`), rounded to whole
  ns (cycles of ASTRA-sim's 1 GHz clock);
* the weight-gradient all-reduce is ``params * e`` bytes; forward and input-gradient passes
  communicate nothing (``DATA`` parallelism); the update delay is 0.

Parameters sum to torchvision's 25,557,032; FLOPs to 2 x 4.09 GMACs per sample forward.
Pooling, batch-norm and activation compute is left out (a few percent of the time).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from flowsim._io import write_text_atomic
from flowsim.workload.roofline import Roofline

OUTPUT = Path(__file__).resolve().parent.parent / "workloads" / "resnet50_dp.txt"
#: (blocks, width) of the four stages; a bottleneck's output is 4 x width channels.
STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))
EXPANSION = 4


@dataclass(frozen=True)
class Layer:
    """One layer for one sample: parameters, FLOPs and activation elements in and out."""

    name: str
    params: int
    flops: int
    input_elements: int
    output_elements: int


def conv(name: str, c_in: int, c_out: int, k: int, stride: int, size_in: int
         ) -> tuple[Layer, int]:
    """A k x k convolution (padding k // 2) and its batch norm; returns it and the output
    side length."""
    size_out = (size_in + 2 * (k // 2) - k) // stride + 1
    weights = k * k * c_in * c_out
    layer = Layer(name, weights + 2 * c_out, 2 * weights * size_out * size_out,
                  c_in * size_in * size_in, c_out * size_out * size_out)
    return layer, size_out


def resnet50_layers(image: int = 224, classes: int = 1000) -> list[Layer]:
    """torchvision's ResNet-50 (v1.5: stride on the 3x3 convolution) in execution order."""
    layers = []
    first, size = conv("conv1", 3, 64, 7, 2, image)
    layers.append(first)
    size = (size + 2 - 3) // 2 + 1  # 3x3 max pool, stride 2, padding 1
    channels = 64
    for s, (blocks, width) in enumerate(STAGES, start=1):
        for b in range(blocks):
            stride = 2 if b == 0 and s > 1 else 1
            name = f"layer{s}.{b}"
            c1, _ = conv(f"{name}.conv1", channels, width, 1, 1, size)
            c2, size_out = conv(f"{name}.conv2", width, width, 3, stride, size)
            c3, _ = conv(f"{name}.conv3", width, width * EXPANSION, 1, 1, size_out)
            layers += [c1, c2, c3]
            if b == 0:
                down, _ = conv(f"{name}.downsample", channels, width * EXPANSION, 1, stride,
                               size)
                layers.append(down)
            channels, size = width * EXPANSION, size_out
    layers.append(Layer("fc", channels * classes + classes, 2 * channels * classes, channels,
                        classes))
    return layers


def workload_text(layers: list[Layer], roofline: Roofline, batch: int,
                  bytes_per_element: int = 2) -> str:
    """The ``DATA`` text workload of ``layers`` (see the module docstring)."""
    lines = ["DATA", str(len(layers))]
    for k, layer in enumerate(layers):
        moved = bytes_per_element * (batch * (layer.input_elements + layer.output_elements)
                                     + layer.params)
        time = max(1, round(roofline.time_ns(batch * layer.flops, moved)))
        ig_time = 0 if k == 0 else time
        grad_bytes = layer.params * bytes_per_element
        lines.append(f"{layer.name} -1 {time} NONE 0 {ig_time} NONE 0 {time} ALLREDUCE "
                     f"{grad_bytes} 0")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="samples per NPU")
    parser.add_argument("--peak-tflops", type=float, default=120.0)
    parser.add_argument("--efficiency", type=float, default=0.5)
    parser.add_argument("--memory-tbps", type=float, default=1.5,
                        help="memory bandwidth in TB/s (1e12 B/s)")
    parser.add_argument("--bytes-per-element", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    roofline = Roofline(args.peak_tflops * 1e12, args.memory_tbps * 1e12, args.efficiency)
    layers = resnet50_layers()
    text = workload_text(layers, roofline, args.batch, args.bytes_per_element)
    write_text_atomic(args.output, text)
    convs = sum(1 for x in layers if x.name != "fc")
    params = sum(x.params for x in layers)
    flops = sum(x.flops for x in layers) * args.batch
    compute = sum(float(line.split()[2]) + float(line.split()[5]) + float(line.split()[8])
                  for line in text.splitlines()[2:])
    print(f"{args.output}: {convs} convolutions + fc, {params:,} parameters "
          f"({params * args.bytes_per_element / 2**20:.1f} MiB of gradients), "
          f"{flops / 1e9:.1f} GFLOP forward per NPU (batch {args.batch}), "
          f"compute {compute / 1e6:.3f} ms per iteration")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
