"""What the provider counts, remembered per model between runs (`<nanobot home>/calibration.json`).

The budget learns from each answer's real prompt count how much more the provider counts than
nanobot's tokenizer (Calibration in tokens.py). Without this file every `agent -m` started from
1.0 and its first request could overflow again. One small JSON object, model -> recent ratios,
written atomically with mode 0600; a missing or damaged file means "nothing learned yet".
"""

from __future__ import annotations

import json
from pathlib import Path

from nanobot import paths
from nanobot.fsio import atomic_write
from nanobot.tokens import Calibration

__all__ = ["calibration_path", "load_calibration", "save_calibration"]

_MODELS_KEPT = 32  # a file that names more models forgets the oldest entries


def calibration_path() -> Path:
    return paths.nanobot_home() / "calibration.json"


def _read(path: Path) -> dict[str, list[float]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, list)}


def load_calibration(model: str, path: Path | None = None) -> Calibration:
    """A Calibration primed with what earlier runs learned for `model`."""
    calibration = Calibration()
    calibration.prime(_read(path or calibration_path()).get(model, []))
    return calibration


def save_calibration(model: str, calibration: Calibration, path: Path | None = None) -> bool:
    """Keep `model`'s recent ratios (other models' entries stay); False when nothing changed or the
    file cannot be written (the next run then learns again: never an error for the user)."""
    path = path or calibration_path()
    data = _read(path)
    recent = [round(r, 4) for r in calibration.recent]
    if not recent or data.get(model) == recent:
        return False
    data.pop(model, None)
    data[model] = recent
    while len(data) > _MODELS_KEPT:
        data.pop(next(iter(data)))
    try:
        atomic_write(path, json.dumps(data, indent=1, sort_keys=False) + "\n", mode=0o600)
    except OSError:
        return False
    return True
