"""The runtime's environment variable ATTNC_POISON_SCRATCH reads booleans as the
compiler's variables do (README, Environment)."""
import pytest

from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.kernel import POISON_ENV, poison_requested


@pytest.mark.parametrize("text, on", [(None, False), ("", False), ("0", False), ("false", False),
                                      ("Off", False), ("no", False), ("1", True), ("true", True),
                                      (" YES ", True), ("on", True)])
def test_poison_scratch_is_a_boolean(text, on):
    environ = {} if text is None else {POISON_ENV: text}
    assert poison_requested(environ) is on


def test_a_malformed_value_is_refused():
    with pytest.raises(AttncRuntimeError, match="ATTNC_POISON_SCRATCH='maybe' is not a boolean"):
        poison_requested({POISON_ENV: "maybe"})


def test_the_runtime_spells_booleans_as_the_compiler_does():
    """The runtime cannot import attnc.config (it runs without the compiler): the two
    vocabularies are kept in step here."""
    config = pytest.importorskip("attnc.config")
    from attnc_runtime import kernel
    assert (kernel._TRUE, kernel._FALSE) == (config._TRUE, config._FALSE)
