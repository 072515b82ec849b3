"""A session on disk: the JSONL store, the rules that keep a history valid, nanobot's sessions copied in."""
