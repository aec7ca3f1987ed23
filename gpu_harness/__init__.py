"""The GPU harness: torch KV and Mamba pools that replay the kit's traces with real copies.

Not built yet: it will give the cache driver a memory backend whose pages are tensors (device
pool, pinned host pool, Mamba state pools), so pinning, hashing and namespace isolation are checked
on the tensors themselves, on CUDA when present and on CPU otherwise.
"""
