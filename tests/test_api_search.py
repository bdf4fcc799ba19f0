"""A search over the public API of the modules that measure heads, driven by signatures.

Every public function, class and method of the analysis, detector, model, training, cost and
display modules, of :mod:`mha.core.params`, :mod:`mha.core.packing` and
:mod:`mha.core.kv_cache` has one valid call in ``tests/api_cases.py``. From its signature and
docstring, ``tests/api_search.py`` derives how each argument can go wrong (wrong types, NaN
and infinity, zero, negative and huge sizes, NumPy scalars, another container, grouped-query
parameters, empty batches). Every call the search makes must get mha's own ``ValueError`` or
``TypeError`` naming the argument, or a result that a reference confirms (see
``api_search``'s docstring); a refused call must change no state.

``make test`` runs a fixed budget of :data:`EXAMPLES` generated calls (plus every valid
call once); set ``MHA_SEARCH_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import functools
import inspect
import os

import numpy as np
from api_cases import CASES, RECORDS
from api_search import (
    Case,
    Mutation,
    assert_same,
    doc_args,
    finite,
    mutations,
    names_the_argument,
    outcome,
    parameters,
    structure,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_docstrings import public_callables

from mha.core.params import repeat_kv_heads

ZONE = (
    "mha.analysis.", "mha.detectors.", "mha.models.", "mha.training.", "mha.cost.",
    "mha.display.", "mha.core.params.", "mha.core.packing.", "mha.core.kv_cache.",
)  # fmt: skip
EXAMPLES = int(os.environ.get("MHA_SEARCH_EXAMPLES", "300"))


def test_every_public_callable_has_a_case():
    """A new public callable must bring its valid call and check (or be a record)."""
    public = {name for name, _ in public_callables() if name.startswith(ZONE)}
    assert sorted(public - set(CASES) - set(RECORDS)) == []
    assert sorted((set(CASES) | set(RECORDS)) - public) == []


def test_every_argument_is_documented_and_every_check_stated():
    """The search reads each argument's docstring entry; a callable with arguments states,
    in a ``Raises:`` section, what it checks."""
    missing, unstated = [], []
    for name, case in CASES.items():
        documented = doc_args(case.fn)
        missing += [f"{name}({p})" for p in parameters(case.fn) if p not in ("self", "cls")
                    and p not in documented]  # fmt: skip
        takes = [p for p in parameters(case.fn) if p not in ("self", "cls")]
        if takes and "Raises:" not in (inspect.getdoc(case.fn) or ""):
            unstated.append(name)
    assert missing == [] and unstated == []


def _args(case: Case, seed: int) -> dict:
    return case.build(np.random.default_rng(seed))


def test_the_valid_call_of_every_callable_gives_the_checked_result():
    failures = []
    for name, case in CASES.items():
        if not case.run:
            continue
        args = _args(case, 0)
        try:
            kind, result = outcome(case, args)
            assert kind == "ok", f"refused: {result}"
            if case.check is not None:
                case.check(args, result)
        except Exception as error:  # noqa: BLE001 (every case is reported, then the test fails)
            failures.append(f"{name}: {type(error).__name__}: {error}"[:400])
    assert failures == [], "\n".join(failures)


@functools.cache
def _all_mutations() -> list[tuple[str, int]]:
    """Every (case, mutation) pair the search draws from; a case that does not run here
    (timings, worker processes, files) contributes its refusals only."""
    out = []
    for name, case in sorted(CASES.items()):
        for i, m in enumerate(mutations(name, case, _args(case, 0))):
            if case.run or m.expect == "bad":
                out.append((name, i))
    return out


def check_mutation(name: str, seed: int, index: int) -> str:
    """Make one mutated call of ``CASES[name]`` and judge it; return what happened."""
    case = CASES[name]
    args = _args(case, seed)
    # The index is drawn from seed 0's mutations; another seed can offer fewer (an optional
    # argument drawn as None has no mutations of its value).
    offered = mutations(name, case, args)
    m: Mutation = offered[index % len(offered)]
    changed = dict(args, **{m.arg: m.change(args[m.arg])})
    before = case.state(changed) if case.state else None
    kind, result = outcome(case, changed)
    where = f"{name}({m.arg}: {m.label})"
    if kind == "error":
        assert m.expect != "same", f"{where} refused an argument it must accept: {result}"
        assert m.error is None or m.expect != "bad" or isinstance(result, m.error), (
            f"{where} must raise {m.error.__name__}; got {type(result).__name__}: {result}"
        )
        assert names_the_argument(result, m.arg, case) or (
            m.expect == "gqa" and names_the_argument(result, "num_kv_heads", case)
        ), f"{where}: the message does not name {m.arg}: {result}"
        if case.state:
            assert_same(case.state(changed), before, where=f"{where}: the state after a refusal")
        return f"{m.expect}: refused"
    assert m.expect != "bad", f"{where} accepted a bad argument and returned {result!r:.200}"
    if m.expect in ("same", "same_or_error"):
        _, want = outcome(case, _args(case, seed))
        if case.deterministic:
            assert_same(result, want, where=where)
        else:
            assert structure(result) == structure(want), where
    elif m.expect == "gqa" and case.gqa == "check":  # the result keeps the grouped layout
        if case.check is not None:
            case.check(changed, result)
    elif m.expect == "gqa":
        assert case.gqa != "refuse", f"{where} accepted grouped-query parameters"
        per_head = dict(_args(case, seed), **{m.arg: repeat_kv_heads(changed[m.arg])})
        _, want = outcome(case, per_head)
        assert_same(result, want, case.gqa_tol, where=where)
    else:
        nan_in = m.label in ("nan", "inf")  # NaN in, NaN out: what a mover returns
        assert nan_in or finite(result), f"{where} returned NaN or infinity: {result!r:.200}"
        if case.check is not None and case.any_args:
            case.check(changed, result)
    return f"{m.expect}: answered"


def test_every_refusal_and_every_grouped_query_call_once():
    """Every bad argument of every callable (refusals are cheap) and every grouped-query
    call, with seed 0, so that none depends on being drawn; every failure is listed."""
    failures = []
    for name, index in _all_mutations():
        case = CASES[name]
        m = mutations(name, case, _args(case, 0))[index]
        if m.expect not in ("bad", "gqa"):
            continue
        try:
            check_mutation(name, 0, index)
        except AssertionError as error:
            failures.append(str(error)[:300])
    assert failures == [], "\n".join(failures)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_generated_calls_get_mhas_error_or_a_confirmed_result(data):
    """Any mutation of any callable, with a drawn seed (the arrays and sizes it builds)."""
    name, index = data.draw(st.sampled_from(_all_mutations()), label="mutation")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    event(check_mutation(name, seed, index))
