"""The GPU harness: the kit's traces replayed on real torch KV and Mamba pools.

``TensorMemory`` gives the drivers the same interface as the kit's shadow memory, over a device
KV pool and a host KV pool (pinned on CUDA) laid out as an engine lays them out; copies are
batched ``index_select`` / ``index_copy_`` with the transfers on a side stream. The memory
oracles then judge the tensors: content and namespace of every page read, pinned pages that
never change, block hashes recomputed from what the pages hold. The hybrid level's pages and
Mamba states live in pools of their own (``hybrid.TensorHybridStore``). Runs on CUDA when
present and on CPU everywhere else.
"""

import warnings

# A CPU torch without NumPy warns at import; the harness never converts to NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
