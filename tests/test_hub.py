"""The hub probe: a quick yes/no that never holds a student for long when offline."""

import socket
import threading

import huggingface_hub

from adapterlab import hub


def test_hub_probe_gives_up_within_its_timeout(monkeypatch):
    """A connection that never answers (a black-holed network) must not block the caller."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    release = threading.Event()

    def never_answers(*args, **kwargs):
        release.wait()
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_answers)
    try:
        assert hub.hub_reachable(timeout=0.1) is False
    finally:
        release.set()


def test_hub_probe_reports_a_reachable_host_and_targets_the_endpoint(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "https://hub.example:8443")
    addresses = []

    class Connection:
        def close(self):
            pass

    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: addresses.append(address) or Connection())
    assert hub.hub_reachable() is True
    assert addresses == [("hub.example", 8443)]


def test_every_offline_variable_skips_the_network(monkeypatch):
    calls = []
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in hub.OFFLINE_VARIABLES:
        for other in hub.OFFLINE_VARIABLES:
            monkeypatch.delenv(other, raising=False)
        monkeypatch.setenv(name, "1")
        assert hub.offline_requested() and hub.hub_reachable() is False
    assert calls == []
