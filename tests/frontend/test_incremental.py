"""Sentence release for streamed text: ``complete_prefix`` releases exactly what the front end
would split off as whole sentences."""

from __future__ import annotations

import pytest

from voicespec.frontend.incremental import complete_prefix


@pytest.mark.parametrize(
    "buffer,released",
    [
        ("Hello there. Second", "Hello there. "),
        ("Hello there. ", ""),  # the next word has not started: "there." may yet be "there.5"
        ("Hello there.", ""),
        ("A? B! C; D: e", "A? B! C; D: "),
        ("Dr. Smith is here. And", "Dr. Smith is here. "),  # "Dr." is not a sentence end
        ("Pay No. 5 now. Ok", "Pay No. 5 now. "),  # "No. 5" is "number five"
        ("At 5 p.m. Then", "At 5 p.m. "),
        ("at 5 p.m. then", ""),  # lower case after "p.m.": the front end keeps one sentence
        ("e.g. this", ""),
        ("It cost $3. 50 more", "It cost $3. "),
        ("", ""),
    ],
)
def test_complete_prefix_releases_what_the_front_end_would_split(buffer, released):
    assert buffer[: complete_prefix(buffer)[0]] == released


def test_complete_prefix_agrees_with_the_front_end_on_whole_text():
    """Releasing sentences as text streams in gives the front end's split of the whole text."""
    from voicespec.frontend.text import FrontEnd

    fe = FrontEnd()
    text = "Dr. Smith paid $3.50 on May 5th. It is 7:30 a.m. Then No. 5 left! Did it? Yes; quite: so."
    for step in (1, 3, 7):
        buffer, got, settled = "", [], 0
        for i in range(0, len(text), step):
            buffer += text[i: i + step]
            n, settled = complete_prefix(buffer, start=settled)
            if n:
                got += [s for s, _ in fe.sentences(buffer[:n])]
                buffer = buffer[n:]
        got += [s for s, _ in fe.sentences(buffer)]
        assert got == [s for s, _ in fe.sentences(text)]


def test_streamed_text_is_examined_a_bounded_number_of_times(monkeypatch):
    """600 pieces of "Dr. " (no sentence ever ends): with the settled offset carried, each
    candidate is normalized a few times at most, not once per piece (issue 17, defect 6)."""
    import voicespec.frontend.incremental as inc

    calls = []
    real = inc._is_boundary
    monkeypatch.setattr(inc, "_is_boundary", lambda before, after: calls.append(1) or real(before, after))
    buffer, settled = "", 0
    for _ in range(600):
        buffer += "Dr. "
        n, settled = complete_prefix(buffer, start=settled)
        assert n == 0
    assert len(calls) <= 2 * 600  # was 600 * 601 / 2 = 180,300 without the offset

