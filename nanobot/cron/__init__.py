"""Reminders and recurring jobs: schedules, the job store, the runner and the heartbeat."""
