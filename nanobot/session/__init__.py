"""A session on disk: the JSONL store, the rules that keep a history valid, the save policy and the
runtime-context block, nanobot's sessions copied in."""
