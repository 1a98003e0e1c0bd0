"""torch.nn modules holding tensors every way a module can, for the readers of whole modules (pickled models,
TorchScript archives), whose oracles are the loaded module's state_dict(). Not collected by pytest (no test_ prefix).
The tests pickle and script these classes by this module's name; ckptstat never imports them."""
from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """A parameter set to None (bias=False), a non-persistent buffer, a buffer registered as None, a plain tensor
    attribute (in no state_dict), ParameterList / ParameterDict, a dict attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4, bias=False)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("mask", torch.tril(torch.ones(3, 3)), persistent=False)
        self.register_buffer("scale", torch.full((4,), 0.5))
        self.register_buffer("unset", None)
        self.table = torch.arange(5.0)
        self.gains = nn.ParameterList([nn.Parameter(torch.randn(2)), nn.Parameter(torch.randn(3))])
        self.extra = nn.ParameterDict({"alpha": nn.Parameter(torch.randn(4))})
        self.act = nn.GELU()
        self.cfg = {"width": 4}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.fc(x))) * self.scale + self.table.sum() + self.mask.sum()


class Shared(nn.Module):
    """A weight tied between two modules and a submodule registered under two names (state_dict lists each name)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight
        proj = nn.Linear(4, 4)
        self.first, self.again = proj, proj

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.again(self.first(self.emb(ids))))
