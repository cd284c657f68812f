"""Per-request decoding statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class DecodeStats:
    """What one request cost and how well drafting worked.

    ``target_passes`` counts verify passes (the target's forward calls after prefill);
    ``drafted``/``accepted`` count draft *steps*, ``drafted_tokens``/``accepted_tokens`` count
    individual tokens (they differ for multi-codebook steps, where a step can be accepted in part).
    ``per_position_*``: how often position i of a draft was proposed / accepted.
    """

    generated_steps: int = 0
    frames: int = 0
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    per_position_drafted: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    gammas: list[int] = field(default_factory=list)  # per pass: γ, or a tree's depth
    tree_passes: int = 0  # passes that verified a draft tree
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    finish_reason: str = ""
    acceptance: str = "exact"  # or "lossy-top-N": drafts kept by a relaxed rule (SamplingConfig.lossy_top_k)

    @property
    def acceptance_rate(self) -> float:
        """Fraction of drafted steps accepted whole."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Steps committed per target pass (1.0 for plain decoding)."""
        return self.generated_steps / self.target_passes if self.target_passes else 0.0

    @property
    def other_s(self) -> float:
        return max(0.0, self.total_s - self.prefill_s - self.draft_s - self.verify_s)

    def record_draft(self, drafted: int, accepted: int, drafted_tokens: int, accepted_tokens: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.drafted_tokens += drafted_tokens
        self.accepted_tokens += accepted_tokens
        grow = drafted - len(self.per_position_drafted)
        if grow > 0:
            self.per_position_drafted += [0] * grow
            self.per_position_accepted += [0] * grow
        for i in range(drafted):
            self.per_position_drafted[i] += 1
            self.per_position_accepted[i] += i < accepted

    def merge(self, other: DecodeStats) -> None:
        """Add another request's counts and times (e.g. the next sentence of one utterance)."""
        for name in _ADDITIVE:  # every count and time, so a new one cannot be forgotten here
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for i, (d, a) in enumerate(zip(other.per_position_drafted, other.per_position_accepted)):
            if i == len(self.per_position_drafted):
                self.per_position_drafted.append(0)
                self.per_position_accepted.append(0)
            self.per_position_drafted[i] += d
            self.per_position_accepted[i] += a
        self.gammas += other.gammas
        self.finish_reason = other.finish_reason
        self.acceptance = other.acceptance

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            other_s=self.other_s,
        )
        return d


_ADDITIVE = tuple(f.name for f in fields(DecodeStats) if f.type in ("int", "float"))
