"""Model definitions built from the tensor-parallel layers."""
