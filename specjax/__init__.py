"""specjax: tree-based speculative decoding as jit-compiled pure JAX functions.

The stable core, importable from here (shapes in each docstring; B batch, N tree budget,
D max depth, V vocabulary):

    generate, generate_ar, Sampling        the one decode loop (any drafter) and the AR baseline
    verify_tree, speculative_round         one verification round, reusable outside the loop
    initial_state, cache_sizes, LoopState, RoundStats, GenerateOutput, SpeculativeOutput
    Tree, ancestor_mask, node_positions, chain_tree, tree_from_lists, tree_from_paths,
        token_paths, check_tree            draft trees and what the verify forward derives from them
    walk, greedy_walk, sampling_walk, chain_rejection, WalkResult    verification rules
    select_tree, select_tree_scored        DDTree's surrogate-optimal tree from marginals
    forward, forward_tapped, prefill, prefill_tapped, init_cache, commit, KVCache,
        load_checkpoint, save_checkpoint, init_params, pad_prompts, GPTNeoXConfig, LlamaConfig
    Drafter, PromptContext, Verified and every drafter class (`specjax.drafters`)
    method, Method                         a method string ("ddtree-16") -> its drafter and params
    register, unregister, registered, load_methods, MethodSpec, Field, Build
                                           your own method by name (`specjax.drafters.registry`)
    Pipeline, Completion                   text in, text out: Pipeline.load("zoo", method="ddtree-8")
    generate_core, generate_ar_core        the traceable cores, for jax.jit / jax.vmap (`specjax.core`)

Subpackages: `models` (Flax ports), `drafters`, `bench`, `train`, `data`, `zoo`, `sharding`.
"""

from specjax.core import generate_ar_core, generate_core
from specjax.decode import (GenerateOutput, LoopState, RoundStats, SpeculativeOutput, cache_sizes, generate,
                            generate_ar, initial_state, speculative_round)
from specjax.drafters import *
from specjax.drafters import __all__ as _drafters_all
from specjax.drafters.registry import Method, load_methods, method, register, registered, unregister
from specjax.drafters.spec import Build, Field, MethodSpec
from specjax.models import (GPTNeoXConfig, KVCache, LlamaConfig, commit, forward, forward_tapped, init_cache,
                            init_params, load_checkpoint, pad_prompts, prefill, prefill_tapped, save_checkpoint)
from specjax.pipeline import Completion, Pipeline
from specjax.sampling import Sampling
from specjax.tree import (Tree, ancestor_mask, chain_tree, check_tree, node_positions, token_paths, tree_from_lists,
                          tree_from_paths)
from specjax.verify import TargetPass, WalkResult, chain_rejection, greedy_walk, sampling_walk, verify_tree, walk

__version__ = "0.1.0"

__all__ = [
    "GenerateOutput", "LoopState", "RoundStats", "SpeculativeOutput", "cache_sizes", "generate", "generate_ar",
    "initial_state", "speculative_round",
    "GPTNeoXConfig", "KVCache", "LlamaConfig", "commit", "forward", "forward_tapped", "init_cache", "init_params",
    "load_checkpoint", "pad_prompts", "prefill", "prefill_tapped", "save_checkpoint",
    "Sampling", "Method", "method", "register", "unregister", "registered", "load_methods", "MethodSpec", "Field",
    "Build", "Pipeline", "Completion", "generate_core", "generate_ar_core",
    "Tree", "ancestor_mask", "chain_tree", "check_tree", "node_positions", "token_paths", "tree_from_lists",
    "tree_from_paths",
    "TargetPass", "WalkResult", "chain_rejection", "greedy_walk", "sampling_walk", "verify_tree", "walk",
    *_drafters_all,
]
