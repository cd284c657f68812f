"""The WebSocket door's contexts: a connection's open contexts by id, and what its ``text``,
``flush``, ``end`` and ``cancel`` messages do to them, within the connection's limits (contexts at
a time, characters per context and per second). Each is the session core's
:class:`~voicespec.serve.context.Context` with the numbering and encoder of its audio frames."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from voicespec.frontend.lexicon import LexiconError
from voicespec.frontend.ssml import SSMLError, is_ssml
from voicespec.frontend.text import TextError
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve import protocol as P
from voicespec.serve.context import Context, TextTooLong
from voicespec.serve.encoders import make_encoder
from voicespec.serve.limits import Bucket
from voicespec.serve.outbox import Out
from voicespec.serve.ws_start import context_options

if TYPE_CHECKING:
    from voicespec.serve.session import Session


class WsContext(Context):
    """A WebSocket context: its id, and the numbering and encoder of its audio frames."""

    def __init__(self, cid: str, session: Session, voice: Voice, options: SynthesisOptions) -> None:
        st = session.started
        super().__init__(session.worker, session.metrics, voice, options, credits=session.credits, owner=session,
                         lexicon=st.msg.lexicon, pacing_lead_s=st.pacing_lead_s,
                         text_reader=session.text_reader)
        self.id = cid
        self.chars = 0  # all text received
        self.seq = 0
        self.transport, self.encoding = st.msg.audio_transport, st.msg.encoding
        self.encoder = make_encoder(self.encoding, st.options.sample_rate)  # stateful for opus

    def frame(self, pcm: torch.Tensor | None) -> str | bytes | None:
        """One chunk of audio as it goes out (None: the encoder's tail, at the end; returns None
        while the encoder has nothing whole yet: opus pages)."""
        payload = self.encoder.encode(pcm) if pcm is not None else self.encoder.finish()
        self.samples += 0 if pcm is None else pcm.numel()
        if not payload:
            return None
        if self.transport == "binary":
            data: str | bytes = P.encode_frame(self.id, self.seq, payload, self.encoding)
        else:
            data = P.audio_message(self.id, self.seq, payload, self.encoding)
        self.seq += 1
        return data

    def done_message(self) -> str:
        return P.message("done", context_id=self.id, stats=self.done_stats())


@contextlib.contextmanager
def _text_errors(ctx: WsContext) -> Iterator[None]:
    """The client's text refused as the protocol says it (the context goes on unless it finished)."""
    try:
        yield
    except TextTooLong as e:
        raise P.ProtocolError(P.TEXT_TOO_LONG, str(e), ctx.id, context_ended=ctx.finished) from None
    except (SSMLError, LexiconError) as e:  # the client's markup or pronunciations: said, not skipped
        raise P.ProtocolError(P.BAD_TEXT, str(e), ctx.id, context_ended=ctx.finished) from None


class Contexts:
    """One connection's contexts (on the event loop). Errors are raised as
    :class:`~voicespec.serve.protocol.ProtocolError` for the session to send."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.cfg = session.cfg
        self.by_id: dict[str, WsContext] = {}
        self.text_chars = Bucket(self.cfg.max_text_chars_per_s, 2 * self.cfg.max_text_chars_per_s)

    def get(self, cid: str) -> WsContext | None:
        return self.by_id.get(cid)

    def _open(self, msg: P.Text) -> WsContext:
        """A context for a first text (its options checked first: a refused first text leaves
        nothing behind)."""
        s, cid = self.session, msg.context_id
        voice, options = context_options(s.started, s.voices, self.cfg, msg)
        if len(self.by_id) >= self.cfg.max_contexts_per_session:
            raise P.ProtocolError(P.TOO_MANY_CONTEXTS, f"at most {self.cfg.max_contexts_per_session} contexts "
                                  "may be active on one connection; end or cancel one first", cid)
        ctx = self.by_id[cid] = WsContext(cid, s, voice, options)
        ctx.on_finished = self._forget
        return ctx

    def _forget(self, ctx: Context) -> None:
        if self.by_id.get(ctx.id) is ctx:
            del self.by_id[ctx.id]

    async def text(self, msg: P.Text) -> None:
        cid = msg.context_id
        ctx = self.by_id.get(cid)
        if ctx is not None and msg.options:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has begun: its options ({', '.join(msg.options)}) "
                                  "go on its first text message", cid)
        if ctx is None:
            ctx = self._open(msg)
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has ended; use a new context_id", cid)
        if not self.text_chars.take(len(msg.text)):
            self.session.reject(P.RATE_LIMITED, f"more than {self.cfg.max_text_chars_per_s:g} characters of text "
                                "per second; closing", P.CLOSE_RATE_LIMITED)
            return
        limit = self.cfg.max_text_chars
        if ctx.chars + len(msg.text) > limit:
            raise P.ProtocolError(P.TEXT_TOO_LONG, f"text rejected: the context would have {ctx.chars + len(msg.text)} "
                                  f"characters; the limit is {limit}", cid)
        with _text_errors(ctx):
            if msg.ssml or is_ssml(msg.text):  # one whole document: the text before it is spoken first, whole
                await ctx.add_markup(msg.text)
            else:
                await ctx.add(msg.text)
        ctx.chars += len(msg.text)

    async def flush(self, msg: P.Flush) -> None:
        ctx = self.by_id.get(msg.context_id)
        if ctx is not None:
            with _text_errors(ctx):
                if await ctx.flush(msg.flush_id):
                    return  # acknowledged when the audio before it has been made
        self.session.put(Out("msg", ctx, P.message("flushed", context_id=msg.context_id, flush_id=msg.flush_id)))

    async def end(self, msg: P.End) -> None:
        cid = msg.context_id
        ctx = self.by_id.get(cid)
        if ctx is None:
            # context_ended: no `done` will come for it (its text never began one, or was rejected)
            raise P.ProtocolError(P.UNKNOWN_CONTEXT, f"no active context {cid!r} (send 'text' first)", cid,
                                  context_ended=True)
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has already ended", cid)
        try:
            with _text_errors(ctx):
                await ctx.end()
        except TextError as e:  # nothing in it was speakable: it has finished
            raise P.ProtocolError(P.BAD_TEXT, str(e), cid, context_ended=True) from None

    def cancel(self, cid: str) -> None:
        ctx = self.by_id.get(cid)
        if ctx is not None:
            ctx.cancel("cancelled")
        self.session.put(Out("msg", None, P.message("cancelled", context_id=cid)))

    def busy(self) -> bool:
        """Audio is being made (a context waiting for more text does not count)."""
        return any(c.job is not None and not c.job.finished and c.job.starved_at != c.job.input_version
                   for c in self.by_id.values())

    def close(self, reason: str) -> None:
        """Stop every context (the worker drops them within one step)."""
        for ctx in list(self.by_id.values()):
            ctx.cancel(reason)
