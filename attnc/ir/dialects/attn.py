"""The attn dialect's Python module, as MLIR's bindings look it up (Note [Dialect modules]
in attnc/ir/context.py). IRDL defines the ops, with no Python classes: it registers none."""
