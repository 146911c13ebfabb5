"""The verifier contracts: a wrong-shaped input is refused at the registry's boundary, naming
the tensor and the shape it should have; well-formed inputs pass through unchanged."""

from __future__ import annotations

import pytest
import torch

from speculab.drafting.best_first import chain_tree
from speculab.registry import get_verifier
from speculab.verify import ContractError

B, K, L, V = 2, 3, 4, 5


def path_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(B, K, L + 1, V, generator=gen), -1)
    q = torch.softmax(torch.randn(B, K, L, V, generator=gen), -1)
    paths = torch.multinomial(q.reshape(-1, V), 1, generator=gen).reshape(B, K, L)
    return paths, p, q


@pytest.mark.parametrize(
    ("bad", "named", "expected"),
    [
        ("paths_float", "paths", "[B, K, L] int64"),
        ("paths_2d", "paths", "[B, K, L] int64"),
        ("p_short", "p", f"[{B}, {K}, {L + 1}, V]"),
        ("p_int", "p", "floating"),
        ("q_vocab", "q", f"[{B}, {K}, {L}, {V}]"),
        ("q_paths", "q", f"[{B}, {K}, {L}, {V}]"),
    ],
)
def test_wrong_path_inputs_name_the_tensor_and_its_shape(bad: str, named: str, expected: str) -> None:
    paths, p, q = path_inputs()
    broken = {
        "paths_float": (paths.double(), p, q),
        "paths_2d": (paths[:, 0], p, q),
        "p_short": (paths, p[:, :, :L], q),
        "p_int": (paths, p.long(), q),
        "q_vocab": (paths, p, q[..., :-1]),
        "q_paths": (paths, p, q[:, :1]),
    }[bad]
    with pytest.raises(ContractError) as err:
        get_verifier("block")(*broken, rng=torch.Generator())
    message = str(err.value)
    assert message.startswith(f"{named}: expected") and expected in message


def test_well_formed_inputs_reach_the_verifier() -> None:
    paths, p, q = path_inputs()
    verdict = get_verifier("gbv")(paths, p, q, rng=torch.Generator().manual_seed(0))
    assert verdict.tokens.shape == (B, L + 1)


def test_tree_verifier_checks_p_against_the_tree() -> None:
    q = torch.softmax(torch.randn(B, L, V), -1)
    tree = chain_tree(q, torch.zeros(B, dtype=torch.long))
    N = tree.tokens.shape[1]
    walk = get_verifier("ddtree")
    assert walk(tree, torch.softmax(torch.randn(B, N, V), -1), rng=torch.Generator()).tokens.shape[0] == B
    with pytest.raises(ContractError, match=rf"p: expected \[B, N, V\] floating = \[{B}, {N}, V\]"):
        walk(tree, torch.softmax(torch.randn(B, N + 1, V), -1), rng=torch.Generator())
