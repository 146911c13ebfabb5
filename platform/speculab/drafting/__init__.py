"""Draft trees and how drafts are drawn: `DraftTree` (prefix merging, ancestor masks, position
ids), i.i.d. K-path sampling from an autoregressive draft, and sampling distributions.
Imports only torch; knows no model backend, Ray or MLflow."""
