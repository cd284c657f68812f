"""Training-time tools: teacher corpora and (later) codec/LM training.

Nothing here is imported by the synthesis engine; heavy training-only dependencies (the Piper
teacher, onnx) are imported inside the functions that need them (``pip install -e '.[train]'``).
"""
