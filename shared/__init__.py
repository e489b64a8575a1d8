"""InfoShape-FL's library: data, MI estimators, shapers, attackers, bundles.

Pure Python + torch/numpy/sklearn; it never imports flwr, so a hospital can encode, and an auditor
can score, without the federation stack.
"""

__version__ = "0.1.0"
