"""The quantizer fixes the codec recipe trains with: dead codes revived, a fast k-means that
matches encodec's, and every codebook of a model switched over."""

from __future__ import annotations

import torch
from encodec.quantization.core_vq import EuclideanCodebook
from encodec.quantization.core_vq import kmeans as encodec_kmeans

from voicespec.codec.config import CodecConfig

from voicespec.codec.model import Codec
from voicespec.train.vq import FixedEuclideanCodebook, kmeans, patch_codebooks


def _dead_codebook(cls):
    """A trained-looking codebook whose codes 4.. have never been used (cluster size 0)."""
    torch.manual_seed(0)
    cb = EuclideanCodebook(dim=4, codebook_size=8, kmeans_init=False, threshold_ema_dead_code=2)
    cb.__class__ = cls
    cb.embed.data[:4] = torch.eye(4)
    cb.embed.data[4:] = 100.0  # far away from any data: never chosen
    cb.embed_avg.data.copy_(cb.embed * 10)
    cb.cluster_size.data[:4] = 10.0
    cb.cluster_size.data[4:] = 0.0
    return cb.train()


def test_dead_codes_are_revived_by_the_fix_and_not_by_encodec():
    data = torch.randn(1, 256, 4)
    broken = _dead_codebook(EuclideanCodebook)
    broken(data)
    assert (broken.embed[4:] > 50).all(), "encodec 0.1.1 loses the replacement (the bug this fixes)"

    fixed = _dead_codebook(FixedEuclideanCodebook)
    fixed(data)
    revived = fixed.embed[4:]
    assert (revived.abs() < 10).all()
    # Each revived code is one of the batch vectors, and it is used on the next batch.
    dists = torch.cdist(revived, data[0]).min(dim=1).values
    assert (dists < 1e-2).all()  # up to the EMA's Laplace smoothing
    _, used = fixed(data)
    assert int((used >= 4).sum()) > 0


def test_fast_kmeans_matches_encodec_kmeans():
    samples = torch.randn(500, 8)
    torch.manual_seed(1)
    ours, our_bins = kmeans(samples, 16, 5)
    torch.manual_seed(1)
    theirs, their_bins = encodec_kmeans(samples, 16, 5)
    assert torch.allclose(ours, theirs, atol=1e-5) and torch.equal(our_bins, their_bins)


def test_patch_codebooks_switches_every_codebook():
    codec = Codec.random(CodecConfig(n_filters=4, ratios=(4, 2), dimension=8, lstm=0, n_q=3, n_codebooks=2, codebook_size=16))
    assert patch_codebooks(codec.model) == 3
    assert all(type(m) is not EuclideanCodebook for m in codec.model.modules())

