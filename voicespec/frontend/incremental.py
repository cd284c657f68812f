"""Text that arrives while it is spoken: where a streamed-in buffer may be cut into sentences.

The cut must be exactly where the front end would split the whole text, so a sentence that is
synthesized before the rest has arrived sounds as it would have in one piece.
"""

from __future__ import annotations

import re

from voicespec.frontend.text import TextError, normalize, sanitize

_END_CANDIDATE = re.compile(r"[.!?;:]\s+(?=\S)")
_ENDS_SENTENCE = re.compile(r"[.!?;:]$")


def _is_boundary(before: str, after: str) -> bool:
    """Whether the front end, reading ``before + after``, ends a sentence between the two."""
    try:
        joined, tail = normalize(sanitize(before + after)), normalize(sanitize(after))
    except TextError:
        return False
    if not joined.endswith(tail):
        return False
    return bool(_ENDS_SENTENCE.search(joined[: len(joined) - len(tail)].rstrip()))


def complete_prefix(buffer: str, window: int = 80, start: int = 0) -> tuple[int, int]:
    """``(cut, settled)``: ``cut`` is the length of the longest prefix of streamed-in ``buffer``
    made of finished sentences (0: none), looking only at sentence ends from offset ``start`` on;
    ``settled`` is an offset before which no sentence end can appear or change its verdict as more
    text arrives — pass it as ``start`` next time (after a cut, relative to the rest: 0). So text
    that arrives a piece at a time is examined a bounded number of times, linear in its length.

    A sentence is finished where end punctuation and whitespace are followed by the start of the
    next word *and* the front end agrees: "Dr. Smith" reads "doctor smith" and "No. 5" reads
    "number five", so neither ends there. Waiting for the next word is what makes the split the
    same as the front end's split of the whole text; ``flush``/``end`` release the rest. Only
    ``window`` characters before a candidate are normalized."""
    candidates = list(_END_CANDIDATE.finditer(buffer, start))
    # A new candidate can only begin at punctuation followed by nothing but whitespace so far.
    settled = max(start, len(buffer.rstrip()) - 1)
    for m in reversed(candidates):
        after, *rest = buffer[m.end():].split(None, 1)
        if _is_boundary(buffer[max(0, m.start() - window): m.end()], after):
            return m.end(), 0
        if not rest:  # the next word may still grow ("Dr. Sm" -> "Dr. Smith"): look again next time
            settled = min(settled, m.start())
    return 0, settled
