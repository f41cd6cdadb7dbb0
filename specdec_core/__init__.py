"""specdec_core: the library behind the course on fast LLM decoding.

One module per concept, read top to bottom: ``lm`` (the KV-cache decoder), ``sampling``, ``ar``
(the baseline), ``naive`` (the tutorial's method), ``speculative`` and ``theory``, ``nf4``,
``jacobi``, ``cllm``, ``bench``; ``models`` and ``assets`` load the model pairs.
"""

from .generation import Generation

__version__ = "0.1.0"
__all__ = ["Generation", "__version__"]
