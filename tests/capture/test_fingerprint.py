"""The capture digest (``capture.fingerprint``): XXH3-128 of the bytes as stored, and the
bare sha256 of earlier releases checked by hashing the file again."""

from __future__ import annotations

import hashlib

import pytest
import xxhash

from gropcap.capture import fingerprint, read_capture, write_pcap


def test_digests_are_those_of_the_libraries(tmp_path):
    data = bytes(range(256)) * 100_000          # several read chunks
    p = tmp_path / "x.bin"
    p.write_bytes(data)
    want = "xxh3-128:" + xxhash.xxh3_128(data).hexdigest()
    assert fingerprint.of_bytes(data) == fingerprint.of_file(str(p)) == want
    assert fingerprint.of_file(str(p), "sha256") == \
        "sha256:" + hashlib.sha256(data).hexdigest()
    assert fingerprint.algorithm_of(want) == "xxh3-128"
    assert fingerprint.short(want) == want[:21] + "..."
    with pytest.raises(ValueError, match="unknown digest algorithm"):
        fingerprint.new("md5")


def test_a_capture_is_named_by_the_digest_of_its_file(tmp_path):
    p = tmp_path / "c.pcap"
    write_pcap(p, [bytes(60)] * 3, [1, 2, 3])
    info, _ = read_capture(p)
    assert info.digest == "xxh3-128:" + xxhash.xxh3_128(p.read_bytes()).hexdigest()


def test_matches_rehashes_a_digest_of_another_algorithm(tmp_path):
    p = tmp_path / "c.bin"
    p.write_bytes(b"capture bytes")
    now = fingerprint.of_file(str(p))
    old = fingerprint.legacy(hashlib.sha256(b"capture bytes").hexdigest())
    other = fingerprint.legacy(hashlib.sha256(b"other bytes").hexdigest())
    assert old.startswith("sha256:") and fingerprint.legacy("") == ""
    assert fingerprint.matches(now, now, None) is True
    assert fingerprint.matches(fingerprint.of_bytes(b"x"), now, str(p)) is False
    assert fingerprint.matches(old, now, str(p)) is True
    assert fingerprint.matches(other, now, str(p)) is False
    # undecidable: no file to hash again, an empty digest, an unknown algorithm
    assert fingerprint.matches(old, now, None) is None
    assert fingerprint.matches(old, now, str(tmp_path / "gone")) is None
    assert fingerprint.matches("", now, str(p)) is None
    assert fingerprint.matches("md5:00", now, str(p)) is None
