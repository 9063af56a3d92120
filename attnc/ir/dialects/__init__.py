"""The Python modules MLIR's bindings look up for dialects that attnc defines
(Note [Dialect modules] in attnc/ir/context.py)."""
