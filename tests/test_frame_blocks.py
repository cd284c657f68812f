"""The block arithmetic the codec's stream and the engine's fine stage share."""

from __future__ import annotations

import itertools

import pytest

from voicespec.frame_blocks import FrameBlocks


def _ends(blocks: FrameBlocks, n: int) -> list[int]:
    return list(itertools.accumulate(blocks.size(i) for i in range(n)))


def test_blocks_double_from_the_first_to_the_largest():
    assert [FrameBlocks(2, 8).size(i) for i in range(6)] == [2, 4, 8, 8, 8, 8]
    assert [FrameBlocks(3, 5).size(i) for i in range(4)] == [3, 5, 5, 5]
    assert [FrameBlocks(2).size(i) for i in range(3)] == [2, 2, 2] == [FrameBlocks(2, 2).size(i) for i in range(3)]
    assert FrameBlocks(1, 16).size(10**6) == 16


@pytest.mark.parametrize("blocks", [FrameBlocks(), FrameBlocks(2), FrameBlocks(2, 8), FrameBlocks(3, 5), FrameBlocks(1, 16)])
def test_next_end_is_the_first_block_end_past_a_count(blocks):
    ends = _ends(blocks, 40)
    for frames in range(ends[-2]):
        assert blocks.next_end(frames) == next(e for e in ends if e > frames), frames


@pytest.mark.parametrize("first,most", [(0, None), (-1, 4), (2, 1), (1.5, None), (True, None), (2, 4.0)])
def test_bad_sizes_are_refused(first, most):
    with pytest.raises(ValueError, match="block"):
        FrameBlocks(first, most)
