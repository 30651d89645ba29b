"""Proposal policies on the one decode loop: every drafter implements `Drafter` (protocol.py).

    ChainDrafter, FixedTreeDrafter, DynaTreeDrafter   a draft LM: chain / fixed tree / DynaTree
    DFlashDrafter                                     chain DFlash (reads the target's features)
    DDTreeDrafter                                     DDTree: best-first tree from block marginals
    DominoDrafter                                     Domino: DFlash + the GRU / low-rank causal head
    Eagle2TreeDrafter (+ DraftLMStepper, Eagle3Stepper, eagle3_drafter)   the EAGLE-2 tree
    GraftDrafter (+ graft_params), DFlashTailDrafter, DDTreeGraftDrafter     Graft and retrieval
    TokenRecyclingDrafter, PromptLookupDrafter        training-free baselines
"""

from specjax.drafters.chain import ChainDrafter
from specjax.drafters.ddtree import DDTreeDrafter, select_tree, select_tree_scored
from specjax.drafters.ddtree_graft import DDTreeGraftDrafter
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.domino import DominoDrafter
from specjax.drafters.eagle2_tree import DraftLMStepper, Eagle2TreeDrafter
from specjax.drafters.dynatree import DynaTreeDrafter
from specjax.drafters.eagle3 import Eagle3Stepper, eagle3_drafter
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.drafters.graft import GraftDrafter, GraftParams, graft_params
from specjax.drafters.graft_dflash import DFlashTailDrafter
from specjax.drafters.prompt_lookup import PromptLookupDrafter
from specjax.drafters.protocol import BlockDrafter, CarriesOver, Drafter, PromptContext, Verified, Wrapper
from specjax.drafters.token_recycling import TokenRecyclingDrafter

__all__ = [
    "BlockDrafter", "CarriesOver", "Wrapper", "ChainDrafter", "DDTreeDrafter", "DDTreeGraftDrafter", "DFlashDrafter", "DFlashTailDrafter", "DominoDrafter",
    "DraftLMStepper", "Drafter", "DynaTreeDrafter", "Eagle2TreeDrafter", "Eagle3Stepper", "FixedTreeDrafter",
    "GraftDrafter", "GraftParams", "PromptContext", "PromptLookupDrafter", "TokenRecyclingDrafter", "Verified",
    "eagle3_drafter", "graft_params", "select_tree", "select_tree_scored",
]
