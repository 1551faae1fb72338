"""Synthetic models that isolate one property of an operator graph.

branchy  blocks of parallel branches of different widths and costs, diamonds, concatenations
chain    no parallelism at all: every operator depends on the one before
inplace  in-place writes and views that cross branches; dependency tracking is proven on it
recurrent  fused recurrent layers (aten::lstm, aten::gru), whose weights travel as one tensor list
"""

import torch
from torch import nn


class BranchyBlock(nn.Module):
    """Four branches of very different cost, a diamond, then a concatenation."""

    def __init__(self, channels: int):
        super().__init__()
        quarter = channels // 4
        self.thin = nn.Conv2d(channels, quarter, 1)
        self.deep = nn.Sequential(
            nn.Conv2d(channels, quarter, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(quarter, quarter, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(quarter, quarter, 3, padding=1),
        )
        self.pooled = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), nn.Conv2d(channels, quarter, 1))
        self.wide = nn.Conv2d(channels, quarter, 5, padding=2)

    def forward(self, x):
        shared = torch.relu(x)
        # diamond: two cheap element-wise branches that meet again
        left = shared * 0.5
        right = torch.sigmoid(shared)
        merged = left + right
        branches = [self.thin(merged), self.deep(x), self.pooled(merged), self.wide(x)]
        return torch.cat(branches, dim=1) + x


class Branchy(nn.Module):
    def __init__(self, channels: int = 32, blocks: int = 3, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.Sequential(*[BranchyBlock(channels) for _ in range(blocks)])
        self.head = nn.Linear(channels, classes)
        self.side = nn.Linear(channels, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        pooled = y.mean(dim=(2, 3))
        # two heads that only meet at the end
        return self.head(pooled) + self.side(torch.tanh(pooled))


class Recurrent(nn.Module):
    """A two-layer LSTM and a bidirectional GRU read the same sequence side by side; their last
    steps meet in one head. Exported, each layer is one node whose weights are a list argument."""

    def __init__(self, features: int = 32, hidden: int = 48, classes: int = 10):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.gru = nn.GRU(features, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(3 * hidden, classes)

    def forward(self, x):
        forward_states, _ = self.lstm(x)
        both_ways, _ = self.gru(x)
        return self.head(torch.cat([forward_states[:, -1], both_ways[:, -1]], dim=1))


class Chain(nn.Module):
    def __init__(self, channels: int = 32, depth: int = 8, classes: int = 10):
        super().__init__()
        layers = [nn.Conv2d(3, channels, 3, padding=1)]
        for _ in range(depth):
            layers += [nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.body(x), 1), 1))


class Inplace(nn.Module):
    """Every hazard a def-use graph misses: read-before-write, write-after-write, views of a
    tensor that another branch later writes, and slice assignment."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv_a = nn.Conv2d(3, channels, 3, padding=1)
        self.conv_b = nn.Conv2d(3, channels, 3, padding=1)
        self.conv_c = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        a = self.conv_a(x)
        b = self.conv_b(x)
        flat = a.view(a.shape[0], a.shape[1], -1)  # view of a, read after a is written
        turned = a.transpose(2, 3)  # another view of a
        before = turned * 2.0  # must read a before relu_ writes it
        before_sum = flat.sum(dim=-1)  # likewise, through the other view
        a.relu_()  # in-place write seen through both views
        after_sum = flat.sum(dim=-1)  # must see the write
        b.add_(a)  # b reads a, writes b
        b[:, :2] = before[:, :2].transpose(2, 3)  # slice assignment into b
        c = self.conv_c(b)
        c.mul_(0.5)  # write-after-write on a fresh value
        turned.neg_()  # writes a again through a view, after b read it
        return c + a.sum(), after_sum - before_sum
