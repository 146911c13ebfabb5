"""Prompt datasets: load evaluation prompts by name and encode them for a tokenizer.

Loading (``prompts``) and encoding (``encoding``) are separate so that the driver can
load and validate prompts without any model or tokenizer. This package does not batch,
pad or truncate prompts; the model backends do that.
"""

from speculab.data.encoding import encode_prompt
from speculab.data.prompts import DATASETS, HF_SPECS, HFSpec, Prompt, check_dataset, load_prompts

__all__ = [
    "DATASETS",
    "HF_SPECS",
    "HFSpec",
    "Prompt",
    "check_dataset",
    "encode_prompt",
    "load_prompts",
]
