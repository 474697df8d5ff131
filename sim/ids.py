"""Identifiers shaped like the real ones, drawn from the bundle's random generator.

Parsers key on these (pod uids, instance ids, GPU UUIDs, container ids), so each has the exact
alphabet and length its system uses; a uid that is not a valid UUID or an instance id with the
wrong length would let a sloppy regex pass the simulator and fail on real data.
"""

from __future__ import annotations

import random
import string
import uuid

__all__ = [
    "Ids",
]

# Kubernetes' generated-name suffixes avoid vowels and confusable digits (k8s.io/apimachinery
# util/rand: "bcdfghjklmnpqrstvwxz2456789").
_K8S_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
_ALNUM_LOWER = string.ascii_lowercase + string.digits


class Ids:
    """Deterministic id factory over one `random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def hex(self, length: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(length))

    def uid(self) -> str:
        """A Kubernetes metadata.uid (a version-4 UUID)."""
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def upper_uuid(self) -> str:
        return self.uid().upper()

    def k8s_suffix(self, length: int = 5) -> str:
        """The random tail of generateName (`-x7k2q`)."""
        return "".join(self.rng.choice(_K8S_SUFFIX) for _ in range(length))

    def alnum(self, length: int) -> str:
        return "".join(self.rng.choice(_ALNUM_LOWER) for _ in range(length))

    def digits(self, length: int) -> str:
        first = str(self.rng.randint(1, 9))
        return first + "".join(str(self.rng.randint(0, 9)) for _ in range(length - 1))

    def gpu_uuid(self) -> str:
        """`GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52`: UUID layout, not version-4 bits."""
        raw = self.hex(32)
        return f"GPU-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"

    def instance_id(self) -> str:
        """An EC2 instance id: `i-0` and 16 hex digits."""
        return "i-0" + self.hex(16)

    def container_id(self) -> str:
        return "containerd://" + self.hex(64)

    def sha256(self) -> str:
        return "sha256:" + self.hex(64)

    def boot_id(self) -> str:
        return self.uid()

    def aws_event_id(self) -> str:
        return "instance-event-0" + self.hex(16)

    def gce_numeric_id(self) -> str:
        return self.digits(19)
