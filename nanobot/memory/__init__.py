"""What the assistant remembers: the MEMORY.md door, the HISTORY.md log, and their checks."""
