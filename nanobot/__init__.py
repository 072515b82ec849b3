"""nanobot: a personal AI assistant that lives in the terminal."""

__version__ = "0.1.0"
