"""The engine releases of catalog/engines.json: default versions, torch pins, the planner's vLLM range.

Pure reads of one file that travels with the collection (catalog/ beside plugins/), on the controller only
(the planner, bin/llm-plan with the standard library alone, filters); nothing here runs on a managed host.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG_FILE = Path(__file__).resolve().parents[2] / "catalog" / "engines.json"


class EngineReleaseError(ValueError):
    """An engine name the catalog does not list, or a catalog file that cannot be read."""


@lru_cache(maxsize=1)
def releases() -> dict[str, Any]:
    """The whole file: ``engines`` (name -> default, torch, ...) and ``planner``."""
    try:
        data = json.loads(CATALOG_FILE.read_text())
    except (OSError, ValueError) as exc:
        raise EngineReleaseError(f"cannot read {CATALOG_FILE}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("engines"), dict):
        raise EngineReleaseError(f"{CATALOG_FILE} has no engines mapping")
    return data


def engine(name: str) -> dict[str, Any]:
    """One engine's entry; an unknown name is refused with the names the catalog has."""
    engines = releases()["engines"]
    if name not in engines:
        raise EngineReleaseError(
            f"engine {name!r} is not in {CATALOG_FILE.name}; known: {', '.join(engines)}"
        )
    return engines[name]


def default_version(name: str) -> str:
    """The release an engine installs and is planned for when the user names none."""
    return str(engine(name)["default"])


def _pair(text: str) -> tuple[int, int]:
    major, minor = str(text).split(".")[:2]
    return int(major), int(minor)


def modelled_vllm_range() -> tuple[tuple[int, int], tuple[int, int]]:
    """(major, minor) of the oldest and newest vLLM release the planner's accounting follows."""
    planner = releases()["planner"]
    return _pair(planner["vllm_oldest"]), _pair(planner["vllm_newest"])


def proven_vllm_version() -> str:
    """The vLLM release whose start-up lines the planner was checked against on a real GPU here."""
    return str(releases()["planner"]["vllm_proven"])
