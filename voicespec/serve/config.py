"""The server's operator settings, apart from the server, so the CLI and benchmarks can build one
(and validate it) without starting anything."""

from __future__ import annotations

from dataclasses import dataclass

from voicespec.engine.config import DecodeConfig
from voicespec.options import check_device, check_dtype
from voicespec.threads import DEFAULT_THREADS, check_threads
from voicespec.serve.protocol import DEFAULT_PORT

OPENAI_PORT = 8766  # `voicespec serve`'s OpenAI-compatible door, beside the WebSocket port (8765)
WYOMING_PORT = 10200  # Wyoming's usual TTS port (wyoming-piper's)


@dataclass(frozen=True)
class ServerConfig:
    """Everything an operator sets; per-session choices (rate, sampling, ...) come in ``start``."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port (see TTSServer.port)
    voice: str | None = None  # the default voice: a folder or a name (None: the package's default voice)
    voices: tuple[str, ...] | None = None  # other voices clients may name, loaded on first use (None: every installed one)
    drafter: str | None = None  # default drafter (None: the voice's)
    gamma: int | str = "auto"  # default draft length
    max_gamma: int = 16  # the longest fixed draft a session may ask for
    max_steps: int = 2000  # per sentence (the voice's own runaway guard also applies)
    seed: int | None = None  # of requests that name none (None: fresh randomness for each; Wyoming names none)
    max_sessions: int = 16
    max_contexts_per_session: int = 8
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()  # browser origins besides the page this server serves; "*": any
    max_message_bytes: int = 65536  # larger client messages close the socket with 1009
    max_text_chars: int = 5000  # per context, all its text together
    inactivity_timeout_s: float = 60.0  # idle sockets (no message, nothing being synthesized) are closed
    start_timeout_s: float = 10.0  # a socket that has not sent `start` by then is closed
    max_messages_per_s: float = 200.0  # per connection, sustained (a bucket of twice this absorbs bursts)
    max_text_chars_per_s: float = 20_000.0  # per connection, all contexts' text, sustained (bucket: twice)
    max_sessions_per_address: int | None = None  # sessions one client address may hold (None: no limit)
    stalled_send_timeout_s: float = 10.0  # a connection whose send has not progressed this long is closed
    ping_interval_s: float | None = 20.0
    ping_timeout_s: float | None = 20.0
    send_queue_chunks: int = 32  # audio chunks in flight per connection before its contexts pause
    max_tick_contexts: int | None = 16  # contexts one decode tick steps, shared fairly between connections (None: all)
    max_tick_prefill: int | None = 1  # prompts one tick prefills while more contexts are ready than it steps (None: all)
    text_processes: int = 1  # worker processes that read served text (serve/text_reader.py); 0: threads of this one
    # Contexts decoding at once (scheduler.hold_newcomers): past it a new context waits for one to
    # end, so the streams already playing keep real time. None: every newcomer starts at once.
    max_decoding_contexts: int | None = None
    # With it: new sessions and requests are refused (1013 / HTTP 429 / a Wyoming error) while this
    # many contexts wait for a place, so a balancer sends them elsewhere. None: they all wait.
    max_waiting_contexts: int | None = None
    max_spec_contexts: int | None = 4  # speculation while a tick steps at most this many contexts; past it plain (None: always)
    send_buffer_bytes: int | None = None  # kernel send buffer per socket (None: the OS's autotuning, up to MBs)
    pacing_lead_s: float | None = None  # default pacing: stay this far ahead of real time (None: no pacing)
    frame_cache_mb: float = 64.0  # decoded sentences replayed when repeated (pipeline/frame_cache.py); 0: off
    device: str = "auto"  # where a voice the server loads runs (options.DEVICE_HELP)
    dtype: str = "float32"  # its LM's weights and KV cache (options.DTYPES)
    threads: int = DEFAULT_THREADS  # torch intra-op threads of the process the server runs in (voicespec.threads)
    openai_port: int | None = None  # the OpenAI-compatible HTTP door (openai_http.py) on this port; 0: any free one
    wyoming_port: int | None = None  # the Wyoming door (wyoming_door.py, Home Assistant) on this port; 0: any free one

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_contexts_per_session", "max_message_bytes", "max_text_chars",
                     "send_queue_chunks", "max_steps", "max_gamma"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.frame_cache_mb >= 0:
            raise ValueError(f"frame_cache_mb must be >= 0, got {self.frame_cache_mb}")
        for name in ("inactivity_timeout_s", "start_timeout_s", "max_messages_per_s", "max_text_chars_per_s",
                     "stalled_send_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_tick_contexts", "max_tick_prefill", "max_decoding_contexts"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (or None), got {getattr(self, name)}")
        if self.max_waiting_contexts is not None:
            if self.max_waiting_contexts < 0:
                raise ValueError(f"max_waiting_contexts must be >= 0 (or None), got {self.max_waiting_contexts}")
            if self.max_decoding_contexts is None:
                raise ValueError("max_waiting_contexts needs max_decoding_contexts (without it no context waits)")
        if self.text_processes < 0:
            raise ValueError(f"text_processes must be >= 0, got {self.text_processes}")
        if self.max_spec_contexts is not None and self.max_spec_contexts < 0:
            raise ValueError(f"max_spec_contexts must be >= 0 (or None), got {self.max_spec_contexts}")
        if self.max_sessions_per_address is not None and self.max_sessions_per_address < 1:
            raise ValueError(f"max_sessions_per_address must be >= 1, got {self.max_sessions_per_address}")
        if self.pacing_lead_s is not None and self.pacing_lead_s <= 0:
            raise ValueError("pacing_lead_s must be > 0 (or None for no pacing)")
        DecodeConfig(gamma=self.gamma, seed=self.seed)  # validates gamma and the seed
        check_device(self.device)
        check_dtype(self.dtype)
        check_threads(self.threads)
        for name in ("openai_port", "wyoming_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name} must be in [0, 65535] (or None: off), got {port}")
