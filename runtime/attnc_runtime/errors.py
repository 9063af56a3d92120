"""The one error type of the runtime.

Every refusal -- a malformed bundle, a wrong argument, an incompatible GPU, a
failing driver call -- is an `AttncRuntimeError` whose message names the thing
at fault (the manifest field, the tensor and axis, the device). Argument checks
all run before anything reaches the GPU, so a refusal never leaves a launch
half-done.
"""
from __future__ import annotations


class AttncRuntimeError(Exception):
    """A launch or a bundle the runtime refuses, with a message saying why."""


class ManifestError(AttncRuntimeError):
    """A `manifest.json` that does not follow the bundle schema."""
