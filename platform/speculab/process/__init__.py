"""Process control: the Hydra job a process runs, and Ctrl-C and SIGTERM held back while a write runs."""
