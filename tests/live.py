"""The live-kernel test marker: root, Linux and `ip netns` (the replay's own check)."""

from __future__ import annotations

import pytest

from gropcap.errors import GropcapError


def live_reason() -> str | None:
    """Why the live kernel replay cannot run here, or None."""
    from gropcap.replay._netns import check_environment
    try:
        check_environment()
    except GropcapError as e:
        return str(e)
    return None


LIVE_REASON = live_reason()
live = pytest.mark.skipif(LIVE_REASON is not None,
                          reason=f"live kernel replay unavailable: {LIVE_REASON}")
