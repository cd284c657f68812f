#!/usr/bin/env bash
# The GPU checks in one prepared script, for one device call (about 5 minutes on one H200):
#   1. the machine (nvidia-smi, torch);
#   2. the CUDA tests (the LM, its KV cache and the codec on the GPU: batched == alone, the
#      codec's streaming decode == its full decode, the training steps);
#   3. exactness on the GPU: the shipped voice decoded greedy, batched vs one session at a time,
#      and GPU vs CPU frames;
#   4. the batched engine's figures at 1, 16, 64 and 256 sessions (bf16 and float32).
# Writes its logs and gpu.json under $OUT (default out/gpu). The device machines have torch and
# transformers but no network: this repo's other dependencies travel as wheels in .gpu-wheels/
# (`make gpu-wheels` here fills it; carry it with the call).
set -euo pipefail
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PY=${PY:-python3}
if [ -d .gpu-wheels ]; then
  $PY -m pip install -q --no-index --no-deps --find-links .gpu-wheels .gpu-wheels/*.whl 2>&1 | tail -3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/machine.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/machine.txt"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rs tests/serve/test_scheduler.py tests/codec/test_seanet.py \
  tests/train/test_codec.py tests/train/test_lm.py -k "cuda or gpu" 2>&1 | tee "$OUT/tests.log"
timeout 240 $PY scripts/gpu_figures.py "$OUT/gpu.json" 2>&1 | tee "$OUT/figures.log"
