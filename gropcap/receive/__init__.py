"""The receive context: what a capture does not show about the receiver, with where each
value came from.

- ``context.py``: ``ReceiveContext``, each receive parameter's value and source (default,
  inferred, profile, option);
- ``profile.py``: receiver profiles (TOML) written by ``gropcap calibrate`` and applied by
  ``--receiver``;
- ``ackpolls.py``: ``--poll-acks``, NAPI poll ends from the receiver's ACKs in the capture.

The device MTU and its inference live with the GRO input (``gro/mtu.py``).
"""
