#!/usr/bin/env python3
"""Run the fake LLM server for manual demos: `python scripts/fake_llm_server.py --port 8765 --script replies.json`.

Point nanobot at it with a `custom` provider whose apiBase is the printed URL + "/v1".
Same as `python -m nanobot.fakellm`; see --help.
"""

import sys

from nanobot.fakellm.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
