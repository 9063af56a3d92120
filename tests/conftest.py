"""Every test gets its own kernel cache, so no test reads or writes ~/.cache/attnc."""
import pytest


@pytest.fixture(autouse=True)
def _private_kernel_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNC_CACHE_DIR", str(tmp_path_factory.mktemp("attnc-cache")))
