"""Past one machine, on Ray: batch synthesis on Ray Data (``synth.py``), serving on Ray Serve
(``serve.py``). Optional: only these modules import ``ray`` (the ``cluster`` extra)."""
