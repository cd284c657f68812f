"""The shape of the tree: no import cycles, runtime apart from training, a CLI that starts light."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "tools" / "check_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_import_cycle_and_runtime_never_imports_training(checker):
    assert checker.check(ROOT / "voicespec") == []
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_imports.py")], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == ""


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


def test_the_checker_finds_a_cycle_even_through_a_lazy_import(checker, tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import f\n",
        "b.py": "def f():\n    from . import c\n",
        "c.py": "import pkg.a\n",
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n",
    })
    assert checker.check(root) == ["import cycle: pkg.a -> pkg.b -> pkg.c -> pkg.a"]


def test_the_checker_refuses_runtime_code_that_imports_training(checker, tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "train/__init__.py": "", "train/recipe.py": "from pkg.engine import step\n",
        "engine.py": "def step():\n    import pkg.train.recipe\n", "cli/__init__.py": "import pkg.train.recipe\n",
        "bench/__init__.py": "", "serve.py": "from pkg.bench import x\n", "bench/x.py": "import pkg.serve\n",
    })
    problems = checker.check(root)
    assert "runtime module pkg.engine imports training module pkg.train.recipe" in problems
    assert "runtime module pkg.serve imports bench module pkg.bench.x" in problems
    assert not any("pkg.cli" in p for p in problems)  # the composition root may


def test_building_the_parser_imports_no_torch():
    code = ("import sys, json; from voicespec.cli import build_parser; build_parser(); "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'numpy'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == []


def test_every_argument_error_is_answered_without_torch():
    """Each subcommand (every training recipe too) rejects a bad flag before anything heavy loads."""
    code = ("import sys, json\nfrom voicespec.cli import main\ncodes = []\n"
            "for argv in (['say', 'x', '-o', 'a.wav', '--gamma', 'z'], ['serve', '--port', '-1'], ['client', 'x', '-o', 'a.wav', '--url', 'x'],\n"
            "             ['evaluate', '--bogus'], ['bench', '--bogus'], ['generate', '--bogus'],\n"
            "             *[['train', r, '--bogus'] for r in ('data', 'codec', 'asr', 'duration', 'lm', 'draft', 'ship-codec', 'ship')]):\n"
            "    codes.append(main(argv))\n"
            "print(json.dumps([codes, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    codes, heavy = json.loads(proc.stdout)
    assert codes == [2] * 14 and heavy == []
    assert len(proc.stderr.strip().splitlines()) == 14 and all(l.startswith("voicespec: error:") for l in proc.stderr.splitlines())
