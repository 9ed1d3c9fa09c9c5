"""Tensor-parallel building blocks; each rank holds its shard and joins the collectives of its layer."""
