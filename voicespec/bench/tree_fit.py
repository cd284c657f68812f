"""Static draft trees fitted to measured acceptance (greedy decoding).

At every step of a greedy decode the drafter is run along the target's own continuation
(teacher-forced) for up to ``depth`` steps, and the rank of the target's token among the draft's
candidates is recorded at each depth. A static tree whose node children are the draft's top
candidates accepts exactly the longest prefix of that rank sequence which is one of its nodes'
rank paths, so any tree's steps per pass can be read off the records without decoding again
(:func:`steps_per_pass`). For a budget of nodes the fit keeps the most frequent rank paths, one at
a time: a path is never more frequent than its prefix, so they form a tree, and a path joins only
after its elder sibling (a node's children are its first candidates, as the drafter orders
them), so the fit is the best tree of its size wherever frequencies fall with rank, as they do
here. It is for greedy decoding, where acceptance is a token match; a tree for sampling is
judged by the bench.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.tree_shapes import StaticTree, check_branching, tree_counts, tree_nodes, tree_text
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.layout import Prompt

RankPath = tuple[int, ...]


@torch.inference_mode()
def draft_ranks(target, drafter, prompts: Sequence[Prompt], depth: int = 8, max_steps: int = 2000) -> list[list[int]]:
    """Per decoding step of each prompt (greedy, plain): the rank (0: the draft's likeliest) of
    the target's next ``depth`` tokens under the drafter run along them, fewer near the end.
    ``drafter`` drafts from the target's state (``next_logits_for``: the feature heads)."""
    greedy = SamplingConfig(temperature=0)
    decoder = SpecDecoder(target, drafter)
    out: list[list[int]] = []
    for prompt in prompts:
        gen = decoder.generate(prompt, DecodeConfig(greedy, gamma=0, max_steps=max_steps))
        contexts = []
        while not gen.done:
            ctx = gen.draft_context()
            contexts.append(replace(ctx, features=ctx.features.clone()))  # history: a view of rows never rewritten
            gen.step()
        full = gen.history
        for ctx in contexts:
            pending = ctx.history.shape[0] - 1
            truth = full[pending + 1: pending + 1 + depth]  # [n, G]
            next_logits, state, ranks = drafter.next_logits_for(ctx, depth), ctx.state, []
            step = ctx.history[-1]
            for j, true in enumerate(truth):
                warped = ctx.policy.warp_rows(next_logits(j, step), [state], None)[0, 0]  # [V]
                ranks.append(int((warped > warped[int(true[0])]).sum()))
                state, step = ctx.policy.layout.advance(state, true), true
            out.append(ranks)
        gen.close()
    return out


def steps_per_pass(ranks: Sequence[Sequence[int]], tree: StaticTree) -> float:
    """Mean steps a pass of ``tree`` commits over the records: its accepted depth plus one."""
    paths = rank_paths(tree)
    total = 0
    for r in ranks:
        d = 0
        while d < len(r) and tuple(r[: d + 1]) in paths:
            d += 1
        total += d
    return 1 + total / max(len(ranks), 1)


def _children(level: list[RankPath], group: Sequence[int]) -> list[RankPath]:
    """The next depth's rank paths: ``group[i]`` children under ``level[i]``, in slot order."""
    return [p + (r,) for p, b in zip(level, group) for r in range(b)]


def rank_paths(tree: StaticTree) -> set[RankPath]:
    """Every node of a static tree as the ranks of the candidates on its path."""
    paths: set[RankPath] = set()
    level: list[RankPath] = [()]
    for group in tree_counts(tree):
        level = _children(level, group)
        paths.update(level)
    return paths


def tree_of(paths: set[RankPath]) -> StaticTree:
    """The static tree (children per node, depth by depth; per depth where all alike) of a
    prefix-closed, rank-contiguous set of rank paths."""
    def children(p: RankPath) -> int:
        n = 0
        while p + (n,) in paths:
            n += 1
        return n

    groups: list[tuple[int, ...]] = []
    level: list[RankPath] = [()]
    while True:
        group = [children(p) for p in level]
        if not any(group):
            return check_branching(tuple(groups))
        groups.append(tuple(group))
        level = _children(level, group)


def fit_tree(ranks: Sequence[Sequence[int]], nodes: int, depth: int) -> StaticTree:
    """A tree of at most ``nodes`` nodes and ``depth`` depths for ``ranks``: the most frequent rank
    paths, each added once its parent and its elder sibling are (see the module docstring)."""
    freq: Counter[RankPath] = Counter(tuple(r[:d]) for r in ranks for d in range(1, min(len(r), depth) + 1))
    kept: set[RankPath] = set()
    while len(kept) < nodes:
        ready = [p for p in freq if p not in kept and (len(p) == 1 or p[:-1] in kept)
                 and (p[-1] == 0 or p[:-1] + (p[-1] - 1,) in kept)]
        if not ready:
            break
        kept.add(max(ready, key=lambda p: (freq[p], -len(p), [-x for x in p])))
    if not kept:
        raise ValueError("no draft was ever recorded: nothing to fit a tree to")
    return tree_of(kept)


@dataclass(frozen=True)
class FitRow:
    tree: StaticTree
    nodes: int
    depth: int
    fit_steps: float  # steps per pass on the records it was fitted to
    check_steps: float  # on the held-out records


def fit_table(fit: Sequence[Sequence[int]], check: Sequence[Sequence[int]], budgets: Sequence[tuple[int, int]],
              compare: Sequence[StaticTree] = ()) -> list[FitRow]:
    """Fitted trees for each (nodes, depth) budget, and the ``compare`` trees, each judged on
    the records it was fitted to and on held-out ones."""
    rows = []
    for tree in [*(fit_tree(fit, n, d) for n, d in budgets), *compare]:
        rows.append(FitRow(tree, tree_nodes(tree), len(tree), steps_per_pass(fit, tree), steps_per_pass(check, tree)))
    return rows


def fit_voice(voice, texts: Sequence[str], budgets: Sequence[tuple[int, int]], compare: Sequence[StaticTree] = (),
              drafter: str = "feature", max_steps: int = 2000) -> dict:
    """:func:`fit_table` for ``voice``'s ``drafter`` on ``texts``: the sentences taken in turn
    for fitting and for checking (even and odd), records as deep as the deepest budget or tree."""
    prompts = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
    if len(prompts) < 2:
        raise ValueError("fitting a tree needs two sentences at least (one to fit, one to check)")
    depth = max([d for _, d in budgets] + [len(t) for t in compare])  # every tree read to its full depth
    ranks = [draft_ranks(voice.target, voice.drafter(drafter), prompts[i::2], depth, max_steps) for i in (0, 1)]
    rows = fit_table(ranks[0], ranks[1], budgets, compare)
    return {"drafter": drafter, "sentences": [len(prompts[0::2]), len(prompts[1::2])],
            "records": [len(r) for r in ranks], "rows": [{**r.__dict__, "text": tree_text(r.tree)} for r in rows]}


def fit_markdown(result: dict) -> str:
    """The fit as a Markdown table, its rows in order: the fits by budget, then the compared trees."""
    fit_n, check_n = result["sentences"]
    lines = [f"Draft trees for `{result['drafter']}`, greedy: steps per pass read off teacher-forced draft ranks "
             f"({result['records'][0]} steps of {fit_n} sentences to fit, {result['records'][1]} of {check_n} to check). "
             "A pass is read at every step; in a decode passes start after a miss, where drafts fare worse, so "
             "they commit fewer: compare trees here, measure them with the bench.", "",
             "| tree | nodes | depth | steps/pass (fit) | steps/pass (held out) |", "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| `{r['text']}` | {r['nodes']} | {r['depth']} | {r['fit_steps']:.3f} | {r['check_steps']:.3f} |")
    return "\n".join(lines)
