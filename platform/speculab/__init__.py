"""speculab: an experiment platform for speculative decoding research.

Subpackages: ``core`` (the round loop: draft, score, verify, commit), ``verify`` (verification
algorithms), ``drafting`` (draft trees), ``models`` (model backends), ``device`` (host reads, syncs,
CUDA graphs), ``runtime`` (where the loop runs: inline or Ray actors), ``point`` (one experiment
point), ``launch`` (the Hydra entry point and launchers), ``tracking`` (MLflow), ``data`` (prompt
datasets); ``registry`` names the algorithms and drafters (docs/architecture.md has the layout).
"""

import os

__version__ = "0.1.0"

# Idle OpenMP threads sleep instead of spinning, unless the user chose otherwise. The target,
# the draft and the loop take turns on the same cores; spinning threads of one
# process starve the next (demo on 2 cores: speedup over autoregressive 1.05x -> 1.32x).
# Takes effect only if torch is not imported yet; Ray actors get it through their runtime_env.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
