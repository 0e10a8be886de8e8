"""Every plugin's DOCUMENTATION, EXAMPLES and RETURN parse as YAML."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted(p for p in (ROOT / "plugins").glob("*/*.py") if p.parent.name != "module_utils")


def _blocks(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                    out[target.id] = node.value.value
    return out


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_documentation_blocks_are_yaml(path: Path) -> None:
    blocks = _blocks(path)
    assert "DOCUMENTATION" in blocks, f"{path} has no DOCUMENTATION"
    for text in blocks.values():
        yaml.safe_load(text)  # raises with the line and column of the problem
