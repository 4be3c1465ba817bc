"""Engine keys, one per node: what a replica's engine requires of every request.

Each node's engines accept only that node's key, so a node (or its leaked join token) that
learns its key opens nothing elsewhere. The keys are derived from the install's one secret
root (`InstallRepo.engine_key`, which only servers read from the store): every server computes
any node's key without a store write, and a node's key tells nothing of the root or of another
node's key (HMAC-SHA256).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field

PREFIX = "llmgw-engine-"
# Tells a node's key apart from any other use of the root.
_CONTEXT = b"llmgw node engine key\x00"


@dataclass(frozen=True)
class EngineKeys:
    """The install's engine keys, from their root; never in a repr, so never in a log."""

    root: str = field(repr=False)

    def for_node(self, node_id: str) -> str:
        """The key the engines of node `node_id` require, and the only one its agent gets."""
        digest = hmac.new(self.root.encode(), _CONTEXT + node_id.encode(), hashlib.sha256).digest()
        return PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def headers(self, node_id: str) -> dict[str, str]:
        """What a server sends with a request to a replica on node `node_id`."""
        return {"Authorization": f"Bearer {self.for_node(node_id)}"}
