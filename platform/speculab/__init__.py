"""speculab: an experiment platform for speculative decoding research.

Subpackages: ``verify`` (verification algorithms), ``drafting`` (draft trees), ``models``
(model backends), ``runtime`` (Ray actors), ``tracking`` (metrics and MLflow), ``data``
(prompt datasets); ``engine`` runs the decoding loop and ``cli`` is the Hydra entry point.
"""

import os

__version__ = "0.1.0"

# Idle OpenMP threads sleep instead of spinning, unless the user chose otherwise. The target,
# the draft and the loop take turns on the same cores; spinning threads of one
# process starve the next (demo on 2 cores: speedup over autoregressive 1.05x -> 1.32x).
# Takes effect only if torch is not imported yet; Ray actors get it through their runtime_env.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
