"""Per-target kernel builders, PTX/cubin, bundles and the kernel cache."""
