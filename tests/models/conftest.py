"""The machines that run these tests reach no Hugging Face hub: every test is offline, as a
user with HF_HUB_OFFLINE=1 is (a hub model id is read from the hub cache or refused at once)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
