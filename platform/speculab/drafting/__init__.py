"""How drafts are drawn: `DraftTree` and `Proposal` (prefix merging, ancestor masks, position
ids), i.i.d. K-path sampling from an autoregressive draft (`iid`), DDTree trees from per-depth
marginals (`best_first`, `ddtree`) and the sampling distributions (`sampling`). Knows no model
backend, Ray or MLflow."""
