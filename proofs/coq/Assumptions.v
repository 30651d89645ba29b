(* Assumptions.v -- no claim of its own: prints what each main theorem depends on.
   `make proofs` fails unless every line says "Closed under the global context"
   (nothing assumed, not even what the standard library may assume). *)
From Specjax Require Import GreedyWalk GraftCoverage DDTreeSurrogate DDTreeOrder ChainRejection
  SamplingWalk DDTreeSelect DDTreeHeap TreeAttention DDTreeWalk.

Print Assumptions greedy_walk_lossless.
Print Assumptions greedy_walk_progress.
Print Assumptions walk_accepts_longest_greedy_prefix.
Print Assumptions decode_lossless.
Print Assumptions decode_progress.
Print Assumptions walk_monotone.
Print Assumptions expected_walk_monotone.
Print Assumptions pruning_loses.
Print Assumptions grafting_cannot_lose.
Print Assumptions coverage_gain.
Print Assumptions coverage_gain_nonneg.
Print Assumptions ddtree_proposition1.
Print Assumptions ddtree_proposition2.
Print Assumptions ddtree_lemma1.
Print Assumptions lemma0_parent.
Print Assumptions lemma0_lower_ranks.
Print Assumptions lemma0_child_order.
Print Assumptions existence_of_the_order.
Print Assumptions uniqueness_of_the_order.
Print Assumptions chain_rejection_exact.
Print Assumptions chain_rejection_stream.
Print Assumptions residual_zero_no_rejection.
Print Assumptions sampling_walk_law.
Print Assumptions possible_spec.
Print Assumptions sampling_walk_expectation.
Print Assumptions sampling_walk_total.
Print Assumptions sampling_walk_stream.
Print Assumptions walk_expected_accepted.
Print Assumptions walk_expected_accepted_full.
Print Assumptions lexb_spec.
Print Assumptions first_n_prefixes_spec.
Print Assumptions select_spec.
Print Assumptions ranked_rq.
Print Assumptions select_proposition2.
Print Assumptions select_lemma1.
Print Assumptions ddtree_optimal_expected_acceptance.
Print Assumptions select_maximises_expected_acceptance.
Print Assumptions prune_initial_segment.
Print Assumptions prune_valid.
Print Assumptions prune_loss.
Print Assumptions lemma1_at_depth.
Print Assumptions level_spec.
Print Assumptions levels_select_spec.
Print Assumptions select_levels_spec.
Print Assumptions heap_key_is_order.
Print Assumptions heap_step.
Print Assumptions heap_select_spec.
Print Assumptions select_heap_spec.
Print Assumptions sequential_decoding_spec.
Print Assumptions tree_attention_exact_rows.
Print Assumptions tree_attention_exact.
Print Assumptions tree_logits_exact.
Print Assumptions commit_exact.
Print Assumptions alpha_greedy_walk.
Print Assumptions alpha_sampling_walk.
