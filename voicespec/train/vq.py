"""Fixes for two training pitfalls of ``encodec`` 0.1.1's ``EuclideanCodebook``.

1. Dead codes never come back. ``expire_codes_`` overwrites a dead code's ``embed`` with a batch
   vector, but later in the same forward the EMA step recomputes ``embed = embed_avg /
   cluster_size`` from the *old* statistics, so the replacement is lost. We reset the code's
   ``embed_avg`` and ``cluster_size`` too, so the EMA step reproduces the replacement.
2. k-means init is very slow: it materialises an ``[N, C, D]`` difference tensor per iteration.
   We compute the same assignments from ``|x|² - 2x·c + |c|²`` with one matmul.

Applied by swapping the class of existing codebook modules (``patch_codebooks``): weights,
buffers and checkpoints are unchanged, inference is untouched.
"""

from __future__ import annotations

import torch
from encodec.quantization.core_vq import EuclideanCodebook, sample_vectors
from torch import nn


def kmeans(samples: torch.Tensor, num_clusters: int, num_iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means with matmul distances; empty clusters keep their previous mean."""
    means = sample_vectors(samples, num_clusters)
    bins = torch.zeros(num_clusters, dtype=torch.long, device=samples.device)
    sq = samples.pow(2).sum(1, keepdim=True)
    for _ in range(num_iters):
        dists = sq - 2 * samples @ means.t() + means.pow(2).sum(1)
        buckets = dists.argmin(dim=1)
        bins = torch.bincount(buckets, minlength=num_clusters)
        sums = torch.zeros_like(means).index_add_(0, buckets, samples)
        new_means = sums / bins.clamp_min(1).unsqueeze(1).to(samples.dtype)
        means = torch.where((bins == 0).unsqueeze(1), means, new_means)
    return means, bins


class FixedEuclideanCodebook(EuclideanCodebook):
    @torch.jit.ignore
    def init_embed_(self, data: torch.Tensor) -> None:
        if self.inited:
            return
        embed, cluster_size = kmeans(data, self.codebook_size, self.kmeans_iters)
        self.embed.data.copy_(embed)
        self.embed_avg.data.copy_(embed.clone())
        self.cluster_size.data.copy_(cluster_size)
        self.inited.data.copy_(torch.Tensor([True]))

    def expire_codes_(self, batch_samples: torch.Tensor) -> None:
        if self.threshold_ema_dead_code == 0:
            return
        expired = self.cluster_size < self.threshold_ema_dead_code
        if not torch.any(expired):
            return
        samples = batch_samples.reshape(-1, batch_samples.shape[-1])
        fresh = sample_vectors(samples, self.codebook_size)
        mask = expired.unsqueeze(1)
        weight = float(self.threshold_ema_dead_code)
        # Give the new code the statistics of a code used `threshold` times at that vector, so the
        # EMA normalisation that follows maps it back to the vector instead of the old code.
        self.embed.data.copy_(torch.where(mask, fresh, self.embed))
        self.embed_avg.data.copy_(torch.where(mask, fresh * weight, self.embed_avg))
        self.cluster_size.data.copy_(torch.where(expired, torch.full_like(self.cluster_size, weight), self.cluster_size))


def patch_codebooks(model: nn.Module) -> int:
    """Switch every ``EuclideanCodebook`` in ``model`` to the fixed class; returns how many."""
    n = 0
    for module in model.modules():
        if type(module) is EuclideanCodebook:
            module.__class__ = FixedEuclideanCodebook
            n += 1
    return n
