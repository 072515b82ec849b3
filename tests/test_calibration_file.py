"""The provider's count, kept per model between runs: small, private, and never a reason to fail."""

from __future__ import annotations

import json

from nanobot.calibration_file import calibration_path, load_calibration, save_calibration
from nanobot.tokens import Calibration


def test_ratios_are_kept_per_model_in_a_private_file(isolated_home):
    learned = Calibration()
    learned.observe(1000, 1600)
    assert save_calibration("anthropic/claude-x", learned)
    assert not save_calibration("anthropic/claude-x", learned)  # unchanged: no write
    other = Calibration()
    other.observe(1000, 1100)
    save_calibration("openai/gpt-y", other)
    path = calibration_path()
    assert path.parent == isolated_home and (path.stat().st_mode & 0o777) == 0o600
    assert load_calibration("anthropic/claude-x").ratio == 1.6
    assert load_calibration("openai/gpt-y").ratio == 1.1
    assert load_calibration("ollama/unknown").ratio == 1.0


def test_a_damaged_or_odd_file_means_nothing_learned(isolated_home):
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    for text in (
        "{not json",
        "[1, 2]",
        json.dumps({"m": "1.6"}),
        json.dumps({"m": [True, "x", -3, 1e9]}),
    ):
        path.write_text(text)
        assert load_calibration("m").ratio == 1.0
    path.write_text(json.dumps({"m": [1.3, 5.0]}))
    assert load_calibration("m").ratio == 2.0  # the cap still holds for a value read back


def test_the_margin_is_kept_beside_the_ratios_and_a_damaged_one_is_ignored_with_a_warning(
    isolated_home,
):
    learned = Calibration()
    for estimate, observed in ((1000, 1100), (1000, 1300), (1000, 1250)):
        learned.observe(estimate, observed)
    assert learned.margin > 0.19
    save_calibration("m", learned)
    warnings: list[str] = []
    back = load_calibration("m", warnings=warnings)
    assert back.margin >= learned.margin and back.margin - learned.margin < 1e-4 and not warnings
    path = calibration_path()
    path.write_text(json.dumps({"m": [1.3]}))  # written before the margin was kept
    assert load_calibration("m", warnings=warnings).ratio == 1.3 and not warnings
    for odd in ([0.5], [-0.1], ["0.1"], 0.1, [True], [float("nan")]):
        path.write_text(json.dumps({"m": {"ratios": [1.3], "surprises": odd}}))
        warnings = []
        back = load_calibration("m", warnings=warnings)
        assert back.ratio == 1.3 and back.margin == 0.0
        assert len(warnings) == 1 and "context margin learned for m" in warnings[0], odd
