"""Loading a bundle must never run code: no pickle, torch.load or np.load(allow_pickle=True) in the
bundle package, and no flwr (shared/ is importable without the federation stack)."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted((ROOT / "shared" / "bundle").glob("*.py")) + [ROOT / "shared" / "atomic.py"]
FORBIDDEN_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "joblib",
    "marshal",
    "shelve",
    "torch",
    "flwr",
    "cloudpickle",
}


def _code_without_strings_and_comments(path: Path) -> str:
    """The source with docstrings, string literals and comments removed, so prose that *says*
    "never pickle" does not trip the grep, while code that does it would."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    kept = [t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT)]
    return " ".join(kept)


def test_sources_found() -> None:
    names = {p.name for p in SOURCES}
    assert {"__init__.py", "bundle.py", "keys.py", "canonical.py", "trust.py", "atomic.py"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_grep_finds_no_code_loading(path: Path) -> None:
    code = _code_without_strings_and_comments(path)
    for pattern in (
        r"\bpickle\b",
        r"\btorch\b",
        r"allow_pickle",
        r"\bflwr\b",
        r"\bdill\b",
        r"\bmarshal\b",
        r"\beval\b",
        r"\bexec\b",
        r"\b__import__\b",
    ):
        assert not re.search(pattern, code), f"{path.name} mentions {pattern} in code"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_ast_has_no_forbidden_imports_or_loads(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            roots = set()
        assert not roots & FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {roots}"
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                assert (func.value.id, func.attr) not in {("np", "load"), ("numpy", "load")}, (
                    f"{path.name}:{node.lineno} calls {func.value.id}.load"
                )
            assert not any(kw.arg == "allow_pickle" for kw in node.keywords)


def test_import_pulls_in_neither_flwr_nor_torch() -> None:
    script = (
        "import sys, shared.bundle, shared.atomic\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'flwr', 'torch'})\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
