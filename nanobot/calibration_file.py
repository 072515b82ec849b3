"""What the provider counts, remembered per model between runs (`<nanobot home>/calibration.json`).

The budget learns from each answer's real prompt count how much more the provider counts than
nanobot's tokenizer (Calibration in tokens.py). Without this file every `agent -m` started from
1.0 and its first request could overflow again. One small JSON object, model -> {"ratios": recent
ratios, "surprises": how far recent requests counted above the ratio in force, whose largest is the
margin the budget's last check keeps free}, written atomically with mode 0600; a missing or damaged
file means "nothing learned yet". A file of an earlier version (model -> ratios) still reads. A
damaged or hand-edited margin (not a list of shares from 0 to MAX_MARGIN) is ignored with a warning:
trusting it could take the whole reply room, or none.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from nanobot import paths
from nanobot.fsio import atomic_write
from nanobot.tokens import MAX_MARGIN, Calibration, valid_surprises

__all__ = [
    "calibration_path",
    "forget_calibration",
    "learned_ratio",
    "load_calibration",
    "save_calibration",
]

_MODELS_KEPT = 32  # a file that names more models forgets the oldest entries


def calibration_path() -> Path:
    return paths.nanobot_home() / "calibration.json"


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    entries: dict[str, dict[str, Any]] = {}
    for model, entry in data.items():
        if isinstance(entry, list):  # written before the margin was kept
            entries[str(model)] = {"ratios": entry}
        elif isinstance(entry, dict) and isinstance(entry.get("ratios"), list):
            entries[str(model)] = entry
    return entries


def load_calibration(
    model: str, path: Path | None = None, *, warnings: list[str] | None = None
) -> Calibration:
    """A Calibration primed with what earlier runs learned for `model`; a margin that cannot be trusted
    is left out, with a line for the user added to `warnings`."""
    path = path or calibration_path()
    entry = _read(path).get(model, {})
    calibration = Calibration()
    surprises = valid_surprises(entry.get("surprises", []))
    if surprises is None:
        if warnings is not None:
            warnings.append(
                f"{path}: the context margin learned for {model} is not a list of shares from 0 to "
                f"{MAX_MARGIN}, so it was ignored (nanobot learns it again from the next answers)"
            )
        surprises = []
    calibration.prime(entry["ratios"] if entry else [], surprises)
    return calibration


def save_calibration(model: str, calibration: Calibration, path: Path | None = None) -> bool:
    """Keep `model`'s recent ratios and surprises (other models' entries stay); False when nothing
    changed or the file cannot be written (the next run then learns again: never an error for the user)."""
    path = path or calibration_path()
    data = _read(path)
    recent = [round(r, 4) for r in calibration.recent]
    # rounded up: a margin read back is never smaller than the one learned
    surprises = [min(MAX_MARGIN, math.ceil(s * 10_000) / 10_000) for s in calibration.surprises]
    entry: dict[str, Any] = {"ratios": recent, "surprises": surprises}
    if not recent or data.get(model) == entry:
        return False
    data.pop(model, None)
    data[model] = entry
    while len(data) > _MODELS_KEPT:
        data.pop(next(iter(data)))
    try:
        atomic_write(path, json.dumps(data, indent=1, sort_keys=False) + "\n", mode=0o600)
    except OSError:
        return False
    return True


def learned_ratio(model: str, path: Path | None = None) -> float:
    """The correction in force for `model` at the next start (1.0: nothing learned)."""
    return load_calibration(model, path).ratio


def forget_calibration(path: Path | None = None) -> list[str]:
    """Forget what every model's provider was seen to count (`nanobot doctor --forget-correction`): the
    way back when a correction no longer lets the fixed prompt fit, so nothing is sent that could
    correct it. The models whose entries were dropped; each learns again from its next answer."""
    path = path or calibration_path()
    models = list(_read(path))
    try:
        path.unlink()
    except FileNotFoundError:
        return []
    return models
