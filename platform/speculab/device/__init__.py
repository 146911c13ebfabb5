"""What a round asks of the GPU: host reads and synchronisations kept countable, and CUDA graphs."""
