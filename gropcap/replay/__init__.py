"""Live-kernel replay: crafted or captured frames through a real veth GRO receiver.

``replay(frames, bursts)`` (kernel.py) injects frames into fresh network namespaces and
records the super-packets the kernel built; ``compare(...)`` (compare.py) sets them against
the simulator's; ``kernel_replay`` (command.py) is the CLI command. Needs Linux and root.
"""

from gropcap.replay.kernel import (DeliveredUnit, KernelReplayResult, ReplaySession,
                                   replay, running_kernel)

__all__ = ["replay", "ReplaySession", "KernelReplayResult", "DeliveredUnit",
           "running_kernel"]
