"""OS confinement for exec: bubblewrap where it works, else Landlock, else an honest "none".

policy.py says what a command may see and do; bwrap.py and landlock.py + keeper.py enforce
it; limits.py bounds processes, file size and memory; confine.py chooses and launches.
"""

from nanobot.sandbox import launcher
from nanobot.sandbox.confine import MODES, Confinement, Launch, choose, prefetch
from nanobot.sandbox.policy import Limits, Policy, build_policy

__all__ = [
    "MODES",
    "Confinement",
    "Launch",
    "Limits",
    "Policy",
    "build_policy",
    "choose",
    "launcher",
    "prefetch",
]
