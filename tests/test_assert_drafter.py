"""`specjax.testing.assert_drafter` (issue 60 item 5): every check of the kit in one call, that cannot be fooled.

* a correct drafter written outside the package passes the quick profile, every check reported, and the
  profile's time is measured (docs/reusing.md states it: <= 60 s on 2 cores);
* each of the six invalid-tree bugs the issue planted (a parent pointing forward, a branch under the wrong
  parent, a budget one short, `max_depth` one short, depths one too deep, depths one too shallow) fails it,
  naming what is wrong (check_proposals, its first step, names the rule);
* the conformance check at T = 1 tests what the drafter decides: a chain that proposes its draft LM's argmax
  while reporting the draft's full law (greedy output and the first token untouched) fails the law of the
  first round's tokens (on the zoo at top-k 3: its draft LM does not fit the 4-token law target), while the
  correct chain passes it.
"""

import time

import pytest

from specjax import testing
from tests.planted_drafters import (BudgetShort, DepthOffByOne, DepthShort, GreedyProposalChain, MaxDepthShort,
                                    ParentForward, WrongParent, my_chain, planted)


def test_a_correct_drafter_from_outside_passes_every_check_in_the_quick_profile():
    start, cpu = time.perf_counter(), time.process_time()
    report = testing.assert_drafter(my_chain)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"assert_drafter quick profile: {wall:.1f} s wall, {cpu:.1f} s CPU, per check {report.seconds}")
    assert report.home == "zoo" and report.trees == testing.PROFILES["quick"].rounds
    assert "zoo" in report.greedy and len(report.greedy) >= 2  # random tiny targets, then the trained one
    tv, bound, law_on = report.law
    assert law_on == "law" and tv <= bound
    assert report.conformance.law == (0.0, 0.0) and report.conformance.max_accepted >= 1  # its law: step 3's
    assert set(report.seconds) == {"proposals", "greedy", "law", "conformance"}


@pytest.mark.parametrize("bug, complaint", [
    (ParentForward, r"round 0 .*node 1: parent 2 not before the node"),
    (WrongParent, r"round 0 .*depth 3 != parent depth \+ 1 = 2"),
    (BudgetShort, r"round 0: tree of shape \(3, 3\), expected \[B, budget\] = \(3, 2\)"),
    (MaxDepthShort, r"round 0: a node at depth 3 > max_depth 2"),
    (DepthOffByOne, r"round 0 .*depth 2 != parent depth \+ 1 = 1"),
    (DepthShort, r"round 0 .*depth 0 != parent depth \+ 1 = 1"),
])
def test_every_planted_tree_bug_fails_assert_drafter(bug, complaint):
    with pytest.raises(AssertionError, match=complaint):
        testing.assert_drafter(planted(bug))


def test_the_t1_conformance_check_fails_a_drafter_that_breaks_the_law():
    zoo = testing.zoo_target()
    draft_cfg, draft_params = zoo.draft
    with pytest.raises(AssertionError, match=r"at T = 1 .*law of the first round's tokens: total variation"):
        testing.assert_conforms(GreedyProposalChain(draft_cfg, 3), draft_params)
