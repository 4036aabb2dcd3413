"""Is the Hugging Face hub worth asking? One quick answer shared by the model and data loaders.

Offline, a hub call can hang on DNS or retries for a long time; students should instead get the
offline stand-in or the toy data within a couple of seconds.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

from huggingface_hub import constants as hub_constants

PROBE_TIMEOUT_S = 2.0
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_requested() -> bool:
    """True when HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE or HF_DATASETS_OFFLINE asks for no network."""
    flags = (os.environ.get(name, "") for name in OFFLINE_VARIABLES)
    return bool(hub_constants.HF_HUB_OFFLINE) or any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Can we open a TCP connection to the hub (or the HTTPS proxy) within ``timeout`` seconds?

    The connect runs in a daemon thread joined with ``timeout``, so that even a hanging DNS lookup
    (which a socket timeout does not cover) cannot hold the caller for longer.
    """
    if offline_requested():
        return False
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlsplit(proxy or hub_constants.ENDPOINT)
    if url.hostname is None:
        return False
    address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
    reached = []

    def probe() -> None:
        try:
            socket.create_connection(address, timeout=timeout).close()
            reached.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(reached)
