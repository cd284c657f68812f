"""``voicespec bench``: the latency-budget evaluation harness.

One process, one run: plain decoding (the baseline), every drafter at fixed and adaptive γ, the
``transformers`` peers on flat layouts, greedy and sampling; streaming through the synthesis
pipeline against a real-time player; and the real WebSocket server under concurrent clients.
Each module does one job: :mod:`.runner` (interleaved A/B decoding), :mod:`.ideal` (Leviathan's
model), :mod:`.dist` (percentiles, pairwise ratios), :mod:`.summary` (per-method figures),
:mod:`.peer` (``generate()``), :mod:`.streaming`, :mod:`.load`, :mod:`.budget`, :mod:`.machine`
(environment, memory), :mod:`.report` (JSON, Markdown), :mod:`.plots`, :mod:`.harness` (the phases
in order); its arguments are :mod:`voicespec.cli.bench`. :mod:`.stress` is ``voicespec stress``, the
server against hostile clients.
"""

STRESS_PHASES = ("fuzz", "disconnects", "cpu", "contexts", "soak")  # voicespec stress's phases, in the order they run
