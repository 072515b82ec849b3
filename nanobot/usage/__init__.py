"""What the assistant spent: the usage ledger, today's spend, the hard limits, the reports."""
