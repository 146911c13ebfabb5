"""One experiment point: its plan prepared, its methods measured on its loops, its result summarised."""
