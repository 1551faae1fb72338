"""Synthetic models where CPU overflow matters (issue 6).

detect         a small detection network: conv backbone, box and score heads, non-maximum
               suppression (data-dependent: nonzero, so a host step), then more GPU work on the
               kept boxes
multihead_rnn  an encoder followed by many small independent LSTM heads (DUET's MT-DNN case): each
               head is tiny, several launches long on the GPU, cheap on the CPU
"""

import torch
from torch import nn


def box_iou(a, b):
    """Pairwise IoU of boxes (x1, y1, x2, y2)."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def fast_nms(boxes, scores, threshold: float):
    """Indices of the boxes kept by non-maximum suppression, best first.

    YOLACT's Fast NMS (a box goes when any better-scoring box overlaps it by more than
    `threshold`) rather than torchvision.ops.nms: the same data-dependent result shape (nonzero),
    made of ATen ops alone, so LibTorch loads the model without torchvision's C++ library.
    """
    order = scores.argsort(descending=True)
    ranked = boxes[order]
    overlap = box_iou(ranked, ranked).triu(diagonal=1)
    keep = overlap.max(dim=0).values <= threshold
    return order[keep.nonzero().squeeze(1)]


class Detect(nn.Module):
    def __init__(self, channels: int = 32, anchors: int = 3, classes: int = 8, keep: int = 16):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
        )
        self.anchors = anchors
        self.box_head = nn.Conv2d(channels, anchors * 4, 1)
        self.score_head = nn.Conv2d(channels, anchors, 1)
        self.keep = keep
        self.roi = nn.Sequential(nn.Linear(4 + channels, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x):
        features = self.backbone(x)[0]  # one image
        channels, height, width = features.shape
        deltas = self.box_head(features[None])[0].reshape(self.anchors, 4, height * width).permute(0, 2, 1)
        centres = torch.stack(torch.meshgrid(torch.arange(height, dtype=x.dtype, device=x.device),
                                             torch.arange(width, dtype=x.dtype, device=x.device),
                                             indexing="ij"), dim=-1).reshape(1, -1, 2)
        sizes = torch.sigmoid(deltas[..., 2:]) * 4 + 1
        centre = centres + torch.tanh(deltas[..., :2])
        boxes = torch.cat([centre - sizes / 2, centre + sizes / 2], dim=-1).reshape(-1, 4)
        scores = torch.sigmoid(self.score_head(features[None])).reshape(-1)
        kept = fast_nms(boxes, scores, 0.5)[: self.keep]
        # More GPU work on the kept boxes: their features at the box centres, a small classifier.
        flat = features.reshape(channels, height * width).t()
        cell = kept % (height * width)
        logits = self.roi(torch.cat([boxes[kept], flat[cell]], dim=1))
        return boxes[kept], scores[kept], logits


class MultiheadRnn(nn.Module):
    def __init__(self, features: int = 32, hidden: int = 64, heads: int = 8, head_hidden: int = 16, outputs: int = 4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        # LSTM cells unrolled over time: small per-step ops are the CPU-friendly case (a fused
        # nn.LSTM is one node; the recurrent model in synthetic.py has those).
        self.head_hidden = head_hidden
        self.rnns = nn.ModuleList(nn.LSTMCell(hidden, head_hidden) for _ in range(heads))
        self.outs = nn.ModuleList(nn.Linear(head_hidden, outputs) for _ in range(heads))

    def forward(self, x):
        encoded = self.encoder(x)
        results = []
        zeros = encoded.new_zeros(encoded.shape[0], self.head_hidden)
        for rnn, out in zip(self.rnns, self.outs):
            state = (zeros, zeros)
            for step in range(encoded.shape[1]):
                state = rnn(encoded[:, step], state)
            results.append(out(state[0]))
        return torch.stack(results, dim=1)
