"""Trees fitted to measured draft ranks: the arithmetic on hand-made records, and the records
themselves checked against real tree passes (each pass accepts what its start's record says)."""

from __future__ import annotations

import json

import pytest

from voicespec.bench.tree_fit import draft_ranks, fit_table, fit_tree, rank_paths, steps_per_pass, tree_of
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import FeatureDrafter
from voicespec.pipeline.tiny import tiny_codec_lm, tiny_draft_heads


def test_rank_paths_and_back():
    assert rank_paths((2, 1)) == {(0,), (1,), (0, 0), (1, 0)}
    tree = ((3,), (2, 0, 1))
    assert rank_paths(tree) == {(0,), (1,), (2,), (0, 0), (0, 1), (2, 0)}
    assert tree_of(rank_paths(tree)) == tree and tree_of(rank_paths((2, 2, 1))) == (2, 2, 1)


def test_steps_per_pass_is_the_longest_accepted_prefix_plus_one():
    ranks = [[0, 0, 0], [1, 0, 5], [2], [0, 3, 0], []]
    # a chain of two accepts 2, 0, 0, 1, 0 of them; the tree 2,1 also 2 of [1, 0, 5]
    assert steps_per_pass(ranks, (1, 1)) == 1 + 3 / 5
    assert steps_per_pass(ranks, (2, 1)) == 1 + 5 / 5


def test_fit_keeps_the_most_frequent_paths_as_a_rank_contiguous_tree():
    ranks = [[0, 0, 0]] * 5 + [[1, 0, 0]] * 4 + [[2, 0]] * 3 + [[0, 1]] * 2
    assert fit_tree(ranks, 3, 3) == (1, 1, 1)  # (0,) 7, (0, 0) 5, (0, 0, 0) 5 beat (1,) 4
    assert fit_tree(ranks, 4, 3) == ((2,), (1, 0), (1,))  # (1,) next (4), then (1, 0)...
    assert fit_tree(ranks, 6, 3) == (2, 1, 1)  # alike per depth: the per-depth form
    assert fit_tree(ranks, 3, 1) == (3,)  # depth 1: the three first candidates
    # (2,) is frequent, but it waits for its elder sibling (1,), never seen: candidates come in rank order
    assert fit_tree([[2]] * 9 + [[0]], 3, 1) == (1,)
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_tree([[]], 4, 2)
    rows = fit_table(ranks, ranks[:5], [(3, 3)], [(2, 1)])
    assert [(r.tree, r.nodes, r.depth) for r in rows] == [((1, 1, 1), 3, 3), ((2, 1), 4, 2)]
    assert rows[0].check_steps == 4.0 and rows[0].fit_steps == steps_per_pass(ranks, (1, 1, 1))


def test_each_tree_pass_accepts_what_its_record_says():
    target = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=16, min_frames=8, coarse_first=True)
    drafter = FeatureDrafter(target, tiny_draft_heads(target))
    prompt = target.layout.prompt([1, 2, 3, 4])
    tree = ((3,), (2, 0, 1), (1, 0, 2))
    ranks = draft_ranks(target, drafter, [prompt], depth=3, max_steps=30)
    paths = rank_paths(tree)
    gen = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(SamplingConfig(temperature=0), tree=tree, max_steps=30))
    checked = 0
    while not gen.done:
        before, passes = gen.generated.shape[0], gen.stats.tree_passes
        gen.step()
        if gen.stats.tree_passes == passes or gen.done:  # not a tree pass, or cut short by the end
            continue
        r, d = ranks[before], 0
        while d < len(r) and tuple(r[: d + 1]) in paths:
            d += 1
        assert gen.generated.shape[0] - before == d + 1
        checked += 1
    gen.close()
    assert len(ranks) == gen.generated.shape[0] and checked >= 3


@pytest.mark.slow
def test_fit_tree_from_the_command_line(tmp_path, capsys):
    """``voicespec bench --fit-tree`` on a tiny coarse-first voice given feature heads: one row
    per budget and one per compared tree, in tree_fit.json and printed; bad budgets exit 2."""
    from voicespec.cli import main
    from voicespec.pipeline.tiny import build_tiny_voice
    from voicespec.pipeline.voice import load_voice

    folder = build_tiny_voice(tmp_path / "voice", layout="coarse")
    tiny_draft_heads(load_voice(str(folder)).target).save(folder / "drafters" / "feature")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello there. How are you?\nA third one.\n")
    out = tmp_path / "out"
    code = main(["bench", "--fit-tree", "4:2,6:3", "--trees", "2,1", "--voice", str(folder), "--prompts", str(prompts),
                 "--max-steps", "20", "--out", str(out)])
    assert code == 0
    result = json.loads((out / "tree_fit.json").read_text())
    assert [(r["nodes"] <= n, r["depth"] <= d) for r, (n, d) in zip(result["rows"], [(4, 2), (6, 3)])] == [(True, True)] * 2
    assert result["rows"][-1]["text"] == "2,1" and len(result["rows"]) == 3 and sum(result["sentences"]) == 3
    assert all(r["check_steps"] >= 1 for r in result["rows"]) and "| `2,1` | 4 | 2 |" in capsys.readouterr().out
    # Without --trees the drafter's own (none fitted to these heads: 3,1,1,1,1) are judged beside the fits,
    # read to their full depth.
    assert main(["bench", "--fit-tree", "3:2", "--voice", str(folder), "--prompts", str(prompts), "--max-steps", "20",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "tree_fit.json").read_text())["rows"]
    assert [r["text"] for r in rows[1:]] == ["3,1,1,1,1"] and rows[1]["depth"] == 5
    capsys.readouterr()
    for bad in ("5:9", "70:3", "4", "a:b"):
        assert main(["bench", "--fit-tree", bad]) == 2
        assert "NODES:DEPTH" in capsys.readouterr().err
