"""Every CLI test starts with no user passes registered and ATTNC_DEBUG unset."""
import pytest

from attnc.passes import registry


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    monkeypatch.setattr(registry, "_user_passes", {})
    monkeypatch.setattr(registry, "_user_origins", {})
    monkeypatch.delenv("ATTNC_DEBUG", raising=False)
