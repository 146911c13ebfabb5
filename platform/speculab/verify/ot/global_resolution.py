"""Global resolution (Alg. 1): the OT slice from truncated convex problems (Sec. 6).

Steps: H* by the best q/p prefix (Lemma 6.3); outer residuals in closed form (Thm 6.2); then,
for the drafted tuple's system only, minimise Phi_T (outer, Thm 6.4) or Theta_T (inner,
Thm 6.5) over the smallest truncation T whose tunable error eps_T / gamma_T is at most tau,
with grouped LogSumExp terms (App. K) and SciPy's L-BFGS-B. The softmax solutions (eq. 14,
17) give the slice (eq. 18). A solve fails when |T| exceeds its limit or the gradient stays
above threshold after the iteration budget (App. K); the caller then falls back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from speculab.verify.ot.columns import PAD, grouped_weights, subsets
from speculab.verify.ot.plan import AcceptedSlice, TransportPlan, slackness_plan
from speculab.verify.ot.subset import best_subset, outer_residuals

# Hard limits on |T| per draft count n (App. K); larger n uses the last one.
TRUNCATION_LIMITS = {1: 50, 2: 50, 3: 20, 4: 10, 5: 10}
MAX_ITERATIONS = 25
# Clamp for log(0) in starting points: e^-69 is far below any tolerance we resolve.
LOG_FLOOR = -69.0


@dataclass(frozen=True)
class TruncatedProblem:
    """Phi_T (eq. 12) or Theta_T (eq. 15) with one LogSumExp term per set (eq. 118, 120)."""

    # [m, n] indices into T of each term's tokens, PAD-filled
    terms: np.ndarray
    # [m] grouped coefficient of each term
    weight: np.ndarray
    # [t] linear coefficients: p_i (outer) or p(i) (inner)
    target: np.ndarray
    # Theta_T has the slack e^0 = 1 inside every LogSumExp
    slack: bool


@dataclass(frozen=True)
class ConvexSolution:
    # [t] final point
    alpha: np.ndarray
    # ||grad||_1 at alpha
    grad_norm: float


# alpha [t]
def value_and_grad(problem: TruncatedProblem, alpha: np.ndarray) -> tuple[float, np.ndarray]:
    """Phi_T or Theta_T and its gradient: sum_I w_I softmax_I(i) - target(i)."""
    valid = problem.terms != PAD
    logits = np.where(valid, alpha[np.maximum(problem.terms, 0)], -np.inf)
    if problem.slack:
        logits = np.concatenate((logits, np.zeros((logits.shape[0], 1))), axis=1)
    top = logits.max(axis=1, keepdims=True)
    exp = np.exp(logits - top)
    total = exp.sum(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(total[:, 0])
    share = (exp[:, : valid.shape[1]] / total) * problem.weight[:, None]
    grad = np.bincount(problem.terms[valid], share[valid], minlength=alpha.shape[0]) - problem.target
    return float(problem.weight @ lse - problem.target @ alpha), grad


# alpha0 [t]
def minimize_truncated(
    problem: TruncatedProblem, alpha0: np.ndarray, grad_tol: float, max_iter: int = MAX_ITERATIONS
) -> ConvexSolution:
    """L-BFGS-B until ||grad||_1 <= grad_tol or `max_iter` iterations (App. K)."""
    last: dict[str, np.ndarray] = {}

    def fun(alpha: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = value_and_grad(problem, alpha)
        last["alpha"], last["grad"] = alpha.copy(), grad
        return value, grad

    def stop_when_small(intermediate_result) -> None:
        # L-BFGS-B's own gtol is an inf-norm; the guarantee of Thm 6.4-6.5 needs the L1 norm
        if np.array_equal(intermediate_result.x, last["alpha"]) and np.abs(last["grad"]).sum() <= grad_tol:
            raise StopIteration

    if np.abs(fun(alpha0)[1]).sum() <= grad_tol:
        return ConvexSolution(alpha0, float(np.abs(last["grad"]).sum()))
    result = minimize(
        fun,
        alpha0,
        jac=True,
        method="L-BFGS-B",
        callback=stop_when_small,
        options={"maxiter": max_iter, "gtol": 0.0, "ftol": 0.0},
    )
    return ConvexSolution(result.x, float(np.abs(value_and_grad(problem, result.x)[1]).sum()))


# q_sorted [r] (decreasing)
def truncation_size(q_sorted: np.ndarray, base: float, n: int, tau: float) -> int:
    """Smallest |T| among the largest-q tokens with tunable error <= tau, and that error.

    The error is eps_T = 1 - (q(H* u T))^n (eq. 13, base = q(H*)) for the outer system and
    gamma_T = q(H*)^n - q(T)^n (eq. 16, base = 0) for the inner one.
    """
    reach = base + np.concatenate(([0.0], np.cumsum(q_sorted)))
    errors = reach[-1] ** n - reach**n
    return int(np.argmax(errors <= tau))


# q [k], tokens [r], target [r]
def solve_system(
    q: np.ndarray,
    n: int,
    tokens: np.ndarray,
    target: np.ndarray,
    inner: bool,
    tau: float,
    max_iter: int,
) -> AcceptedSlice:
    """Softmax parameters of the inner (Thm 6.5) or outer (Thm 6.4) system, as slices.

    tokens are H* (inner) or V \\ H* (outer); target is p(i) or p_i on them. Returns a slice
    function that yields None when the truncated solve failed (Alg. 1 lines 4-5, 7-8).
    """
    k = q.shape[0]
    base = 0.0 if inner else float(q.sum() - q[tokens].sum())
    alpha = np.full(k, -np.inf)
    alpha[tokens] = starting_point(q, n, tokens, target, inner)
    by_q = np.argsort(-q[tokens], kind="stable")
    size = truncation_size(q[tokens][by_q], base, n, tau)
    if size > TRUNCATION_LIMITS.get(n, TRUNCATION_LIMITS[5]):
        return failed_slice
    truncated = tokens[by_q[:size]]
    if size > 0:
        error = float((base + q[tokens].sum()) ** n - (base + q[truncated].sum()) ** n)
        terms = subsets(size, n)
        problem = TruncatedProblem(
            terms=terms,
            weight=grouped_weights(np.where(terms == PAD, PAD, truncated[np.maximum(terms, 0)]), q, n, base),
            target=target[by_q[:size]],
            slack=inner,
        )
        # ||grad||_1 + 3 * error is the L1 deviation (Thm 6.4-6.5); Lemma 6.6 wants 5 * tau
        solution = minimize_truncated(problem, alpha[truncated], 5 * tau - 3 * error, max_iter)
        if solution.grad_norm > 5 * tau - 3 * error:
            return failed_slice
        alpha[truncated] = solution.alpha
    return functools.partial(softmax_slice, alpha, inner)


# q [k], tokens [r], target [r]
def starting_point(q: np.ndarray, n: int, tokens: np.ndarray, target: np.ndarray, inner: bool) -> np.ndarray:
    """[r] alpha where each token's own softmax share would meet its target alone.

    Outer: alpha_i = log p_i (the softmax is scale-free). Inner: with rho_i the mass of the
    (H*)^n tuples containing i, e^a / (1 + e^a) = p(i) / rho_i. Tokens outside T keep it.
    """
    if not inner:
        return np.maximum(np.log(np.maximum(target, 0.0) + 1e-300), LOG_FLOOR)
    total = q[tokens].sum()
    rho = total**n - (total - q[tokens]) ** n
    ratio = target / np.maximum(rho - target, 1e-300)
    return np.maximum(np.log(ratio + 1e-300), LOG_FLOOR)


# alpha [k] (-inf off the system), omega [n]
def softmax_slice(alpha: np.ndarray, slack: bool, omega: np.ndarray) -> np.ndarray:
    """[k] the accepted slice S_{., omega} / p_draft(omega) of eq. 14 or eq. 17."""
    members = np.unique(omega)
    logits = alpha[members]
    top = max(float(logits.max()), 0.0 if slack else -np.inf)
    norm = np.exp(logits - top).sum() + (np.exp(-top) if slack else 0.0)
    accepted = np.zeros(alpha.shape[0])
    accepted[members] = np.exp(logits - top) / norm
    return accepted


# omega [n]
def failed_slice(omega: np.ndarray) -> np.ndarray | None:
    """The slice of a system whose truncated solve failed."""
    return None


# p [k], q [k]
def solve_global_resolution(
    p: np.ndarray, q: np.ndarray, n: int, tau: float = 1e-3, max_iter: int = MAX_ITERATIONS
) -> TransportPlan:
    """Alg. 1: a plan within 10 tau of alpha* and 15 tau of p in L1 where it succeeds (Lemma 6.6)."""
    selection = best_subset(p, q, n)
    p_res = outer_residuals(selection, p)
    best, rest = selection.best_subset, selection.order[selection.size :]
    solve = functools.partial(solve_system, q, n, tau=tau, max_iter=max_iter)
    return slackness_plan(
        selection,
        p_res,
        functools.partial(solve, best, p[best], True),
        functools.partial(solve, rest, (p - p_res[:-1])[rest], False),
    )
