"""The budget rows both status screens print (`/status` and `nanobot status`)."""

from __future__ import annotations

from nanobot.agent.budget import BudgetSnapshot
from nanobot.cli.status_view import budget_rows


def _estimator(ratio: float) -> str:
    snap = BudgetSnapshot(
        configured_window=6000,
        window=6000,
        reply_tokens=1000,
        budget=5000,
        prompt_cap=0,
        fixed=3500,
        estimate=4000,
        ratio=ratio,
        estimator="cl100k_base, exact (offline ranks)",
        max_tool_calls=32,
    )
    return dict(budget_rows(snap))["estimator"]


def test_the_estimator_row_names_a_correction_only_when_there_is_one():
    # a provider counting 0.1% above nanobot showed "corrected x1.00 by the provider's counts"
    assert _estimator(1.001) == "cl100k_base, exact (offline ranks)"
    assert _estimator(1.0) == "cl100k_base, exact (offline ranks)"
    assert _estimator(1.3).endswith(", corrected x1.30 by the provider's counts")


def test_the_compaction_row_shows_where_consolidation_starts_below_the_budget():
    # consolidateAboveTokens (100,000 by default) below a large window's budget: at "8%" of the
    # budget the user could not tell that the next turn compacts
    base = dict(
        configured_window=65_536,
        window=65_536,
        reply_tokens=1000,
        budget=64_536,
        prompt_cap=0,
        fixed=3500,
        estimate=4900,
        ratio=1.0,
        estimator="cl100k_base, exact (offline ranks)",
        max_tool_calls=32,
    )
    rows = dict(budget_rows(BudgetSnapshot(**base, consolidate_at=5000)))
    assert rows["compaction"] == (
        "starts at ~5,000 tokens (8% of the budget; agents.defaults.consolidateAboveTokens)"
    )
    assert "compaction" not in dict(budget_rows(BudgetSnapshot(**base, consolidate_at=64_536)))
