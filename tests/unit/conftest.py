"""The pure modules of plugins/module_utils import each other by plain name when loaded as files."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
