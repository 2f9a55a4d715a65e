"""Hand-written kernels that cubeplug.std replaced, kept as reference figures for the bench scripts."""
