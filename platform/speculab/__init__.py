"""speculab: an experiment platform for speculative decoding research.

Subpackages: ``verify`` (verification algorithms), ``drafting`` (draft trees), ``models``
(model backends), ``runtime`` (Ray actors), ``tracking`` (metrics and MLflow), ``data``
(prompt datasets); ``engine`` runs the decoding loop and ``cli`` is the Hydra entry point.
"""

__version__ = "0.1.0"
