"""Tests of the CUDA backend."""
