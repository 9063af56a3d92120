"""Target recipes and the scheduling decisions the L3-L5 passes record in the IR.

Everything here is plain data and pure functions over it, so the passes
(`attn-warp-specialize`, `attn-alloc-smem`, `attn-alloc-tmem`,
`attn-insert-pipelines`) stay thin: read IR attributes, call a function here,
write the result back as ops. Targets differ only in their `Recipe`.
"""
