"""Any ``transformers`` causal LM as a step LM (``HFCausalLM``, flat layout), and the bridge back
to ``transformers`` generation: the layout's legality mask as a ``LogitsProcessor``.

With the mask, ``model.generate()`` decodes under exactly the masks our engine applies, which makes
``generate()`` usable as an independent oracle (tests) and as the assisted-generation peer (bench).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaModel, LogitsProcessor, PreTrainedModel

from transformers import DynamicCache, LlamaConfig

from voicespec.engine.layout import FlatLayout, Prompt
from voicespec.engine.step_lm import LMSession
from voicespec.lm.backbone import LlamaBackbone
from voicespec.lm.llama import LlamaStack


def hf_llama(backbone: LlamaBackbone) -> LlamaModel:
    """The ``transformers`` ``LlamaModel`` with ``backbone``'s weights (same names), on its device:
    an independent implementation of the same function, the oracle our forwards are tested against."""
    c = backbone.config
    config = LlamaConfig(vocab_size=1, hidden_size=c.hidden_size, num_hidden_layers=len(backbone.layers),
                         num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                         intermediate_size=c.intermediate_size, max_position_embeddings=c.max_position_embeddings,
                         rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps, pad_token_id=None, bos_token_id=None,
                         eos_token_id=None)
    p = next(backbone.parameters())
    twin = LlamaModel(config).to(p.device, p.dtype)
    missing, unexpected = twin.load_state_dict(backbone.state_dict(), strict=False)
    if unexpected or set(missing) - {"embed_tokens.weight"}:
        raise ValueError(f"backbone and LlamaModel disagree: missing {missing}, unexpected {unexpected}")
    return twin.eval()


def new_dynamic_cache(model: PreTrainedModel) -> DynamicCache:
    return DynamicCache(config=model.config)


class LayoutMaskProcessor(LogitsProcessor):
    """Masks illegal ids for a flat layout; ``prompt_len`` is the length of the prompt ids.

    Remembers each row's layout state so a call advances over the new ids only; when a row is not
    an extension of what it saw (assisted generation rolls rejected ids back) it re-walks that row."""

    def __init__(self, layout: FlatLayout, prompt_len: int) -> None:
        self.layout = layout
        self.prompt_len = prompt_len
        self._seen: dict[int, tuple[torch.Tensor, Any]] = {}  # row -> (ids walked, state after them)

    def _state(self, i: int, row: torch.Tensor):
        ids, state = self._seen.get(i, (row[:0], self.layout.initial_state()))
        if ids.shape[0] > row.shape[0] or not torch.equal(row[: ids.shape[0]], ids):
            ids, state = row[:0], self.layout.initial_state()
        for token in row[ids.shape[0]:]:
            state = self.layout.advance(state, token.view(1))
        self._seen[i] = (row.clone(), state)
        return state

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids[:, self.prompt_len:]
        masks = [self.layout.mask(self._state(i, row))[0] for i, row in enumerate(rows)]
        return scores.masked_fill(~torch.stack(masks), float("-inf"))


class HFSession(LMSession):
    @classmethod
    def embed_batch(cls, sessions: list[HFSession], blocks: list[torch.Tensor], trees: list[Any] | None = None) -> torch.Tensor:
        """Token embeddings do not depend on position: a tree's slots embed like a chain's."""
        ids = torch.zeros(len(blocks), max(b.shape[0] for b in blocks), dtype=torch.long)
        for i, b in enumerate(blocks):
            ids[i, : b.shape[0]] = b[:, 0]
        model = sessions[0].model
        return model.get_input_embeddings()(ids.to(model.device))

    @classmethod
    def readout_batch(cls, sessions: list[HFSession], hidden: torch.Tensor, counts: list[int]) -> list[torch.Tensor]:
        head = sessions[0].model.get_output_embeddings()
        logits = sessions[0].stack.linears(head, hidden).unsqueeze(2).float().cpu()  # [B, T, 1, V], on the host
        return [logits[i, :n] for i, n in enumerate(counts)]

    def _dynamic_logits(self, steps: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=steps.T.to(self.model.device), cache=self.cache, use_cache=True)
        return out.logits[0].unsqueeze(1).float().cpu()


class HFCausalLM:
    """Any ``transformers`` causal LM decoded in the flat layout (one token per step). A Llama-family
    model (``model.model`` a ``LlamaModel``, untied or tied heads alike) runs the plain-torch forward
    over a position-addressed cache unless ``static=False``; any other, its own forward."""

    def __init__(self, model: PreTrainedModel, layout: FlatLayout, static: bool = True) -> None:
        vocab = model.get_output_embeddings().weight.shape[0]
        if layout.vocab_size != vocab:
            raise ValueError(f"layout vocab_size {layout.vocab_size} != model vocabulary {vocab}")
        self.model = model.eval()
        self.layout = layout
        backbone = getattr(model, "model", None)
        self.stack = LlamaStack(backbone) if static and isinstance(backbone, LlamaModel) else None

    def start(self, prompt: Prompt) -> HFSession:
        if prompt.text.numel():
            raise ValueError("flat layouts take their text ids as prompt steps, not as a prefix")
        session = HFSession(self.model, stack=self.stack, cache=None if self.stack else new_dynamic_cache(self.model))
        if prompt.steps.shape[0] > 1:
            session.forward(prompt.steps[:-1])
        return session
