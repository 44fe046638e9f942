"""Report lines about the receive context: the parameters in use and where each came
from, how much of the napi result depends on them, and UDP tunnels that met no tunnel
socket (the values and hints are computed by ``run/hints.py``; this renders them).
"""

from __future__ import annotations

import textwrap

from gropcap.run.hints import POLL_END_REASONS


def _wrap(lines, width):
    return [w for line in lines for w in textwrap.wrap(
        line, width=width, subsequent_indent="  ", break_on_hyphens=False)]


def receive_lines(summary: dict, width: int = 80) -> list[str]:
    """The text report's receive-context lines: the MTU and its evidence, and the
    parameters grouped by where they came from."""
    from gropcap.gro.mtu import MtuInference

    lines = []
    if summary.get("mtu"):
        lines.append(MtuInference(**summary["mtu"]).line())
    rc = summary.get("receive")
    if rc:
        groups: dict[str, list[str]] = {}
        for name, e in rc.items():
            if name == "mtu":
                continue
            groups.setdefault(e["source"], []).append(f"{name} {e['value']}")
        for source, label in (("option", "given"), ("profile", "from the profile"),
                              ("inferred", "inferred"), ("default", "defaults")):
            if groups.get(source):
                lines.append(f"receive context, {label}: " + ", ".join(groups[source]))
    return _wrap(lines, width)


def dependence_lines(summary: dict, width: int = 80) -> list[str]:
    """How much of the napi result the receive context decides (one paragraph)."""
    lines = []
    dep = summary.get("napi_dependence")
    if dep and dep["superpackets"]:
        parts = [f"{100 * dep['shares'][k]:.0f}% by {v}" for k, v in POLL_END_REASONS.items()]
        text = (f"napi depends on them: of its {dep['superpackets']} super-packets "
                f"{', '.join(parts)}")
        if "ideal_ratio" in dep:
            text += (f"; ratio napi {dep['napi_ratio']:.2f}, ideal {dep['ideal_ratio']:.2f} "
                     f"(no polls, unlimited table)")
        lines.append(text)
    hint = summary.get("poll_acks_hint")
    if hint:
        lines.append(f"poll ends: {hint['directions']} TCP data direction"
                     f"{'s' if hint['directions'] != 1 else ''} with the receiver's ACKs in "
                     f"the capture; if that receiver had GRO on, {hint['option']} infers "
                     f"the napi polls from its ACKs instead of from the timing "
                     f"(docs/gro-model.md)")
    return _wrap(lines, width)


def tunnel_lines(hint: dict | None, width: int = 80) -> list[str]:
    """One paragraph when UDP tunnels met no tunnel socket (see :func:`tunnel_hint`)."""
    if not hint:
        return []
    what = ", ".join(f"{t['packets']} {t['kind'].upper()} packets on UDP {t['port']}"
                     for t in hint["tunnels"])
    text = (f"tunnel sockets: {what} met no tunnel socket, so GRO saw plain UDP "
            f"(BYPASS_UDP_NO_GRO). A receiver with that tunnel device ({hint['option']})")
    models = hint["models"] or {}
    if models:
        text += " gives: " + ", ".join(
            f"{m} {r['ratio']:.2f} -> {r['ratio_with']:.2f}" for m, r in models.items())
    left = hint.get("left_out")
    if left and models:
        text += f"; {', '.join(left)} not run again (too many rows): run with it"
    elif not models:
        text += " was not modelled again (too many rows, or streamed): run with it"
    return _wrap([text], width)


__all__ = ["receive_lines", "dependence_lines", "tunnel_lines"]
