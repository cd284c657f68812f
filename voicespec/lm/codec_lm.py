"""The codec LM for delay/parallel and coarse-first layouts, built from ``transformers`` parts.

A Llama backbone reads a text prefix (its own embedding) followed by codec steps, each step
embedded as the sum of K per-codebook embeddings; K linear heads predict the K tokens of the next
step. With ``track_positions > 0`` every step also carries a *frame-aligned text track* (the
character the predicted frame belongs to, the next one, and the frame's position inside its
character; :func:`voicespec.frontend.duration.frame_track`): the alignment is given, not learned by
attention, which a small model on a CPU budget cannot learn from minutes of speech.

With ``coarse_first`` the backbone reads and predicts codebook 0 only (one token per step, see
:class:`~voicespec.engine.layout.CoarseFirstLayout`) and a :class:`FineStage` adds codebooks 1..K-1 of
each verified frame from the backbone's hidden state — VALL-E's AR/NAR split made per frame so it
streams, with Moshi's depth stage as the model. Plain torch (the backbone is
:class:`~voicespec.lm.backbone.LlamaBackbone`, named as ``transformers``' Llama): ``save`` and
``from_folder`` give an HF-style folder (``config.json`` + ``model.safetensors`` or shards).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from voicespec.engine.config import SamplingConfig
from voicespec.engine.layout import CoarseFirstLayout, DelayLayout, Prompt
from voicespec.engine.sampling import choose_rows, draw_uniforms
from voicespec.engine.step_lm import LMSession
from voicespec.engine.work import Work, run_grouped
from voicespec.folders import FolderConfig
from voicespec.lm.backbone import BackboneConfig, LlamaBackbone
from voicespec.lm.llama import LlamaStack
from voicespec.weights import FolderModule


@dataclass
class CodecLMConfig(FolderConfig):
    TYPE: ClassVar[str] = "voicespec_codec_lm"
    WHAT: ClassVar[str] = "a voicespec codec LM"

    text_vocab_size: int = 256
    n_codebooks: int = 4
    codebook_size: int = 1024
    delays: list[int] | None = None  # default 0..K-1
    min_frames: int = 0
    track_positions: int = 0
    coarse_first: bool = False
    frames_per_step: int = 1  # coarse-first only: frames per backbone step (G; CoarseFirstLayout)
    fine_width: int = 256
    fine_stage: bool = True  # False: a coarse-first draft, which proposes codebook 0 only
    # False: the fine stage reads no codes of the previous frame, so the frames one verify pass
    # accepted are completed as one batch (their weights read once), not one after another.
    fine_reads_prev: bool = True
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None  # default: num_attention_heads
    intermediate_size: int | None = None  # default: 4 * hidden_size
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    initializer_range: float = 0.02
    voicespec_info: dict[str, Any] = field(default_factory=dict)  # provenance: recipe, data, metrics

    def __post_init__(self) -> None:
        self.delays = list(range(self.n_codebooks)) if self.delays is None else list(self.delays)
        self.num_key_value_heads = self.num_key_value_heads or self.num_attention_heads
        self.intermediate_size = self.intermediate_size or 4 * self.hidden_size
        if self.coarse_first and self.n_codebooks < 2:
            raise ValueError("a coarse-first model needs at least 2 codebooks (the fine stage makes codebooks 1..K-1)")
        if not (type(self.frames_per_step) is int and self.frames_per_step >= 1):
            raise ValueError(f"frames_per_step must be an integer >= 1, got {self.frames_per_step!r}")
        if self.frames_per_step != 1 and not self.coarse_first:
            raise ValueError("frames_per_step > 1 needs the coarse-first layout (its fine stage completes the step's frames)")

    @property
    def layout(self) -> DelayLayout | CoarseFirstLayout:
        if self.coarse_first:
            return CoarseFirstLayout(self.n_codebooks, self.codebook_size, self.min_frames, self.frames_per_step)
        return DelayLayout(self.n_codebooks, self.codebook_size, tuple(self.delays), self.min_frames)

    def backbone_config(self) -> BackboneConfig:
        return BackboneConfig(self.hidden_size, self.num_hidden_layers, self.num_attention_heads, self.num_key_value_heads,
                              self.intermediate_size, self.max_position_embeddings, self.rope_theta)


class FineStage(nn.Module):
    """Every code of a step's G frames but its first coarse code, from the backbone's hidden state
    ``h`` (the one that predicted that coarse code), that code, and (``reads_prev``) the previous
    frame's K codes: one small MLP per *slot* (slot ``s = f*K + k``: codebook k of the step's frame
    f; slot 0 is the backbone's token), each reading the codes of the slots before it (causal over
    slots, so sampling slot by slot is exact ancestral sampling of the trained factorization). With
    G = 1 the slots are codebooks 1..K-1 of one frame.

    Reading the previous frame chains the steps: a verify pass that accepted n steps runs the
    MLPs n times in a row, each time reading their weights, which at batch 1 is most of their cost.
    Without it the steps are independent given their states and coarse codes (the backbone's
    state already carries the history), and a pass's steps run as one batch.
    """

    def __init__(self, hidden: int, n_codebooks: int, codebook_size: int, width: int, reads_prev: bool = True,
                 frames_per_step: int = 1) -> None:
        super().__init__()
        self.K, self.C, self.G = n_codebooks, codebook_size, frames_per_step
        self.slots = frames_per_step * n_codebooks  # codes per step, the backbone's included
        self.reads_prev = reads_prev
        self.inp = nn.Linear(hidden, width)
        self.codes = nn.Embedding(max(self.slots - 1, 1) * codebook_size, width)  # slots 0..S-2 as inputs
        # last frame; C = none yet
        self.prev = nn.Embedding(n_codebooks * (codebook_size + 1), width) if reads_prev else None
        self.depth = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, codebook_size))
            for _ in range(self.slots - 1))

    def _base(self, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        if self.prev is None:
            return self.inp(h)
        offsets = torch.arange(self.K, device=prev.device) * (self.C + 1)
        return self.inp(h) + self.prev(prev + offsets).sum(-2)

    def logits(self, h: torch.Tensor, codes: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[N, S-1, C]`` of slots 1..S-1 for ``h [N, D]``, a step's codes
        by slot ``codes [N, S]`` (:func:`step_slots`) and ``prev [N, K]`` (unread without ``reads_prev``)."""
        offsets = torch.arange(self.slots - 1, device=codes.device) * self.C
        x = self._base(h, prev)[:, None] + self.codes(codes[:, :-1] + offsets).cumsum(1)  # [N, S-1, W]
        return torch.stack([mlp(x[:, i]) for i, mlp in enumerate(self.depth)], 1)

    def generate(self, h: list[torch.Tensor], coarse: list[torch.Tensor], prev: torch.Tensor,
                 pick: Callable[[torch.Tensor, list[tuple[int, int]], int], torch.Tensor],
                 linear: Callable[[nn.Linear, torch.Tensor], torch.Tensor] = nn.Linear.__call__) -> list[torch.Tensor]:
        """Frames ``[K, G n_b]`` for each of B sessions, from its hidden states ``h[b] [n_b, D]`` and
        coarse codes ``coarse[b] [n_b]`` (one per step), in order, after its previous frame ``prev[b]``
        (``prev [B, K]``; C where there is none). ``pick(logits [R, C], steps, s)`` maps the logits of
        slot ``s`` of R steps to ids ``[R]``; ``steps[r]`` = (session, step index) of row r.
        With ``reads_prev`` step ``j`` of every session that has one is one batched row, step
        after step; without, every step of every session is a row of one batch. ``linear(module,
        x)`` applies a linear map (e.g. :class:`~voicespec.lm.linear.Linears`)."""
        n = [c.shape[0] for c in coarse]
        if not self.reads_prev:
            col = self._complete(linear(self.inp, torch.cat(h)), torch.cat(coarse).to(prev.device),
                                 [(b, j) for b, m in enumerate(n) for j in range(m)], pick, linear)
            return list(self._frames(col).split([self.G * m for m in n], dim=1))
        device = prev.device
        steps = [torch.empty(self.slots, m, dtype=torch.long, device=device) for m in n]
        base = linear(self.inp, torch.cat(h)).split(n)  # [n_b, W] each
        offsets = torch.arange(self.K, device=device) * (self.C + 1)
        prev = prev.clone()
        for j in range(max(n, default=0)):
            rows = [b for b, m in enumerate(n) if m > j]
            x = torch.stack([base[b][j] for b in rows]) + self.prev(prev[rows] + offsets).sum(1)  # [R, W]
            col = self._complete(x, torch.stack([coarse[b][j] for b in rows]).to(device), [(b, j) for b in rows], pick, linear)
            for i, b in enumerate(rows):
                steps[b][:, j] = col[:, i]
            prev[rows] = col[-self.K:].T  # the step's last frame
        return [self._frames(c) for c in steps]

    def _frames(self, col: torch.Tensor) -> torch.Tensor:
        """Codes by slot ``[S, R]`` of R steps to their frames ``[K, R G]``, in time order."""
        return col.view(self.G, self.K, -1).permute(1, 2, 0).reshape(self.K, -1)

    def _complete(self, x: torch.Tensor, coarse: torch.Tensor, steps: list[tuple[int, int]],
                  pick: Callable[[torch.Tensor, list[tuple[int, int]], int], torch.Tensor],
                  linear: Callable[[nn.Linear, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Codes by slot ``[S, R]`` of R steps from their base inputs ``x [R, W]`` and coarse codes ``[R]``."""
        col = torch.empty(self.slots, x.shape[0], dtype=torch.long, device=x.device)
        col[0] = coarse
        for s, (norm, up, act, out) in enumerate(self.depth, start=1):
            x = x + self.codes.weight[(s - 1) * self.C + col[s - 1]]
            col[s] = pick(linear(out, act(linear(up, norm(x)))), steps, s).to(x.device)
        return col


def step_slots(frames: torch.Tensor, frames_per_step: int) -> torch.Tensor:
    """Frames ``[T, K]`` to each step's codes by slot ``[ceil(T/G), G K]`` (slot ``f K + k``: codebook k
    of the step's frame f); a last step short of G frames repeats its last frame (the fine stage's
    training masks those slots out: :func:`slot_mask`)."""
    T, K = frames.shape
    n = -(-T // frames_per_step)
    idx = torch.arange(n * frames_per_step, device=frames.device).clamp_max(T - 1)
    return frames[idx].reshape(n, frames_per_step * K)


def slot_mask(n_frames: int, frames_per_step: int, n_codebooks: int) -> torch.Tensor:
    """``[ceil(T/G), G K]`` bool: which slots of :func:`step_slots` hold a real frame."""
    n = -(-n_frames // frames_per_step)
    frame = torch.arange(n * frames_per_step).view(n, frames_per_step, 1).expand(-1, -1, n_codebooks)
    return (frame < n_frames).reshape(n, -1)


def init_weights(modules: Iterable[nn.Module], std: float) -> None:
    """Linear maps and tables from N(0, std), biases zero, norms as built (one), in module order (as
    ``transformers`` initialises a Llama); loading a folder overwrites them."""
    for m in modules:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class CodecLM(FolderModule):
    config_class = CodecLMConfig
    # Folders written while the backbone was transformers' LlamaModel hold its token table (one
    # unused row: inputs arrive as embeddings).
    LEGACY_KEYS = ("backbone.embed_tokens.weight",)

    def __init__(self, config: CodecLMConfig) -> None:
        super().__init__()
        self.config = config
        layout = config.layout
        self.n_codebooks = layout.groups  # tokens per step: K, or 1 when coarse-first
        self.head_vocab = layout.vocab_size
        self.backbone = self._seeded_backbone(config)
        self.text_embed = nn.Embedding(config.text_vocab_size, config.hidden_size)
        self.code_embed = nn.Embedding(self.n_codebooks * self.head_vocab, config.hidden_size)
        self.heads = nn.Linear(config.hidden_size, self.n_codebooks * self.head_vocab, bias=False)
        self.fine = FineStage(config.hidden_size, config.n_codebooks, config.codebook_size, config.fine_width,
                              config.fine_reads_prev, config.frames_per_step) if config.coarse_first and config.fine_stage else None
        if config.track_positions:
            self.track_units = nn.Embedding(2 * config.text_vocab_size, config.hidden_size)  # this, next
            self.track_pos = nn.Embedding(2 * config.track_positions, config.hidden_size)  # since, until
        init_weights((m for name, m in self.named_modules() if not name.startswith("backbone")), config.initializer_range)

    def _seeded_backbone(self, config: CodecLMConfig) -> LlamaBackbone:
        """The backbone, initialised as it was while it was ``transformers``' ``LlamaModel``, draw
        for draw (its one-row token table is drawn and dropped), so a seed gives the weights it
        always gave: the recipes, and the seeded test models, stay what they were."""
        D = config.hidden_size
        torch.empty(1, D).normal_()  # the token table's default initialisation
        backbone = LlamaBackbone(config.backbone_config())
        torch.empty(1, D).normal_(std=config.initializer_range)  # and its re-initialisation
        init_weights(backbone.modules(), config.initializer_range)
        return backbone

    @property
    def device(self) -> torch.device:
        return self.heads.weight.device

    @property
    def aligned(self) -> bool:
        return bool(self.config.track_positions)

    def drop_fine_stage(self) -> CodecLM:
        """Remove the fine stage (in place): a draft of a coarse-first target proposes coarse codes
        only, so it need not carry (or ship) one."""
        self.fine = None
        self.config.fine_stage = False
        return self

    def get_output_embeddings(self) -> nn.Linear:
        return self.heads

    def check_track(self, track: torch.Tensor) -> None:
        """A track ``[T, 4]`` fits this model (checked once per request, not per step: each
        check waits for the values)."""
        V, P = self.config.text_vocab_size, self.config.track_positions
        if track.numel() and (int(track[..., :2].max()) >= V or int(track.min()) < 0 or int(track[..., 2:].max()) >= P):
            raise ValueError(f"track units must lie in [0, {V}) and positions in [0, {P})")

    def embed_track(self, track: torch.Tensor) -> torch.Tensor:
        """``track [B, T, 4]`` (unit, next unit, frames since, frames until; see :meth:`check_track`) to ``[B, T, D]``."""
        V, P = self.config.text_vocab_size, self.config.track_positions
        units = self.track_units(track[..., :2] + torch.tensor([0, V], device=track.device)).sum(2)
        return units + self.track_pos(track[..., 2:] + torch.tensor([0, P], device=track.device)).sum(2)

    def embed(self, text_ids: torch.Tensor | None, codes: torch.Tensor | None,
              track: torch.Tensor | None = None) -> torch.Tensor:
        """``text_ids [B, S]`` and/or ``codes [B, T, K]`` (plus ``track [B, T, 4]`` for an aligned
        model) to input embeddings ``[B, S+T, D]``."""
        if self.aligned and codes is not None and codes.shape[1] and (track is None or track.shape[:2] != codes.shape[:2]):
            raise ValueError("an aligned codec LM needs a track row for every code step")
        parts = []
        if text_ids is not None and text_ids.shape[1]:
            if int(text_ids.max()) >= self.config.text_vocab_size or int(text_ids.min()) < 0:
                raise ValueError(f"text ids must lie in [0, {self.config.text_vocab_size})")
            parts.append(self.text_embed(text_ids))
        if codes is not None and codes.shape[1]:
            # Offsets computed here, not kept as a buffer: from_pretrained does not restore
            # non-persistent buffers it builds on the meta device.
            offsets = torch.arange(self.n_codebooks, device=codes.device) * self.head_vocab
            steps = self.code_embed(codes + offsets).sum(2)
            parts.append(steps + self.embed_track(track) if self.aligned else steps)
        return torch.cat(parts, dim=1)

    def forward(self, text_ids: torch.Tensor | None = None, codes: torch.Tensor | None = None,
                track: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[B, S+T, G, V]`` for every input position (one causal pass, no cache)."""
        return self.forward_hidden(text_ids, codes, track)[0]

    def forward_hidden(self, text_ids: torch.Tensor | None = None, codes: torch.Tensor | None = None,
                       track: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`forward`, plus the final hidden states ``[B, S+T, D]`` (the fine stage's input)."""
        h = self.backbone(self.embed(text_ids, codes, track))
        return self.heads(h).view(*h.shape[:2], self.n_codebooks, self.head_vocab), h


END_ROW = (0, 0, 0, 0)  # the track past the last frame: no unit; the model learns EOS there


def truncated_copy(model: torch.nn.Module, n_layers: int, layers_attr: str) -> torch.nn.Module:
    """A copy of ``model`` keeping only its first ``n_layers`` decoder layers (early exit)."""
    small = copy.deepcopy(model)
    parent_name, _, name = layers_attr.rpartition(".")
    parent = small.get_submodule(parent_name) if parent_name else small
    setattr(parent, name, torch.nn.ModuleList(list(getattr(parent, name))[:n_layers]))
    parent.config.num_hidden_layers = n_layers
    small.config.num_hidden_layers = n_layers
    return small


class CodecLMSession(LMSession):
    """A session over a :class:`CodecLM`; an aligned one feeds track row ``position - offset``
    with every step (``offset`` = prompt steps before the start step), END beyond the track. A
    step of G frames reads the row of its first frame, which also says where the others fall (its
    unit's frames since and until); its fine stage's frames past the track's last are cut."""

    def __init__(self, model: CodecLM, prefix: int = 0, track: torch.Tensor | None = None, offset: int = 0,
                 stack: LlamaStack | None = None, oracle: Any = None) -> None:
        cache = None
        if oracle is not None:
            from voicespec.lm.hf import new_dynamic_cache

            cache = new_dynamic_cache(oracle)
        super().__init__(model, prefix, stack, cache)
        self.oracle = oracle  # without a stack: the transformers twin of the backbone (see CodecStepLM)
        self.hidden: torch.Tensor | None = None  # [T, D]: final hidden states of the last forward (on the device)
        self.prev = torch.full((model.config.n_codebooks,), model.config.codebook_size)  # last fine frame [K]
        self.frames_left = None if track is None else track.shape[0]  # frames the fine stage may still add
        # Rows by step position, built once: END before the offset; END past the end (see track_rows).
        G = model.config.frames_per_step
        self._rows = None if track is None else torch.cat([torch.tensor([END_ROW]).repeat(offset, 1), track[::G]])
        self._track_table: torch.Tensor | None = None  # embeddings of _rows, made by embed_at on first use

    def track_rows(self, start: int, n: int) -> torch.Tensor | None:
        if self._rows is None:
            return None
        rows = self._rows[start: start + n]
        if rows.shape[0] < n:
            rows = torch.cat([rows, torch.tensor([END_ROW]).repeat(n - rows.shape[0], 1)])
        return rows.unsqueeze(0)

    def embed_at(self, steps: torch.Tensor, start: int, together: bool = False) -> torch.Tensor:
        """Input embeddings ``[1, n, D]`` of ``steps [n, G]`` placed at step positions ``start ..``
        (``together``: all at ``start``, as the nodes of one depth of a draft tree are) with their
        track rows: what the target reads there, as :meth:`CodecLM.embed` computes it.
        Drafters built on the target call it once per drafted step, so the track's embeddings are
        computed once per request (``_track_table``: one row per position, END last) and looked up."""
        model = self.model
        weight = model.code_embed.weight
        if steps.shape[1] == 1:  # one code per step (coarse-first): a row lookup, no offsets to add
            codes = weight.index_select(0, steps[:, 0].to(weight.device))  # [n, D]
        else:
            offsets = torch.arange(model.n_codebooks) * model.head_vocab
            codes = weight[(steps + offsets).to(weight.device)].sum(-2)
        if self._rows is None:
            return codes[None]
        if self._track_table is None:
            rows = torch.cat([self._rows, torch.tensor([END_ROW])])
            self._track_table = model.embed_track(rows[None].to(model.device))[0]  # [N + 1, D]
        table, n = self._track_table, steps.shape[0]
        last = table.shape[0] - 1  # past the track: END
        if together or n == 1:
            return (codes + table[min(start, last)])[None]
        return (codes + table[torch.arange(start, start + n).clamp_max(last).to(table.device)])[None]

    @classmethod
    def embed_batch(cls, sessions: list[CodecLMSession], blocks: list[torch.Tensor], trees: list[Any] | None = None) -> torch.Tensor:
        model = sessions[0].model
        T = max(b.shape[0] for b in blocks)
        codes = torch.zeros(len(blocks), T, blocks[0].shape[1], dtype=torch.long)  # [B, T, G], padding 0
        track = torch.tensor(END_ROW).repeat(len(blocks), T, 1) if model.aligned else None  # [B, T, 4]
        for i, (s, b) in enumerate(zip(sessions, blocks)):
            codes[i, : b.shape[0]] = b
            if track is not None:
                rows = s.track_rows(s.length, b.shape[0])[0]
                tree = trees[i] if trees else None
                track[i, : b.shape[0]] = rows if tree is None else rows[tree.depths]
        return model.embed(None, codes.to(model.device), None if track is None else track.to(model.device))

    @classmethod
    def readout_batch(cls, sessions: list[CodecLMSession], hidden: torch.Tensor, counts: list[int]) -> list[torch.Tensor]:
        model = sessions[0].model
        logits = sessions[0].stack.linears(model.heads, hidden).view(*hidden.shape[:2], model.n_codebooks, model.head_vocab)  # [B, T, G, V]
        for i, (s, n) in enumerate(zip(sessions, counts)):
            s.hidden = hidden[i, :n]  # stays on the device: the fine stage's and feature drafters' input
        logits = logits.float().cpu()  # one transfer per pass: verification runs on the host
        return [logits[i, :n] for i, n in enumerate(counts)]

    def oracle_hidden(self, embeds: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[1, T, D]`` of ``embeds [1, T, D]`` appended to the oracle's cache."""
        return self.oracle(inputs_embeds=embeds, cache=self.cache, use_cache=True).last_hidden_state

    def _dynamic_logits(self, steps: torch.Tensor) -> torch.Tensor:
        track, device, model = self.track_rows(self.length, steps.shape[0]), self.model.device, self.model
        h = self.oracle_hidden(model.embed(None, steps.unsqueeze(0).to(device), None if track is None else track.to(device)))
        self.hidden = h[0]
        return model.heads(h[0]).view(-1, model.n_codebooks, model.head_vocab).float().cpu()

    def fine_work(self, coarse: torch.Tensor, hidden: torch.Tensor, sampling: SamplingConfig,
                  generator: torch.Generator | None) -> FineWork:
        """The fine stage's call completing verified steps' coarse codes ``[n]`` to frames ``[K, <= nG]``
        from the backbone's final hidden states ``[n, D]`` that predicted them. Yielded to the
        scheduler, so many sessions' frames run as one batch."""
        return FineWork(self, coarse, hidden, sampling, generator)


@dataclass(eq=False)
class FineWork(Work):
    """A session's verified steps' coarse codes to complete; the result is its frames ``[K, <= nG]``
    (a track's last step cut at its last frame). Each pick is warped like the coarse codes (no
    repetition penalty: the fine stage has no history) and drawn from the session's own
    generator, step by step and slot by slot whatever the batch, so its codes depend neither on
    its batch nor on how its steps were grouped into verify passes (the same frames with
    speculation on or off)."""

    session: CodecLMSession
    coarse: torch.Tensor  # [n]
    hidden: torch.Tensor  # [n, D]
    sampling: SamplingConfig
    generator: torch.Generator | None

    @classmethod
    @torch.inference_mode()
    def run(cls, works: list[FineWork]) -> list[torch.Tensor]:
        return run_grouped(works, lambda w: (id(w.session.model), w.sampling), cls._complete)

    @staticmethod
    def _complete(group: list[FineWork]) -> list[torch.Tensor]:
        """One fine-stage call over the frames of sessions that share a model and a sampling config."""
        model, sampling = group[0].session.model, group[0].sampling
        S, n = model.fine.slots, [w.coarse.shape[0] for w in group]
        starts = [sum(n[:b]) for b in range(len(group))]
        u = None if sampling.greedy else torch.cat(  # [sum n, S-1]: each session's draws, step-major
            [draw_uniforms(w.generator, m * (S - 1)).view(m, S - 1) for w, m in zip(group, n)])

        def pick(logits: torch.Tensor, steps: list[tuple[int, int]], s: int) -> torch.Tensor:
            rows = None if u is None else u[[starts[b] + j for b, j in steps], s - 1:s]
            return choose_rows(logits.float().cpu(), sampling, rows)

        frames = model.fine.generate(  # on the model's device; picks on the host
            [w.hidden for w in group], [w.coarse for w in group],
            torch.stack([w.session.prev for w in group]).to(model.device), pick,
            group[0].session.stack.linears if group[0].session.stack is not None else nn.Linear.__call__)
        out = []
        for w, f in zip(group, frames):
            f = f.cpu()
            if f.shape[1]:
                w.session.prev = f[:, -1]
            if w.session.frames_left is not None:
                f = f[:, : w.session.frames_left]
                w.session.frames_left -= f.shape[1]
            out.append(f)
        return out


class CodecStepLM:
    """The engine's view of a :class:`CodecLM`: its layout, and sessions over a position-addressed
    cache with the plain-torch backbone forward (``static=False``: the ``transformers`` Llama with
    the same weights over a ``DynamicCache``, the independent oracle the tests compare with; only
    this imports ``transformers``)."""

    def __init__(self, model: CodecLM, static: bool = True) -> None:
        self.model = model.eval()
        self.layout = model.config.layout
        self.stack = LlamaStack(model.backbone) if static else None
        self.oracle = None
        if not static:
            from voicespec.lm.hf import hf_llama

            self.oracle = hf_llama(model.backbone)

    def start(self, prompt: Prompt) -> CodecLMSession:
        session = self.start_batch([prompt])[0]
        if isinstance(session, Exception):
            raise session
        return session

    def start_batch(self, prompts: list[Prompt]) -> list[CodecLMSession | ValueError]:
        """A session per prompt, their prompts appended in one padded pass over the stack (each
        on its own with the oracle); a prompt this model cannot read gets its ValueError instead."""
        sessions: list[CodecLMSession | ValueError] = []
        todo: list[tuple[CodecLMSession, torch.Tensor]] = []  # sessions with a prefix to append, embeds [1, T, D]
        with torch.inference_mode():
            for prompt in prompts:
                try:
                    session, embeds = self._open(prompt)
                except ValueError as e:
                    sessions.append(e)
                    continue
                sessions.append(session)
                if embeds is not None:
                    todo.append((session, embeds))
            if self.stack is None:
                for session, embeds in todo:
                    session.hidden = session.oracle_hidden(embeds)[0]
            elif todo:
                counts = [e.shape[1] for _, e in todo]
                padded = todo[0][1].new_zeros(len(todo), max(counts), todo[0][1].shape[2])  # [B, T, D]
                for b, (_, e) in enumerate(todo):
                    padded[b, : e.shape[1]] = e[0]
                hidden = self.stack.forward(padded, self.stack.pool, [s.row for s, _ in todo], counts)
                for b, ((session, _), n) in enumerate(zip(todo, counts)):
                    session.hidden = hidden[b, :n]
        return sessions

    def _open(self, prompt: Prompt) -> tuple[CodecLMSession, torch.Tensor | None]:
        """A session for ``prompt`` and the embeddings ``[1, T, D]`` of what it must append
        (None: nothing), its length already set to the prompt's context steps."""
        if self.model.aligned and prompt.track is None:
            raise ValueError("this codec LM is conditioned on a frame-aligned text track; the prompt has none")
        if not self.model.aligned and prompt.track is not None:
            raise ValueError("this codec LM takes no frame-aligned track")
        track = None if prompt.track is None else torch.as_tensor(prompt.track, dtype=torch.long)
        if track is not None:
            self.model.check_track(track)
        session = CodecLMSession(self.model, prompt.text.numel(), track, offset=prompt.steps.shape[0] - 1, stack=self.stack,
                                 oracle=self.oracle)
        context = prompt.steps[:-1]
        if not (session.prefix or context.shape[0]):
            return session, None
        device = self.model.device
        text, codes = prompt.text.unsqueeze(0).to(device), context.unsqueeze(0).to(device)
        rows = session.track_rows(0, context.shape[0])
        rows = None if rows is None else rows.to(device)
        embeds = self.model.embed(text, codes, rows)
        session.length = context.shape[0]
        return session, embeds
