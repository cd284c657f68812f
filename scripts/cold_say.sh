#!/bin/sh
# Cold `voicespec say "Hello there."`, process start to file written, for each source tree given
# (each first on PYTHONPATH, the repository's .venv interpreter), alternated, RUNS rounds (default 7).
# Compare a commit with: git worktree add /tmp/before <commit> && sh scripts/cold_say.sh /tmp/before "$PWD"
PY=${PY:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
OUT=$(mktemp -d)
for i in $(seq "${RUNS:-7}"); do
  for tree in "$@"; do
    s=$(date +%s.%N)
    PYTHONPATH=$tree "$PY" -c "import sys; from voicespec.cli import entry; sys.argv = ['voicespec', 'say', 'Hello there.', '-o', '$OUT/a.wav']; entry()" >/dev/null 2>&1
    e=$(date +%s.%N)
    echo "$tree $(echo "$e - $s" | bc)"
  done
done
rm -rf "$OUT"
